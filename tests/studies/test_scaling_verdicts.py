"""Scaling verdicts on constructed profiles whose answer is known: every category UA is set exactly, so the
r(UA, preference) of each layer is a number chosen in advance (checked against scipy), and the peaks, their depths,
the stability verdict and the checks that can take it away follow by hand."""

import itertools
import json
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from layerscope.data.pairs import Category, PairDataset
from layerscope.engine.forward.activations import Activations, ExtractSettings
from layerscope.models.info import ModelInfo
from layerscope.studies.scaling import Scaling
from layerscope.studies.scaling.analysis import analyse_model, assess
from layerscope.studies.shared.inputs import PairRun

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hand_flips import hand_p_fwer, hand_random_null  # noqa: E402
from hand_flips import williams_t as hand_t  # noqa: E402

PREF = np.array([-1.2, -0.7, -0.4, -0.1, 0.2, 0.5, 0.9, 1.4])
"""Category preference NLL(B) - NLL(A) of the 8 categories."""
N_CAT = len(PREF)
LLAMA = "LlamaForCausalLM"
N_PERM = 2000


def designed_ua(rhos, seed: int) -> np.ndarray:
    """(N_CAT, len(rhos)) category UA whose column l has Pearson r = rhos[l] with PREF: rho * (unit PREF direction)
    + sqrt(1 - rho^2) * (a random unit direction orthogonal to it and to the constant), scaled into (0.7, 1.3)."""
    rng = np.random.default_rng(seed)
    zp = (PREF - PREF.mean()) / np.linalg.norm(PREF - PREF.mean())
    columns = []
    for rho in rhos:
        z = rng.normal(size=N_CAT)
        z -= z.mean()
        z -= (z @ zp) * zp
        columns.append(rho * zp + np.sqrt(1 - rho**2) * z / np.linalg.norm(z))
    return 1 + 0.3 * np.stack(columns, axis=1)


def states(ua: np.ndarray) -> np.ndarray:
    """(4 N_CAT, k, 2) pooled states whose category UA is ``ua`` (N_CAT, k) exactly. Each category has 2 pairs; its A
    states are all e1 (uniformity 1), its B states are e1 and a unit vector at cosine t = 1 - UA (uniformity t)."""
    t = 1 - ua
    out = np.zeros((N_CAT, 4, ua.shape[1], 2))  # per category: A0, B0, A1, B1
    out[:, [0, 1, 2], :, 0] = 1.0
    out[:, 3, :, 0], out[:, 3, :, 1] = t, np.sqrt(1 - t**2)
    return out.reshape(4 * N_CAT, ua.shape[1], 2).astype(np.float32)


def designed_run(name: str, n_layers: int, rhos, pre_rho: float, family: str = LLAMA, seed: int = 0,
                 no_pos0: tuple | None = None) -> tuple[PairRun, np.ndarray, np.ndarray]:
    """A run whose post-norm profile (layers 0..n_layers) has r = ``rhos`` and whose last block before the final
    norm has r = ``pre_rho``; "mean_no_pos0" follows ``no_pos0`` = (rhos, pre_rho) when given, else the mean.
    Returns (run, post-norm UA (N_CAT, n_layers + 1), pre-norm UA (N_CAT,))."""
    assert len(rhos) == n_layers + 1
    ua = designed_ua([*rhos, pre_rho], seed)
    pooled = {p: states(ua[:, :-1]) for p in ("mean", "last", "first", "mean_no_massive")}
    pre_norm = {p: states(ua[:, -1:])[:, 0] for p in pooled}
    if no_pos0 is None:
        pooled["mean_no_pos0"], pre_norm["mean_no_pos0"] = pooled["mean"], pre_norm["mean"]
    else:
        other = designed_ua([*no_pos0[0], no_pos0[1]], seed + 100)
        pooled["mean_no_pos0"], pre_norm["mean_no_pos0"] = states(other[:, :-1]), states(other[:, -1:])[:, 0]
    pairs = dataset()
    n_scored = np.full(4 * N_CAT, 10)
    nll_sum = np.where(np.arange(4 * N_CAT) % 2 == 0, 20.0, 20.0 + 10 * np.repeat(PREF, 4))  # B - A = PREF per token
    info = ModelInfo(name=name, source=name, revision=None, architecture=family, n_layers=n_layers, hidden_size=2,
                     vocab_size=10, bos_token_id=None, adds_bos=False, last_hidden_normed=True,
                     weights_hash="0" * 64, dtype="float32", device="cpu")
    acts = Activations(texts=pairs.texts(), pooled=pooled, pre_norm=pre_norm, nll_sum=nll_sum, n_scored=n_scored,
                       n_tokens=n_scored + 1, settings=ExtractSettings(), model=info, fingerprint="f" * 64)
    return PairRun(acts=acts, pairs=pairs, layers=list(range(n_layers + 1))), ua[:, :-1], ua[:, -1]


def dataset() -> PairDataset:
    categories = tuple(Category(name=f"c{c}", pairs=tuple((f"a{c}-{i}", f"b{c}-{i}") for i in range(2)))
                       for c in range(N_CAT))
    return PairDataset(categories=categories, source="designed")


def profile(n_layers: int, peak: int, height: float = 0.97, base: float = 0.3) -> list[float]:
    """r per layer 0..n_layers + the pre-norm last layer: ``base`` everywhere, ``height`` at ``peak``."""
    return [height if layer == peak else base for layer in range(n_layers + 1)]


def run_study(monkeypatch, tmp_path, runs: list[PairRun]):
    """Scaling.run on ``runs`` (as if extracted), with a dataset file of the same 8 categories."""
    from layerscope.studies.shared import inputs
    from layerscope.study.config import StudyConfig

    path = tmp_path / "pairs.json"
    path.write_text(json.dumps({c.name: {"pairs": [list(p) for p in c.pairs]} for c in dataset().categories}))
    monkeypatch.setattr(inputs, "pair_runs", lambda config, pairs, timings: iter(runs))
    config = StudyConfig(study="scaling", models=tuple(r.info.name for r in runs), dataset=str(path),
                         n_permutations=N_PERM)
    return Scaling().run(config)


def family_runs(peaks: dict[str, tuple[int, int]], family: str = LLAMA) -> list[PairRun]:
    """One designed run per name with (n_layers, peak layer); the peak is the post-norm r, pre-norm r = 0.3."""
    return [designed_run(name, n, profile(n, peak)[:-1] + [0.3], 0.3, family, seed=i)[0]
            for i, (name, (n, peak)) in enumerate(peaks.items())]


def test_designed_profiles_have_the_chosen_r_before_and_after_the_final_norm():
    run, ua, pre = designed_run("m", 4, [0.1, 0.5, 0.97, -0.4, 0.2], pre_rho=0.6)
    summary, rows = analyse_model(run, run.layers, "mean", n_permutations=N_PERM)
    main = {r["layer"]: r for r in rows if r["subset"] == "all" and r["metric"] == "r_ua_pref"}
    expected = [stats.pearsonr(ua[:, layer], PREF)[0] for layer in range(4)] + [stats.pearsonr(pre, PREF)[0]]
    np.testing.assert_allclose(expected, [0.1, 0.5, 0.97, -0.4, 0.6], atol=1e-12)  # the design itself
    np.testing.assert_allclose([main[layer]["value"] for layer in range(5)], expected, atol=1e-5)
    assert main[4]["stage"] == "pre_norm" and all("stage" not in main[layer] for layer in range(4))
    after = [r for r in rows if r["subset"] == "after the final norm"]
    assert [(r["layer"], r["stage"]) for r in after] == [(4, "post_norm")]
    assert after[0]["value"] == pytest.approx(stats.pearsonr(ua[:, 4], PREF)[0], abs=1e-5)  # the post-norm 0.2
    assert (summary["max_pos_layer"], summary["max_pos_pct"], summary["family"]) == (2, 50.0, LLAMA)
    assert summary["max_pos_significant"] and summary["max_pos_q"] < 0.05
    assert {r["subset"] for r in rows} == {"all", "without position 0", "without massive-activation tokens",
                                           "after the final norm", *(f"without c{c}" for c in range(N_CAT))}


def test_a_peak_at_the_embedding_layer_is_not_the_peak_by_default():
    rhos = [0.99, 0.2, 0.2, 0.2, 0.9, 0.2, 0.2, 0.2, 0.2]  # layer 0 highest, layer 4 next
    run, _, _ = designed_run("m", 8, rhos, pre_rho=0.2)
    default, _ = analyse_model(run, run.layers, "mean", n_permutations=N_PERM)
    assert (default["max_pos_layer"], default["max_pos_pct"]) == (4, 50.0)
    assert default["peak_layers"] == list(range(1, 9)) and default["max_pos_r"] == pytest.approx(0.9, abs=1e-5)
    seed, _ = analyse_model(run, run.layers, "mean", compat="notebooks")  # the notebooks' rule keeps layer 0
    assert seed["max_pos_layer"] == 0


def test_two_models_of_different_families_are_not_assessable(monkeypatch, tmp_path):
    runs = family_runs({"small": (8, 2)}) + family_runs({"other": (12, 3)}, family="Gemma3ForCausalLM")
    result = run_study(monkeypatch, tmp_path, runs)
    models, stability = result.summary["models"], result.summary["peak_stability"]
    assert {m: models[m]["family"] for m in models} == {"small": LLAMA, "other": "Gemma3ForCausalLM"}
    assert all(m["max_pos_significant"] for m in models.values())  # both peaks count, yet two families
    assert stability["verdict"] == "not assessable" and stability["peaks_stable"] is None
    assert stability["reason"] == "2 models of 2 families; needs >= 3 of one family"
    line = Scaling().headline(result)[0]
    assert "not assessable (2 models of 2 families; needs >= 3 of one family)" in line
    assert "n = 8 categories < 10" in line and "STABLE" not in line
    report = Scaling().report(result)
    assert "## Sensitivity checks" in report and "### small" in report and "### other" in report
    assert "leaves out the embedding layer (layer 0)" in report


@pytest.mark.parametrize("peaks, verdict", [
    ({"s": (8, 2), "m": (12, 3), "l": (16, 5)}, "STABLE"),   # 25%, 25%, 31.25%: range 6.25 < 10
    ({"s": (8, 2), "m": (12, 6), "l": (16, 12)}, "SHIFTS"),  # 25%, 50%, 75%: range 50 >= 10
])
def test_three_models_of_one_family_are_stable_or_shift_by_the_range_of_their_peak_depths(
        monkeypatch, tmp_path, peaks, verdict):
    result = run_study(monkeypatch, tmp_path, family_runs(peaks))
    models, stability = result.summary["models"], result.summary["peak_stability"]
    depths = [100 * layer / n for n, layer in peaks.values()]  # by hand
    assert [models[m]["max_pos_pct"] for m in peaks] == pytest.approx(depths)
    assert all(models[m]["max_pos_significant"] and models[m]["max_pos_q"] < 0.05 for m in peaks)
    assert stability["verdict"] == verdict and stability["peaks_stable"] is (verdict == "STABLE")
    assert stability["range_peak_pct"] == pytest.approx(max(depths) - min(depths))
    assert stability["sd_peak_pct"] == pytest.approx(statistics.stdev(depths))  # n - 1
    assert stability["mean_peak_pct"] == pytest.approx(statistics.mean(depths)) and stability["reason"] is None
    assert stability["robustness"].startswith("robust to all ")  # every check keeps the peaks
    line = Scaling().headline(result)[0]
    assert f"{verdict}: the peak position" in line and "robust to all 11 sensitivity checks" in line


def test_a_non_significant_peak_makes_the_family_not_assessable(monkeypatch, tmp_path):
    runs = family_runs({"s": (8, 2), "m": (12, 3)})
    weak, ua, _ = designed_run("weak", 16, profile(16, 5, height=0.45, base=0.1)[:-1] + [0.1], 0.1, seed=7)
    result = run_study(monkeypatch, tmp_path, [*runs, weak])
    m, stability = result.summary["models"]["weak"], result.summary["peak_stability"]
    assert m["max_pos_layer"] == 5 and stats.pearsonr(ua[:, 5], PREF)[1] > 0.2  # by design: r = 0.45, n = 8
    assert not m["max_pos_significant"] and m["max_pos_q"] >= 0.05
    assert stability["verdict"] == "not assessable"
    assert stability["reason"] == (f"3 models of 1 family; peak of weak not significant (q = {m['max_pos_q']:.3f}); "
                                   f"2 of the 3 {LLAMA} peaks significant; needs >= 3")
    assert "not significant" in m["peak"] and "q = " in m["peak"]


def test_a_peak_that_moves_without_position_0_makes_the_verdict_not_robust(monkeypatch, tmp_path):
    stable = family_runs({"s": (8, 2), "m": (12, 3)})
    moved = profile(16, 12)[:-1] + [0.3]  # without position 0 the peak of "l" is at 75%, not 31%
    last, _, _ = designed_run("l", 16, profile(16, 5)[:-1] + [0.3], 0.3, seed=2, no_pos0=(moved, 0.3))
    result = run_study(monkeypatch, tmp_path, [*stable, last])
    m, stability = result.summary["models"]["l"], result.summary["peak_stability"]
    check = next(c for c in m["checks"] if c["check"] == "without position 0")
    assert (check["layer"], check["value"], check["flips"]) == (12, 75.0, True)
    assert m["robustness"] == "not robust: flips without position 0"
    assert stability["verdict"] == "STABLE" and stability["robustness"] == "not robust: flips without position 0"
    under = next(c for c in stability["checks"] if c["check"] == "without position 0")
    assert under["label"] == "SHIFTS" and under["value"] == pytest.approx(75.0 - 25.0)
    assert "not robust: flips without position 0" in Scaling().headline(result)[0]


def williams_p(r12: float, r13: float, r23: float, n: int) -> float:
    """Steiger (1980) eq. 7, written out: two-sided p of Williams' t, df = n - 3."""
    det = 1 - r12**2 - r13**2 - r23**2 + 2 * r12 * r13 * r23
    t = (r12 - r13) * np.sqrt((n - 1) * (1 + r23) / (2 * (n - 1) / (n - 3) * det + ((r12 + r13) / 2) ** 2
                                                        * (1 - r23) ** 3))
    return 2 * stats.t.sf(abs(t), n - 3)


def test_sign_changes_are_split_by_williams_test_calibrated_by_max_t_permutations():
    rhos = [0.3, 0.5, 0.7, 0.9, -0.9, -0.5, 0.1, -0.1]
    run, ua, pre = designed_run("m", 8, [*rhos, 0.2], pre_rho=0.2, seed=4)
    summary, _ = analyse_model(run, run.layers, "mean", n_permutations=N_PERM)
    x = np.column_stack([ua[:, :8], pre])
    candidates = [(i, i + 1) for i in range(8) if np.sign(stats.pearsonr(x[:, i], PREF)[0])
                  != np.sign(stats.pearsonr(x[:, i + 1], PREF)[0])]
    assert candidates == [(3, 4), (5, 6), (6, 7), (7, 8)]
    p = [williams_p(stats.pearsonr(x[:, j], PREF)[0], stats.pearsonr(x[:, i], PREF)[0],
                    stats.pearsonr(x[:, i], x[:, j])[0], N_CAT) for i, j in candidates]
    t = [hand_t(stats.pearsonr(x[:, j], PREF)[0], stats.pearsonr(x[:, i], PREF)[0],
                stats.pearsonr(x[:, i], x[:, j])[0], N_CAT) for i, j in candidates]
    null = hand_random_null(x, PREF, N_PERM, 7)  # N_PERM orderings of our own; the study draws its own N_PERM
    p_fwer = [hand_p_fwer(x, PREF, ti, null) for ti in t]
    significant = [pair for pair, pi in zip(candidates, p_fwer, strict=False) if pi < 0.05]
    noise = [pair for pair, pi in zip(candidates, p_fwer, strict=False) if pi >= 0.05]
    assert (3, 4) in significant and (6, 7) in noise  # +0.9 -> -0.9 is real; +0.1 -> -0.1 is noise
    assert [(f["layer_before"], f["layer_after"]) for f in summary["sign_changes"]] == significant
    assert [(f["layer_before"], f["layer_after"]) for f in summary["sign_flips_within_noise"]] == noise
    flips = summary["sign_changes"] + summary["sign_flips_within_noise"]
    assert sorted(f["p"] for f in flips) == pytest.approx(sorted(p), rel=1e-4)
    error = 4 * np.sqrt(2 * np.array(sorted(p_fwer)) * (1 - np.array(sorted(p_fwer))) / N_PERM) + 2 / N_PERM
    assert np.all(np.abs(np.array(sorted(f["p_fwer"] for f in flips)) - sorted(p_fwer)) <= error)
    assert summary["sign_changes"][0]["midpoint_pct"] == pytest.approx(3.5 / 8 * 100)


def test_assess_decides_per_family_and_shifts_when_one_family_does():
    def model(family, pct, significant=True):
        return {"family": family, "max_pos_pct": pct, "max_pos_r": 0.9, "max_pos_q": 0.01 if significant else 0.3,
                "max_pos_significant": significant, "depth_step_pct": 5.0}

    stable = {f"a{i}": model("A", pct) for i, pct in enumerate([40.0, 45.0, 48.0])}
    out = assess({**stable, "b0": model("B", 10.0)})
    assert out["verdict"] == "STABLE" and [f["verdict"] for f in out["families"]] == ["STABLE", "not assessable"]
    assert out["range_peak_pct"] == 8.0 and "in A" in out["answer"]
    shifting = {f"b{i}": model("B", pct) for i, pct in enumerate([10.0, 30.0, 35.0])}
    out = assess({**stable, **shifting})
    assert out["verdict"] == "SHIFTS" and out["range_peak_pct"] is None  # two families assessed: see each
    assert [(f["family"], f["verdict"], f["range_peak_pct"]) for f in out["families"]] == [
        ("A", "STABLE", 8.0), ("B", "SHIFTS", 25.0)]
    edge = assess({f"a{i}": model("A", pct) for i, pct in enumerate([40.0, 45.0, 50.0])})
    assert edge["verdict"] == "SHIFTS"  # a range of exactly 10 points is not below 10
    assert list(itertools.chain(*(f["models"] for f in out["families"]))) == [*stable, *shifting]

"""Each null run of :mod:`layerscope.validation.nulls`: its instance rows against the instance rebuilt by a hand
loop (the seed's permutation applied pair by pair or text by text, the headline numbers by the notebooks' loops, the
statuses by the study's own run on the relabelled data), on the tiny random models. The relabelings themselves and
the false-alarm counts are in test_relabelings.py."""

import dataclasses
import json

import numpy as np
import pytest

import notebook_reference as notebook
import tiny
from layerscope.data import load_pairs
from layerscope.engine import extract
from layerscope.studies.shared.inputs import PairRun
from layerscope.study.config import StudyConfig
from layerscope.study.settings import ConfigError
from layerscope.validation import nulls

# -- the null runs on the tiny models --------------------------------------------------------------------------

def load_pairs_of(data, folder):
    path = folder / "pairs.json"
    path.write_text(json.dumps(data))
    return load_pairs(path)


@pytest.fixture(scope="module")
def tiny_model():
    return tiny.tiny_lm("llama", adds_bos=False)


@pytest.fixture
def pair_file(tmp_path):
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps(tiny.pairs(4, 12)))
    return str(path)


def hand_relabelled(acts, pairs, order) -> PairRun:
    """The run whose pair i has the NLLs of pair order[i], made pair by pair."""
    nll_sum, n_scored = np.empty_like(acts.nll_sum), np.empty_like(acts.n_scored)
    for i, j in enumerate(order):
        for side in (0, 1):
            nll_sum[2 * i + side], n_scored[2 * i + side] = acts.nll_sum[2 * j + side], acts.n_scored[2 * j + side]
    acts = dataclasses.replace(acts, nll_sum=nll_sum, n_scored=n_scored)
    return PairRun(acts=acts, pairs=pairs, layers=list(range(acts.model.n_layers + 1)))


def hand_prefs(acts, order):
    return np.array([acts.nll_sum[2 * j + 1] / acts.n_scored[2 * j + 1] - acts.nll_sum[2 * j] / acts.n_scored[2 * j]
                     for j in order])


def test_divergence_null_instances_match_the_hand_shuffled_run(tiny_model, pair_file):
    from layerscope.studies.divergence import Divergence
    from layerscope.studies.divergence.analysis import analyse_run

    rows = nulls.divergence_null(tiny_model, n_null=3, seed=5, dataset=pair_file, n_permutations=200)
    assert len(rows) == 9 and {r["verdict"] for r in rows} == {nulls.DIVERGENCE_HEADLINE, nulls.DIVERGENCE_POINT,
                                                                 nulls.DIVERGENCE_LAYER}
    pairs = load_pairs(pair_file)
    acts = extract(tiny_model, pairs.texts(), cache=False)
    cats, n_layers = pairs.pair_categories(), tiny_model.info.n_layers
    config = StudyConfig("divergence", models=(tiny_model,), dataset=pair_file, n_permutations=200)
    for i in range(3):
        order = np.random.default_rng([5, i]).permutation(pairs.n_pairs)
        pref = hand_prefs(acts, order)
        x = np.asarray(acts.pre_norm["mean"], dtype=np.float64)  # the headline: the last layer, pre-norm
        a, b = x[0::2], x[1::2]
        ua = [notebook.uniformity(a[cats == c]) - notebook.uniformity(b[cats == c]) for c in range(4)]
        r = np.corrcoef(ua, [pref[cats == c].mean() for c in range(4)])[0, 1]
        mine = {row["verdict"]: row for row in rows if row["instance"] == i}
        head = mine[nulls.DIVERGENCE_HEADLINE]
        assert head["value"] == pytest.approx(r, abs=1e-6), i
        s, _ = analyse_run(hand_relabelled(acts, pairs, order), config)  # the study itself on the hand relabeling
        (v,) = Divergence.verdicts(nulls.result_of("divergence", config, {"models": {"x": s}, "warnings": []}))
        assert head["status"] == v.status and head["printed"] == (v.status in ("holds and robust",
                                                                                "holds but fragile"))
        assert mine[nulls.DIVERGENCE_POINT]["printed"] == bool(s["divergence_points"]["mean"])
        assert mine[nulls.DIVERGENCE_LAYER]["value"] == len(s["significant_layers"]["mean"])
        assert s["layers"][-1] == n_layers and head["seed"] == 5 and head["null"] == nulls.SHUFFLED
    assert len({row["value"] for row in rows if row["verdict"] == nulls.DIVERGENCE_HEADLINE}) == 3


def test_divergence_point_instances_continue_the_full_ones_and_equal_the_study(tiny_model, pair_file):
    from layerscope.studies.divergence.analysis import analyse_run

    full = nulls.divergence_null(tiny_model, n_null=3, seed=5, dataset=pair_file, n_permutations=200)
    cheap = nulls.divergence_point_null(tiny_model, n_null=3, seed=5, first=1, dataset=pair_file, n_permutations=200)
    assert [r["instance"] for r in cheap] == [1, 1, 2, 2, 3, 3]
    assert {r["verdict"] for r in cheap} == {nulls.DIVERGENCE_POINT, nulls.DIVERGENCE_LAYER}
    keys = ("verdict", "printed", "value", "label", "status")
    for i in (1, 2):  # the same shuffles as the full instances, the same verdicts
        assert ([{k: r.get(k) for k in keys} for r in cheap if r["instance"] == i]
                == [{k: r.get(k) for k in keys} for r in full if r["instance"] == i and r["verdict"] !=
                    nulls.DIVERGENCE_HEADLINE])
    pairs = load_pairs(pair_file)
    acts = extract(tiny_model, pairs.texts(), cache=False)
    config = StudyConfig("divergence", models=(tiny_model,), dataset=pair_file, n_permutations=200)
    order = np.random.default_rng([5, 3]).permutation(pairs.n_pairs)  # instance 3: a new shuffle, by hand
    s, _ = analyse_run(hand_relabelled(acts, pairs, order), config)
    mine = {r["verdict"]: r for r in cheap if r["instance"] == 3}
    assert mine[nulls.DIVERGENCE_LAYER]["label"] == s["significant_layers"]["mean"]
    assert mine[nulls.DIVERGENCE_POINT]["value"] == len(s["divergence_points"]["mean"])


def test_phases_null_instances_match_the_hand_shuffled_run(tiny_model, pair_file):
    from layerscope.studies.phases.analysis import analyse_run

    settings = {"dataset": pair_file, "n_permutations": 200, "n_bootstrap": 200}
    rows = nulls.phases_null(tiny_model, n_null=2, seed=1, **settings)
    pairs = load_pairs(pair_file)
    acts = extract(tiny_model, pairs.texts(), cache=False)
    a, b = acts.pre_norm["mean"][0::2].astype(np.float64), acts.pre_norm["mean"][1::2].astype(np.float64)

    def loo_cos(x, i):  # cos(x_i, the centroid of the other pairs)
        c = (x.sum(axis=0) - x[i]) / (len(x) - 1)
        return x[i] @ c / (np.linalg.norm(x[i]) * np.linalg.norm(c))

    asym = np.array([loo_cos(a, i) - loo_cos(b, i) for i in range(len(a))])
    config = StudyConfig("phases", models=(tiny_model,), **settings)
    for i in range(2):
        order = np.random.default_rng([1, i]).permutation(pairs.n_pairs)
        mine = {row["verdict"]: row for row in rows if row["instance"] == i}
        assert mine[nulls.PHASES_LATE]["value"] == pytest.approx(np.corrcoef(asym, hand_prefs(acts, order))[0, 1],
                                                                 abs=1e-6)
        s, _ = analyse_run(hand_relabelled(acts, pairs, order), config)
        assert mine[nulls.PHASES_LATE]["label"] == s["late_label"]
        assert mine[nulls.PHASES_PATTERN]["label"] == s["pattern"]
        assert mine[nulls.PHASES_PATTERN]["printed"] == (s["pattern"] in ("PYTHIA_PATTERN", "LATE_INVERSION"))
        assert mine[nulls.PHASES_LAYER]["printed"] == bool(s["significant_layers"])


def test_scaling_nulls_match_hand_loops(tiny_model, pair_file):
    from layerscope.studies.scaling.analysis import analyse_run, peak_verdict

    settings = {"dataset": pair_file, "n_permutations": 200}
    pairs = load_pairs(pair_file)
    acts = extract(tiny_model, pairs.texts(), cache=False)
    cats, n_layers = pairs.pair_categories(), tiny_model.info.n_layers
    rows = nulls.scaling_null(tiny_model, n_null=2, seed=3, **settings)
    for i, row in enumerate(rows):
        pref = hand_prefs(acts, np.random.default_rng([3, i]).permutation(pairs.n_pairs))
        p = [pref[cats == c].mean() for c in range(4)]
        rs = []
        for layer in range(1, n_layers + 1):  # the peak search leaves out the embedding layer 0
            x = np.asarray(acts.pre_norm["mean"] if layer == n_layers else acts.pooled["mean"][:, layer], np.float64)
            ua = [notebook.uniformity(x[0::2][cats == c]) - notebook.uniformity(x[1::2][cats == c]) for c in range(4)]
            rs.append(np.corrcoef(ua, p)[0, 1])
        assert row["verdict"] == nulls.SCALING_PEAK and row["value"] == pytest.approx(max(rs), abs=1e-6)
    config = StudyConfig("scaling", models=(tiny_model,), **settings)
    split = nulls.scaling_split_null(tiny_model, n_null=2, seed=8, **settings)
    run = hand_relabelled(acts, pairs, np.arange(pairs.n_pairs))
    for i in range(2):
        rng, parts, start = np.random.default_rng([8, i]), [[], [], []], 0
        for c in pairs.categories:
            for j, pair in enumerate(start + rng.permutation(len(c.pairs))):
                parts[j % 3].append(int(pair))
            start += len(c.pairs)
        models = {f"part {k}": analyse_run(run.select(sorted(part)), config)[0] for k, part in enumerate(parts)}
        verdict = peak_verdict(models)["verdict"]
        shifts, assessed = (r for r in split if r["instance"] == i)
        assert shifts["label"] == verdict and assessed["printed"] == (verdict != "not assessable")
        assert shifts["printed"] == (verdict == "SHIFTS")
    two, three = (nulls.scaling_self_copy(tiny_model, copies=k, **settings) for k in (2, 3))
    assert [r["label"] for r in two] == ["not assessable"] * 2 and not any(r["printed"] for r in two)
    assert three[0]["printed"] is False and three[0]["label"] in ("STABLE", "not assessable")
    assert three[0]["value"] in (0.0, None)  # three copies: the peaks coincide, so the range is 0


def test_ablation_null_instances_are_the_seeded_relabelings(tiny_model, languages, tmp_path):
    path = tmp_path / "langs.json"
    path.write_text(json.dumps({lang.code: {"resource": lang.resource, "texts": list(lang.texts)}
                                for lang in languages.languages}))
    rows = nulls.ablation_null(tiny_model, n_null=2, seed=9, texts=str(path), n_bootstrap=100)
    assert len(rows) == 2 * 3 * 2  # instances x verdicts x variants (the primary and the notebook's)
    config = StudyConfig("ablation", models=(tiny_model,), texts=str(path), n_bootstrap=100)
    scores, model, n, order, variants, _ = nulls.ablation_scores(config)
    for i in range(2):
        relabelled = dataclasses.replace(scores, per_text=nulls.permute_languages(
            scores.per_text, np.random.default_rng([9, i])))
        expected = nulls.ablation_verdicts(relabelled, model, n, order, variants, config)
        got = [r for r in rows if r["instance"] == i]
        assert [(r["verdict"], r["label"], r["printed"]) for r in got] == \
            [(r["verdict"], r["label"], r["printed"]) for r in expected]
        assert [r["value"] for r in got] == pytest.approx([r["value"] for r in expected], nan_ok=True)


def test_probe_null_instances_match_the_study_run_on_the_flipped_dataset(tiny_model, tmp_path):
    from layerscope.studies.probe import Probe

    data = tiny.pairs(4, 12)
    settings = {"n_bootstrap": 100, "n_permutations": 20, "control_seeds": 2, "folds": 3}
    original = tmp_path / "pairs.json"
    original.write_text(json.dumps(data))
    rows = nulls.probe_null(tiny_model, n_null=2, seed=4, dataset=str(original), **settings)
    assert len(rows) == 2 * 5  # instances x (4 categories' sides + the pooled side)
    pairs = load_pairs(original)
    for i in range(2):
        flips = np.random.default_rng([4, i]).random(pairs.n_pairs) < 0.5
        k, flipped = 0, {}
        for name, body in data.items():  # the dataset file written again with the coin's pairs swapped
            flipped[name] = {"pairs": []}
            for a, b in body["pairs"]:
                flipped[name]["pairs"].append([b, a] if flips[k] else [a, b])
                k += 1
        path = tmp_path / f"flipped{i}.json"
        path.write_text(json.dumps(flipped))
        result = Probe().run(StudyConfig("probe", models=(tiny_model,), dataset=str(path), steer=False, **settings))
        entries = result.summary["models"][tiny_model.info.name]["label_sets"]
        want = {name: v for name in entries for v in Probe.verdicts(result)
                if v.claim.startswith((f"{name}: ", f"{name} ("))}  # a verdict's claim starts with its label set
        got = {r["verdict"]: r for r in rows if r["instance"] == i}
        for name, entry in entries.items():  # the study's own extraction and run on the relabelled texts
            row = got[nulls.PROBE_DECODABLE.format(name=name)]
            assert row["label"] == entry["probes"]["logreg"]["decodable_states"]
            assert row["value"] == pytest.approx(entry["probes"]["logreg"]["best_gain"], abs=1e-6)
            assert row["status"] == want[name].status
        assert set(got) == {nulls.PROBE_DECODABLE.format(name=name) for name in entries}


def test_bad_null_settings_name_the_fix(tiny_model, pair_file):
    with pytest.raises(ConfigError, match="n_null must be"):
        nulls.divergence_null(tiny_model, n_null=0, dataset=pair_file)
    with pytest.raises(ConfigError, match="seed must be"):
        nulls.phases_null(tiny_model, n_null=1, seed=-1, dataset=pair_file)
    with pytest.raises(ConfigError, match="max_seconds"):
        nulls.scaling_null(tiny_model, n_null=1, max_seconds=0, dataset=pair_file)
    with pytest.raises(ConfigError, match="leave compat out"):
        nulls.divergence_null(tiny_model, n_null=1, compat="notebooks", dataset=pair_file)
    with pytest.raises(ConfigError, match="label_sets='side'"):
        nulls.probe_null(tiny_model, n_null=1, label_sets="side,category", dataset=pair_file)
    with pytest.raises(ConfigError, match="copies"):
        nulls.scaling_self_copy(tiny_model, copies=1, dataset=pair_file)


def test_max_seconds_stops_starting_instances(tiny_model, pair_file):
    rows = nulls.divergence_null(tiny_model, n_null=50, seed=0, max_seconds=1e-9, dataset=pair_file,
                                 n_permutations=200)
    assert {r["instance"] for r in rows} == {0}  # the first runs; none starts once the budget is spent


def test_a_planted_link_is_printed_and_the_shuffle_breaks_it(tiny_model, tmp_path):
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps(tiny.pairs(7, 8)))
    pairs = load_pairs(path)
    acts = extract(tiny_model, pairs.texts(), cache=False)
    cats = pairs.pair_categories()
    x = np.asarray(acts.pre_norm["mean"], dtype=np.float64)  # the last tested layer, before the final norm
    a, b = x[0::2], x[1::2]
    ua = np.array([notebook.uniformity(a[cats == c]) - notebook.uniformity(b[cats == c]) for c in range(7)])

    def planted(pref):  # NLL(A) = 3 nats per token, NLL(B) = 3 + pref
        nll_sum = acts.n_scored * 3.0
        nll_sum[1::2] = acts.n_scored[1::2] * (3.0 + np.asarray(pref))
        return PairRun(dataclasses.replace(acts, nll_sum=nll_sum), pairs, list(range(tiny_model.info.n_layers + 1)))

    settings = {"dataset": str(path), "n_permutations": 500}
    # divergence and the scaling peak: every pair's preference 10 x its category's UA, so r = +1 at the last layer
    run = planted(10 * ua[cats])
    every = nulls.divergence_verdicts(run, StudyConfig("divergence", models=(tiny_model,), **settings))
    head = every[0]
    points = nulls.divergence_point_verdicts(run, StudyConfig("divergence", models=(tiny_model,), **settings))
    assert points == every[1:] and points[1]["verdict"] == nulls.DIVERGENCE_LAYER and points[1]["value"] >= 1
    assert head["value"] == pytest.approx(1.0, abs=1e-9) and head["printed"] and head["status"] in nulls.PRINTED
    config = StudyConfig("scaling", models=(tiny_model,), **settings)
    summary, table = nulls.scaling_verdicts({"m": run}, config)
    assert summary["models"]["m"]["max_pos_r"] == pytest.approx(1.0, abs=1e-9) and table[1].status in nulls.PRINTED
    two, three = (nulls.self_copy_verdicts(run, config, k) for k in (2, 3))  # the significant peak, copied
    assert [(r["label"], r["printed"]) for r in two] == [("not assessable", False)] * 2
    assert [(r["verdict"], r["label"], r["printed"], r["value"]) for r in three] == [
        (nulls.SCALING_SHIFTS, "STABLE", False, 0.0), (nulls.SCALING_ANY, "STABLE", True, 3)]
    shuffled = [nulls.divergence_verdicts(nulls.shuffled_run(run, np.random.default_rng([0, i])),
                                          StudyConfig("divergence", models=(tiny_model,), **settings))[0]
                for i in range(5)]
    assert sum(r["printed"] for r in shuffled) <= 1 and all(abs(r["value"]) < 0.99 for r in shuffled)

    def loo_cos(v, i):
        c = (v.sum(axis=0) - v[i]) / (len(v) - 1)
        return v[i] @ c / (np.linalg.norm(v[i]) * np.linalg.norm(c))

    asym = np.array([loo_cos(a, i) - loo_cos(b, i) for i in range(len(a))])
    # phases: every pair's preference -5 x its centroid asymmetry, so r = -1 at the last layer: an inversion
    late = {r["verdict"]: r for r in nulls.phases_verdicts(planted(-5 * asym), StudyConfig(
        "phases", models=(tiny_model,), n_bootstrap=200, **settings))}
    assert late[nulls.PHASES_LATE]["value"] == pytest.approx(-1.0, abs=1e-9)
    assert late[nulls.PHASES_LATE]["printed"] and late[nulls.PHASES_LATE]["label"] == "CONFIRMED"
    assert late[nulls.PHASES_LAYER]["printed"]

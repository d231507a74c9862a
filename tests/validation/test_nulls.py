"""The null relabelings of :mod:`layerscope.validation.nulls` and the false-alarm counts, recomputed rather than
trusted: each relabeling by value (a seeded permutation of its inputs, the right unit moved, not the identity);
the Wilson interval against published and hand-computed numbers; the false-alarm summary recounted from tidy
rows; and each null run's instance rows against the instance rebuilt by a hand loop (the seed's permutation
applied pair by pair or text by text, the headline numbers by the notebooks' loops, the statuses by the study's
own run on the relabelled data), on the tiny random models."""

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest

import notebook_reference as notebook
import synthetic
import tiny
from layerscope.data import load_pairs
from layerscope.engine import extract
from layerscope.studies.shared.inputs import PairRun
from layerscope.study.config import StudyConfig
from layerscope.study.settings import ConfigError
from layerscope.validation import nulls

# -- the relabelings ----------------------------------------------------------------------------------------------

def test_shuffle_preferences_is_a_seeded_permutation_of_the_values():
    prefs = np.array([0.5, -1.25, 2.0, 0.0, 3.5, -0.75, 1.0, 4.25])
    out = nulls.shuffle_preferences(prefs, np.random.default_rng(3))
    assert sorted(out.tolist()) == sorted(prefs.tolist())  # the same values
    assert out.tolist() != prefs.tolist()  # moved (seed 3 is not the identity)
    assert out.tolist() == prefs[np.random.default_rng(3).permutation(8)].tolist()  # the documented draw
    assert out.tolist() == nulls.shuffle_preferences(prefs, np.random.default_rng(3)).tolist()  # reproducible
    assert out.tolist() != nulls.shuffle_preferences(prefs, np.random.default_rng(4)).tolist()
    assert prefs.tolist() == [0.5, -1.25, 2.0, 0.0, 3.5, -0.75, 1.0, 4.25]  # the input is left alone
    # n = 2: both orders come up over seeds, so it is not the identity by construction
    seen = {tuple(nulls.shuffle_preferences(np.array([1.0, 2.0]), np.random.default_rng(s))) for s in range(40)}
    assert seen == {(1.0, 2.0), (2.0, 1.0)}


def test_bad_relabeling_inputs_name_the_fix():
    with pytest.raises(TypeError, match="np.random.default_rng"):
        nulls.shuffle_preferences([1.0, 2.0], 7)
    with pytest.raises(ValueError, match=r"shape \(n_pairs,\)"):
        nulls.shuffle_preferences(np.ones((3, 2)), np.random.default_rng(0))
    run = synthetic.pair_run(sizes=(3, 3, 3, 3))
    with pytest.raises(ValueError, match="permutation of the 12 pair positions"):
        nulls.with_pair_order(run, [0] * 12)
    with pytest.raises(ValueError, match="Scores.per_text"):
        nulls.permute_languages(pd.DataFrame({"lang": ["en"], "sample": [0]}), np.random.default_rng(0))
    with pytest.raises(ValueError, match="one bool per pair"):
        nulls.flip_pairs(run.pairs, [True, False])
    with pytest.raises(ValueError, match="fewer splits"):
        nulls.split_pairs(run.pairs, 2, np.random.default_rng(0))  # 3 pairs per category < 2 x 2


def test_shuffled_run_moves_each_pairs_two_scores_together_across_categories_and_keeps_the_geometry():
    run = synthetic.pair_run(seed=1)
    n = run.pairs.n_pairs
    new = nulls.shuffled_run(run, np.random.default_rng(11))
    order = np.random.default_rng(11).permutation(n)
    for i in range(n):  # pair i carries both scores of pair order[i]
        for side in (0, 1):
            assert new.acts.nll_sum[2 * i + side] == run.acts.nll_sum[2 * order[i] + side]
            assert new.acts.n_scored[2 * i + side] == run.acts.n_scored[2 * order[i] + side]
    hand_pref = [run.acts.nll_sum[2 * j + 1] / run.acts.n_scored[2 * j + 1]
                 - run.acts.nll_sum[2 * j] / run.acts.n_scored[2 * j] for j in order]
    assert new.pref == pytest.approx(hand_pref, rel=1e-12)
    assert new.pref.tolist() == nulls.shuffle_preferences(run.pref, np.random.default_rng(11)).tolist()
    assert sorted(new.pref.tolist()) == sorted(run.pref.tolist()) and new.pref.tolist() != run.pref.tolist()
    cats = run.pairs.pair_categories()
    assert (cats[order] != cats).any()  # preferences cross categories: the unit is the pair, not the category
    for pooling in ("mean", "last", "first"):  # the geometry stays
        assert np.array_equal(np.asarray(new.a(pooling)), np.asarray(run.a(pooling)))
        assert np.array_equal(np.asarray(new.b(pooling)), np.asarray(run.b(pooling)))
    assert new.pairs == run.pairs and np.array_equal(new.acts.n_tokens, run.acts.n_tokens)


def per_text_frame(degrade):
    """Per-text scores as the ablation runner writes them: per variant and configuration every text in file order
    (en, de: high; sw, yo: low; 3 texts each), nll = baseline + ``degrade(config, lang, sample)``."""
    langs = {"en": "high", "de": "high", "sw": "low", "yo": "low"}
    from layerscope.studies.ablation.configs import standard_configs

    rows = []
    for config, lc in standard_configs(4).items():
        for lang, resource in langs.items():
            for sample in range(3):
                base = 2.0 + 0.1 * sample + 0.05 * list(langs).index(lang)
                rows.append({"config": config, "variant": "per-channel/linear", "lang": lang, "resource": resource,
                             "sample": sample, "n_quantized": len(lc.quantize), "n_scored": 10,
                             "nll": base + (0.0 if config == "baseline" else degrade(config, lang, sample))})
    frame = pd.DataFrame(rows)
    frame["ppl"] = np.exp(frame["nll"])
    return frame


def test_permute_languages_moves_whole_texts_and_their_resource_level():
    per_text = per_text_frame(lambda config, lang, sample: 0.01 * (1 + sample) + 0.2 * (lang in ("sw", "yo")))
    resource = {"en": "high", "de": "high", "sw": "low", "yo": "low"}
    out = nulls.permute_languages(per_text, np.random.default_rng(5))
    keys = list(dict.fromkeys(zip(per_text["lang"], per_text["sample"], strict=True)))  # 12 texts, file order
    order = np.random.default_rng(5).permutation(len(keys))
    new_label = {keys[t]: keys[order[t]] for t in range(len(keys))}  # by hand: text t takes text order[t]'s label
    by_old = per_text.set_index(["config", "lang", "sample"])["nll"]
    by_new = out.set_index(["config", "lang", "sample"])["nll"]
    for config in per_text["config"].unique():
        for old, new in new_label.items():  # every configuration moves the text alike (scores stay with it)
            assert by_new[(config, *new)] == by_old[(config, *old)]
    assert all(out["resource"] == out["lang"].map(resource))  # the resource level follows the new language
    for _, block in out.groupby(["variant", "config"], sort=False):  # each key once; each language keeps 3 texts
        assert sorted(zip(block["lang"], block["sample"], strict=True)) == sorted(keys)
        assert block["lang"].value_counts().to_dict() == {"en": 3, "de": 3, "sw": 3, "yo": 3}
        assert list(zip(block["lang"], block["sample"], strict=True)) == keys  # back in file order
    assert len(out) == len(per_text) and list(out["config"]) == list(per_text["config"])
    moved = [old for old, new in new_label.items() if resource[old[0]] != resource[new[0]]]
    assert moved  # some text changes resource level: not the identity, nor within a resource level
    again = nulls.permute_languages(per_text, np.random.default_rng(5))
    assert again.equals(out)
    assert not nulls.permute_languages(per_text, np.random.default_rng(6)).equals(out)


def test_coin_flip_pairs_swaps_whole_pairs_by_a_fair_coin(tmp_path):
    pairs = load_pairs_of(tiny.pairs(4, 10), tmp_path)
    flipped = nulls.coin_flip_pairs(pairs, np.random.default_rng(2))
    flips = np.random.default_rng(2).random(pairs.n_pairs) < 0.5  # by hand: a coin per pair
    old = [p for c in pairs.categories for p in c.pairs]
    new = [p for c in flipped.categories for p in c.pairs]
    for i, (a, b) in enumerate(old):  # each pair stays in its place, swapped or not
        assert new[i] == ((b, a) if flips[i] else (a, b))
    assert 0 < flips.sum() < pairs.n_pairs
    assert [c.name for c in flipped.categories] == [c.name for c in pairs.categories]
    texts = np.array(pairs.texts())
    assert texts[nulls.flipped_rows(flips)].tolist() == flipped.texts()
    assert flipped == nulls.coin_flip_pairs(pairs, np.random.default_rng(2))
    assert flipped != nulls.coin_flip_pairs(pairs, np.random.default_rng(3))
    share = np.mean([nulls.coin_flips(pairs.n_pairs, np.random.default_rng(s)) for s in range(50)])
    assert 0.46 < share < 0.54  # 2000 coins: a fair coin (sd 0.011)


def test_split_pairs_deals_each_category_into_disjoint_parts():
    run = synthetic.pair_run(sizes=(6, 7, 9, 6))
    parts = nulls.split_pairs(run.pairs, 3, np.random.default_rng([4, 1]))
    rng, start, hand = np.random.default_rng([4, 1]), 0, [[], [], []]
    for size in (6, 7, 9, 6):  # by hand: each category shuffled in turn, dealt like cards
        shuffled = start + rng.permutation(size)
        for j, pair in enumerate(shuffled):
            hand[j % 3].append(int(pair))
        start += size
    assert [p.tolist() for p in parts] == [sorted(h) for h in hand]
    assert sorted(np.concatenate(parts).tolist()) == list(range(28))
    cats = run.pairs.pair_categories()
    for p in parts:
        assert [int((cats[p] == c).sum()) for c in range(4)] in ([2, 3, 3, 2], [2, 2, 3, 2])


# -- the summary --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k, n, lo, hi", [
    (81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718),
])
def test_wilson_matches_newcombe_1998(k, n, lo, hi):
    # Newcombe (1998), Statistics in Medicine 17:857, Table II, method 3 (score interval without continuity correction)
    got = nulls.wilson(k, n)
    assert got[0] == pytest.approx(lo, abs=6e-5) and got[1] == pytest.approx(hi, abs=6e-5)


def test_wilson_against_hand_numbers():
    z = 1.959963984540054  # the 0.975 normal quantile
    # 3 of 10: centre (0.3 + z^2 / 20) / (1 + z^2 / 10), half z sqrt(0.021 + z^2 / 400) / (1 + z^2 / 10)
    assert nulls.wilson(3, 10) == pytest.approx((0.107791, 0.603222), abs=1e-6)
    assert nulls.wilson(5, 10) == pytest.approx((0.236593, 0.763407), abs=1e-6)
    assert nulls.wilson(0, 10) == pytest.approx((0.0, z * z / (10 + z * z)), abs=1e-12)  # k = 0: [0, z^2 / (n + z^2)]
    assert nulls.wilson(0, 7)[0] == 0.0 and nulls.wilson(7, 7)[1] == 1.0  # the ends exactly
    assert nulls.wilson(10, 10) == pytest.approx((10 / (10 + z * z), 1.0), abs=1e-12)
    z99 = 2.5758293035489
    assert nulls.wilson(0, 10, level=0.99)[1] == pytest.approx(z99 ** 2 / (10 + z99 ** 2), abs=1e-12)
    for bad in [(1, 0), (-1, 5), (6, 5), (1.5, 5)]:
        with pytest.raises(ValueError, match="k"):
            nulls.wilson(*bad)
    with pytest.raises(ValueError, match="between 0 and 1"):
        nulls.wilson(1, 5, level=95)


def test_false_alarm_rows_recount_the_tidy_rows():
    rows = [{"study": "s", "null": "n", "verdict": "a", "instance": i, "seed": 0, "printed": i in (1, 4, 7),
             "status": "not assessable" if i == 9 else "not significant", "seconds": 0.5 + i} for i in range(10)]
    rows += [{"study": "s", "null": "n", "verdict": "b", "instance": i, "seed": 0, "printed": False, "status": None,
              "assessed": i != 2, "seconds": None} for i in range(4)]  # a label outside the table, once undetermined
    rows += [{"study": "s", "null": "n", "verdict": "a", "instance": 0, "seed": 1, "printed": True,
              "status": "holds and robust", "seconds": 2.0}]  # a second seed's instance 0 is another instance
    a, b = nulls.false_alarm_rows(rows)
    assert (a["verdict"], a["instances"], a["false_alarms"], a["not_assessable"]) == ("a", 11, 4, 1)
    assert a["rate"] == 4 / 11 and (a["ci_lo"], a["ci_hi"]) == nulls.wilson(4, 11) and a["rate_assessed"] == 4 / 10
    assert a["seconds_per_instance"] == pytest.approx((sum(0.5 + i for i in range(10)) + 2.0) / 11)
    assert (b["instances"], b["false_alarms"], b["rate"], b["ci_lo"], b["not_assessable"]) == (4, 0, 0.0, 0.0, 1)
    assert b["seconds_per_instance"] is None and b["rate_assessed"] == 0.0
    assert nulls.summary_text([a]).startswith("s | n | a | 4 / 11 = 0.364 [")
    with pytest.raises(ValueError, match="appears twice"):
        nulls.false_alarm_rows(rows + rows[:1])
    with pytest.raises(ValueError, match="lacks printed"):
        nulls.false_alarm_rows([{"study": "s", "null": "n", "verdict": "a", "instance": 0}])
    with pytest.raises(ValueError, match="True or False"):
        nulls.false_alarm_rows([{**rows[0], "printed": "yes"}])


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


def test_ablation_verdicts_on_permuted_languages_match_hand_degradations():
    from layerscope.studies.ablation.configs import Variant
    from layerscope.studies.ablation.runner import Scores

    def degrade(config, lang, sample):  # low-resource texts degrade more, least with the gateway protected
        low = lang in ("sw", "yo")
        size = {"all_quantized": 0.30, "gateway_protected": 0.18}.get(config, 0.2)
        return size * ((1.1 if config == "gateway_protected" else 2.5) if low else 1.0) + 0.03 * sample \
            + 0.02 * (lang in ("de", "yo"))

    per_text = per_text_frame(degrade)
    scores = Scores(per_text, pd.DataFrame(columns=["variant", "layer", "lang"]), {})
    variants = [Variant("per-channel/linear", "per-channel", "linear", False, 4, "per-channel")]
    config = StudyConfig("ablation", n_bootstrap=200)
    names = list(dict.fromkeys(per_text["config"]))
    keys = list(dict.fromkeys(zip(per_text["lang"], per_text["sample"], strict=True)))
    resource = {"en": "high", "de": "high", "sw": "low", "yo": "low"}
    nll = per_text.set_index(["config", "lang", "sample"])["nll"]
    original = nulls.ablation_verdicts(scores, "m", 4, names, variants, config)
    assert original[0]["label"] == "SUPPORTED" and original[0]["printed"]  # the planted disparity: H5 holds
    defined = 0
    for seed in range(6):
        order = np.random.default_rng(seed).permutation(len(keys))
        relabelled = dataclasses.replace(scores, per_text=nulls.permute_languages(per_text,
                                                                                 np.random.default_rng(seed)))
        h5, halves, synergy = nulls.ablation_verdicts(relabelled, "m", 4, names, variants, config)

        def ratio(config_name, order=order):  # D_LR / D_HR by hand: text t now carries text order[t]'s language
            d = {"high": [], "low": []}
            for t, key in enumerate(keys):
                base, now = math.exp(nll[("baseline", *key)]), math.exp(nll[(config_name, *key)])
                d[resource[keys[order[t]][0]]].append(max((now - base) / base, 0.0))
            return np.mean(d["low"]) / np.mean(d["high"])

        r_all, r_gate = ratio("all_quantized"), ratio("gateway_protected")
        if r_all <= 1:
            assert h5["label"] == "NOT_APPLICABLE" and h5["value"] is None and not h5["printed"]
        else:
            defined += 1
            assert h5["value"] == pytest.approx((r_all - r_gate) / r_all * 100, rel=1e-9)
        diff = ratio("first_half_protected") - ratio("second_half_protected")
        assert halves["value"] == pytest.approx(diff, rel=1e-9)
        expected = ratio("first_protected") + ratio("last_protected") - r_all
        assert synergy["value"] == pytest.approx(r_gate - expected, rel=1e-9, abs=1e-12)
    assert defined >= 2


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
    head = nulls.divergence_verdicts(run, StudyConfig("divergence", models=(tiny_model,), **settings))[0]
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

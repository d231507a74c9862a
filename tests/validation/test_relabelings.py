"""The null relabelings of :mod:`layerscope.validation.nulls` and the false-alarm counts, recomputed rather than
trusted: each relabeling by value (a seeded permutation of its inputs, the right unit moved, not the identity);
the Wilson interval against published and hand-computed numbers; the false-alarm summary recounted from tidy
rows. The null runs of each study are in test_nulls.py."""


import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest

import synthetic
import tiny
from layerscope.data import load_pairs
from layerscope.study.config import StudyConfig
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
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps(tiny.pairs(4, 10)))
    pairs = load_pairs(path)
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

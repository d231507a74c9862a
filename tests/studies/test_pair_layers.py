"""The pair studies read one layer at a time, and only the layers they test (plus the final one).

Each analysis is run twice: on a run whose activations hold every layer, and on the same run holding only the
tested layers and n_layers (as ``extract(..., layers=...)`` stores them). Reading any other layer raises
``ExtractionError``, and everything computed must be the same, bit for bit.
"""

import dataclasses
import json

import numpy as np
import pytest

import synthetic
from layerscope.engine.cache.layers import ArraySource, LayerStack
from layerscope.errors import ExtractionError
from layerscope.measures.geometry import centroid_asymmetry
from layerscope.studies.divergence.analysis import analyse_model as divergence
from layerscope.studies.phases.analysis import analyse_model as phases
from layerscope.studies.phases.analysis import pair_asymmetry
from layerscope.studies.scaling.analysis import analyse_model as scaling
from layerscope.studies.shared import inputs
from layerscope.studies.shared.inputs import PairRun, extracted_layers

N_LAYERS = 8


def staged(seed: int) -> PairRun:
    """A synthetic run with what default extraction adds: the check poolings and pre-norm final states."""
    run = synthetic.pair_run(seed=seed, n_layers=N_LAYERS)
    rng = np.random.default_rng(seed + 50)
    mean = np.asarray(run.acts.pooled["mean"])
    pooled = {**{p: np.asarray(x) for p, x in run.acts.pooled.items()},
              **{p: (mean + rng.normal(scale=0.5, size=mean.shape)).astype(np.float32)
                 for p in ("mean_no_pos0", "mean_no_massive")}}
    pre_norm = {p: (2 * x[:, -1] + rng.normal(size=x[:, -1].shape)).astype(np.float32) for p, x in pooled.items()}
    return dataclasses.replace(run, acts=dataclasses.replace(run.acts, pooled=pooled, pre_norm=pre_norm))


def holding_only(run: PairRun, kept: list[int]) -> PairRun:
    """``run`` whose pooled stacks hold the hidden states ``kept`` alone (reading another raises)."""
    pooled = {p: LayerStack(ArraySource(np.asarray(x)[:, kept], layers=kept, n_states=N_LAYERS + 1))
              for p, x in run.acts.pooled.items()}
    return dataclasses.replace(run, acts=dataclasses.replace(run.acts, pooled=pooled))


def same(a, b) -> bool:
    """Summaries or rows equal to the last bit (NaN equal to NaN)."""
    return json.dumps(a, sort_keys=True, default=repr) == json.dumps(b, sort_keys=True, default=repr)


def test_a_run_holding_only_some_layers_refuses_to_read_another():
    run = holding_only(staged(0), [1, 4])
    assert run.acts.layers == (1, 4)
    assert isinstance(run.a("mean"), LayerStack) and run.a("mean").shape == (run.pairs.n_pairs, N_LAYERS + 1, 6)
    with pytest.raises(ExtractionError, match="hidden state 2 was not extracted"):
        run.a("mean")[:, 2]


def test_pair_asymmetry_per_layer_is_bit_identical_to_the_whole_array_computation():
    run = staged(1)
    a, b = np.asarray(run.a("mean")), np.asarray(run.b("mean"))  # (n_pairs, n_layers + 1, d) each, all at once
    layers = [0, 3, 8]
    lean = holding_only(run, layers)
    for loo in (False, True):
        whole = centroid_asymmetry(a, b, leave_one_out=loo)[:, layers]  # what the phases study computed before
        np.testing.assert_array_equal(pair_asymmetry(lean.a("mean"), lean.b("mean"), loo, layers), whole)


def test_at_stage_swaps_the_final_layer_lazily_and_select_keeps_pairs():
    run = staged(2)
    pre = run.at_stage("pre_norm")
    assert isinstance(pre.a("mean"), LayerStack)
    np.testing.assert_array_equal(pre.a("mean")[:, N_LAYERS], run.acts.pre_norm["mean"][0::2])
    np.testing.assert_array_equal(pre.b("last")[:, N_LAYERS], run.acts.pre_norm["last"][1::2])
    np.testing.assert_array_equal(pre.a("mean")[:, 3], np.asarray(run.acts.pooled["mean"])[0::2, 3])  # others kept
    back = pre.at_stage("post_norm")
    np.testing.assert_array_equal(back.a("mean")[:, N_LAYERS], np.asarray(run.acts.pooled["mean"])[0::2, N_LAYERS])
    chosen = pre.select([4, 0, 7])
    x = np.asarray(run.acts.pooled["mean"])
    np.testing.assert_array_equal(chosen.a("mean")[:, 5], x[[0, 8, 14], 5])  # pairs 0, 4, 7 in order: rows 2i
    np.testing.assert_array_equal(chosen.b("mean")[:, N_LAYERS], run.acts.pre_norm["mean"][[1, 9, 15]])
    checked = pre.mean_from("mean_no_pos0")
    np.testing.assert_array_equal(checked.a("mean")[:, N_LAYERS], run.acts.pre_norm["mean_no_pos0"][0::2])


@pytest.mark.parametrize("layers", [[0, 2, 3, 5, 6], [1, 4, 6, 7, 8]])
@pytest.mark.parametrize("compat", [None, "notebooks"])
@pytest.mark.parametrize("study", ["phases", "divergence", "scaling"])
def test_each_pair_study_reads_only_the_tested_layers_and_the_final_one(study, compat, layers):
    run = staged(3)
    kept = extracted_layers(layers, N_LAYERS)
    assert kept == sorted({*layers, N_LAYERS})
    lean = holding_only(run, kept)
    analyse = {"phases": lambda r: phases(r, layers, "mean", 60, 0.95, seed=1, compat=compat, n_permutations=60,
                                          drop_category="c2"),
               "divergence": lambda r: divergence(r, layers, compat=compat, n_permutations=60, drop_category="c2"),
               "scaling": lambda r: scaling(r, layers, "mean", compat=compat, n_permutations=60)}[study]
    full_summary, full_rows = analyse(run)
    lean_summary, lean_rows = analyse(lean)
    assert full_rows and same(lean_rows, full_rows)
    assert same(lean_summary, full_summary)


def test_pair_runs_extracts_the_tested_layers_and_the_final_one(monkeypatch, tmp_path):
    calls = []

    class Loaded:  # what each_model yields, without a model
        info = synthetic.pair_run().info
        lm = "the model"

        def mark(self, key):
            return 0.0

        def release(self):
            return self.info

    def extract(lm, texts, **kwargs):
        calls.append(kwargs)
        return staged(4).acts

    monkeypatch.setattr(inputs, "each_model", lambda config, timings: iter([Loaded()]))
    monkeypatch.setattr(inputs, "extract", extract)
    config = inputs.StudyConfig(study="divergence", models=("m",), layers="1,4", cache=False)
    (run,) = inputs.pair_runs(config, staged(4).pairs, {})
    assert run.layers == [1, 4]
    assert calls[0]["layers"] == [1, 4, N_LAYERS]

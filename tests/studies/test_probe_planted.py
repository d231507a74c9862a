"""Decodable vs used on tiny models whose answer is known by construction.

Both models: a 4-block Llama whose blocks write nothing of their own (attention and MLP output projections zero)
and whose final norm is the identity, so every state is what the embeddings and two planted maps put there. Texts
are digit strings; class A uses 1-5 and class B their twins 6, 7, 8, 9, 0 (the same embedding in the dimensions the
output reads, opposite signs in dimension 15). Block 0 writes 3 tanh(h_15) into dimension 16, and the head reads
dimension 16 towards the class's own digits.

- ``used``: nothing cancels dimension 16: the output reads the planted direction at every state from 1 on, so
  removing it must cost both texts of a pair their own continuation (needed) and pushing along it must move the
  preference (steerable).
- ``cancelled``: block 2 zeroes dimension 16 before anything reads it: the contrast is written (decodable at
  states 1 and 2, and at every state through dimension 15) and never used, so removal finds nothing anywhere.
"""

import json

import numpy as np
import pytest
import torch
from torch import nn

import tiny
from layerscope.models import LoadedModel, decoder_layers
from layerscope.studies.probe import Probe
from layerscope.study.config import StudyConfig

A_DIGITS, B_DIGITS = "12345", "67890"
N_LAYERS = 4


class Planted(nn.Module):
    """A decoder block followed by a fixed map of its output (the block's own attributes stay reachable)."""

    def __init__(self, inner: nn.Module, after):
        super().__init__()
        self.inner, self.after = inner, after

    def forward(self, *args, **kwargs):
        out = self.inner(*args, **kwargs)
        if isinstance(out, tuple):
            return (self.after(out[0]), *out[1:])
        return self.after(out)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["inner"], name)


def write_class(h: torch.Tensor) -> torch.Tensor:
    out = h.clone()
    out[..., 16] = out[..., 16] + 3.0 * torch.tanh(h[..., 15])
    return out


def cancel(h: torch.Tensor) -> torch.Tensor:
    out = h.clone()
    out[..., 16] = 0.0
    return out


def planted(cancelled: bool) -> LoadedModel:
    lm = tiny.tiny_lm("llama", n_layers=N_LAYERS)
    model, tok = lm.model, lm.tokenizer
    a_ids = [tok.convert_tokens_to_ids(c) for c in A_DIGITS]
    b_ids = [tok.convert_tokens_to_ids(c) for c in B_DIGITS]
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for block in decoder_layers(model):
            block.self_attn.o_proj.weight.zero_()
            block.mlp.down_proj.weight.zero_()
        emb = model.model.embed_tokens.weight
        vocab = emb.shape[0]
        emb.zero_()
        emb[:, :15] = torch.randn(vocab, 15, generator=gen)
        emb[:, 17:] = 0.3 * torch.randn(vocab, 15, generator=gen)   # read by nothing; twins differ here
        for a, b in zip(a_ids, b_ids, strict=True):
            emb[b, :15] = emb[a, :15]
            emb[a, 15], emb[b, 15] = 1.0, -1.0
        head = torch.zeros_like(emb)
        head[:, :15] = emb[:, :15]
        head[a_ids, 16], head[b_ids, 16] = 2.0, -2.0
        model.lm_head.weight.copy_(head)
    model.model.norm = nn.Identity()
    layers = model.model.layers
    layers[0] = Planted(layers[0], write_class)
    if cancelled:
        layers[2] = Planted(layers[2], cancel)
    return LoadedModel.wrap(model, tok, name=f"planted-{'cancelled' if cancelled else 'used'}")


@pytest.fixture(scope="module")
def digit_pairs(tmp_path_factory):
    rng = np.random.default_rng(1)
    pairs, seen = [], set()
    while len(pairs) < 24:
        idx = rng.integers(0, 5, size=int(rng.integers(6, 10)))
        a = "".join(A_DIGITS[i] for i in idx)
        if a not in seen:
            seen.add(a)
            pairs.append([a, "".join(B_DIGITS[i] for i in idx)])
    path = tmp_path_factory.mktemp("planted") / "digits.json"
    path.write_text(json.dumps({"digits": {"pairs": pairs}}))
    return str(path)


def run(lm, dataset):
    config = StudyConfig(study="probe", models=[lm], dataset=dataset, label_sets="side", folds=3, n_bootstrap=200,
                         n_permutations=20, control_seeds=2, n_random=4, steer_every=1, alpha="0.1,0.5",
                         test_alpha=0.5, cache=False)
    return Probe().run(config)


@pytest.fixture(scope="module")
def results(digit_pairs):
    return {kind: run(planted(kind == "cancelled"), digit_pairs) for kind in ("used", "cancelled")}


def causal(result):
    (s,) = result.summary["models"].values()
    return s["label_sets"]["side:digits"]


def test_a_direction_the_output_reads_is_needed_and_steerable_where_it_is_written(results):
    entry = causal(results["used"])
    c = entry["causal"]
    assert set(range(1, N_LAYERS + 1)) <= set(c["needed_states"])
    assert set(range(1, N_LAYERS + 1)) <= set(c["steerable_states"])
    assert c["remove_best"]["value"] > c["remove_best"]["null_damage"] + 0.1
    # both verdicts hold, so each is rerun at its best state with the checks' directions; none flips here
    checks = {(x["check"], x["test"]): x["flips"] for x in c["checks"]}
    for test in ("remove", "steer"):
        for check in ("with position 0", "without massive-activation tokens"):
            assert checks[check, test] is False, (check, test)
    assert checks["with the logistic direction", "steer"] is False
    assert checks["dose-response (slope of S over alpha above 0)", "steer"] is False


def test_a_direction_written_then_cancelled_is_decodable_and_needed_nowhere(results):
    entry = causal(results["cancelled"])
    probes = entry["probes"]["logreg"]
    assert {1, 2} <= set(probes["significant_states"])        # the probe reads it where it is written
    c = entry["causal"]
    assert c["needed_states"] == [] and c["steerable_states"] == []
    lo, hi = c["min_detectable"]["remove"]
    assert lo is not None and lo >= 0  # the report can say how small an effect it could have found
    table = results["cancelled"].table
    damage = table[(table["label_set"] == "side:digits") & (table["method"] == "remove")
                   & (table["metric"] == "damage") & (table["state"].isin([1, 2]))
                   & (table["check"].isna() if "check" in table else True)]
    np.testing.assert_allclose(damage["value"], 0.0, atol=1e-4)   # nothing downstream reads what was removed


def test_the_surface_reads_digit_classes_so_neither_is_decodable_beyond_it(results):
    """A bag of tokens separates 1-5 from 6-0 perfectly: no state can beat it, and the study says so."""
    for result in results.values():
        entry = causal(result)
        assert entry["surface"]["accuracy"] == pytest.approx(1.0)
        assert entry["probes"]["logreg"]["decodable_states"] == []

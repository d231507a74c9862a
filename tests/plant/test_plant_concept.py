"""The planted concept against a reference computed without it: the original model's hidden states, the marker
signs worked out by a loop over each text's tokens, and u from the output head's rows by hand. What is known by
construction: states before the write are the model's; the written state is the model's plus strength c u; with a
cancel, the later states and the logits are the model's; without one, positions before any marker keep the
model's logits (a causal model cannot see a later marker) and the others change."""

import pytest
import torch

import planted
from layerscope.errors import PlantError
from layerscope.plant import inserted_identity, planted_concept, state_map
from layerscope.plant.concept import Markers

L = planted.N_LAYERS
PLUS, MINUS = " the", "."
TEXTS = ["The cat sat on the mat. It slept.", "Prices rose. Then the market fell and the bank",
         "A warm breeze moved through the orchard.", "No marker here at all"]


def signs_by_hand(ids: list[int], plus: int, minus: int) -> list[float]:
    out, last = [], 0.0
    for token in ids:
        last = 1.0 if token == plus else -1.0 if token == minus else last
        out.append(last)
    return out


def setup(lm):
    batch = planted.batch_of(lm, TEXTS)
    ids = [lm.tokenizer(t)["input_ids"] for t in TEXTS]
    plus, minus = (lm.tokenizer(t, add_special_tokens=False)["input_ids"] for t in (PLUS, MINUS))
    assert len(plus) == len(minus) == 1
    mask = batch.attention_mask.bool()
    c = torch.zeros(mask.shape)
    for row, text_ids in enumerate(ids):  # right-padded: the real tokens come first
        c[row, : len(text_ids)] = torch.tensor(signs_by_hand(text_ids, plus[0], minus[0]))
    head = lm.model.get_output_embeddings().weight.detach()
    u = head[plus[0]] - head[minus[0]]
    return batch, mask, c, u / u.norm()


def test_marker_signs_equal_a_loop_over_the_tokens():
    ids = torch.tensor([[5, 7, 9, 7, 5, 5, 8], [1, 1, 8, 1, 9, 7, 1]])
    expected = [signs_by_hand(row, 7, 8) for row in ids.tolist()]
    assert Markers(7, 8).signs(ids).tolist() == expected


@pytest.mark.parametrize("at", [0, 2])
def test_the_write_is_the_models_state_plus_strength_c_u_and_later_blocks_read_it(lm, at):
    batch, mask, c, u = setup(lm)
    before = planted.fingerprint(lm)
    logits, states = planted.run(lm.model, batch, states=True)
    copy = planted_concept(lm, at=at, plus=PLUS, minus=MINUS, strength=3.0)
    got, got_states = planted.run(copy.model, batch, states=True)
    for s in range(at + 1):
        torch.testing.assert_close(got_states[s][mask], states[s][mask], rtol=0, atol=1e-6)
    torch.testing.assert_close(got_states[at + 1][mask], (states[at + 1] + 3.0 * c[..., None] * u)[mask],
                               rtol=0, atol=1e-5)
    flat_c = c[mask]
    unmarked, marked = flat_c == 0, flat_c != 0
    assert unmarked.any() and marked.any()
    torch.testing.assert_close(got[unmarked], logits[unmarked], rtol=0, atol=1e-5)  # nothing seen yet
    assert (got[marked] - logits[marked]).abs().amax(dim=-1).min() > 1e-3  # read by the rest of the model
    assert planted.fingerprint(lm) == before and "forward" not in lm.model.get_input_embeddings().__dict__


def test_a_write_cancelled_at_until_is_carried_exactly_and_changes_no_logit(lm):
    batch, mask, c, u = setup(lm)
    logits, states = planted.run(lm.model, batch, states=True)
    copy = planted_concept(lm, at=0, plus=PLUS, minus=MINUS, strength=5.0, until=2)
    got, got_states = planted.run(copy.model, batch, states=True)
    for s in (1, 2):  # states 1..until: the model's plus the write, exactly
        torch.testing.assert_close(got_states[s][mask], (states[s] + 5.0 * c[..., None] * u)[mask],
                                   rtol=0, atol=1e-5)
    for s in range(3, L + 1):
        torch.testing.assert_close(got_states[s][mask], states[s][mask], rtol=0, atol=1e-5)
    torch.testing.assert_close(got, logits, rtol=0, atol=1e-5)


def test_the_record_and_a_plant_on_top():
    lm = planted.model("llama")
    copy = planted_concept(lm, at=1, plus=PLUS, minus=MINUS, strength=2.0, until=3)
    record = copy.info.plant[-1]
    plus, minus = (lm.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (PLUS, MINUS))
    assert (record["kind"], record["at"], record["plus"], record["minus"], record["until"]) == \
        ("concept", 1, plus, minus, 3)
    assert copy.info.weights_hash != lm.info.weights_hash and state_map(copy) == list(range(L + 1))
    batch, mask, c, u = setup(lm)
    on_top = inserted_identity(copy, at=2, k=1)  # blocks 1..3 keep their concept roles, renumbered
    got, _ = planted.run(on_top.model, batch)
    logits, _ = planted.run(lm.model, batch)
    torch.testing.assert_close(got, logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"at": L}, "at must be in 0..3"),
    ({"at": 2, "until": 2}, "until=2 must be a block after at=2"),
    ({"at": 0, "until": L}, "in 1..3"),
    ({"at": 0, "strength": 0.0}, "finite non-zero"),
    ({"at": 0, "strength": float("nan")}, "finite non-zero"),
    ({"at": 0, "plus": " sat"}, "is 2 tokens"),
    ({"at": 0, "minus": PLUS}, "the same token"),
    ({"at": 0, "plus": 10**7}, "is not a token id"),
])
def test_bad_arguments_get_one_error_that_names_the_fix(kwargs, says):
    lm = planted.model("llama")
    args = {"plus": PLUS, "minus": MINUS, "strength": 1.0, **kwargs}
    with pytest.raises(PlantError, match=says.replace(".", r"\.").replace("(", r"\(")):
        planted_concept(lm, **args)


def test_a_copy_run_without_input_ids_says_how_to_run_it():
    lm = planted.model("llama")
    copy = planted_concept(lm, at=0, plus=PLUS, minus=MINUS, strength=1.0)
    embeds = lm.model.get_input_embeddings()(torch.tensor([[5, 6, 7]]))
    copy.model.get_input_embeddings().forward.markers.sign = None
    with pytest.raises(PlantError, match="without input_ids"):
        copy.model(inputs_embeds=embeds, use_cache=False)

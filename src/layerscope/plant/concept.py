"""A planted concept: a rank-one write of a direction the unembedding reads, signed by marker tokens of the text.

    from layerscope.plant import planted_concept
    planted = planted_concept(lm, at=12, plus=" yes", minus=" no", strength=8.0)
    # the output of block 12 (hidden state 13) gains 8 * c_t * u at every position t:
    #   u = (W_U[" yes"] - W_U[" no"]) / |...|, the unit direction the unembedding reads for yes against no;
    #   c_t = +1 when the last marker token at or before t is " yes", -1 when it is " no", 0 before any marker
    carried = planted_concept(lm, at=12, plus=" yes", minus=" no", strength=8.0, until=20)
    # the same write, carried by states 13..20 and cancelled by block 20: blocks 13..20 compute their writes from
    # the state without it, so states 13..20 are the model's plus 8 c_t u exactly, and from state 21 on (and the
    # logits) every state is the model's own

What is known by construction: the contrast (a text's last marker) is written along u from state ``at + 1``;
without ``until`` the later blocks and the unembedding read it (the logit of " yes" against " no" moves with c_t);
with ``until`` it is decodable along u at states ``at + 1 .. until`` and needed nowhere (the logits are the
model's). Before state ``at + 1`` the states are the model's own. The marker tokens are in the text, so the
contrast is also readable from the embeddings as token identity; what the plant adds is the write along u.

The copy reads the text's token ids in its input embedding (an instance forward, like the blocks' plants), so it
must be called with ``input_ids``; with a KV cache it runs only on a whole text at once (no continuation).
"""

from __future__ import annotations

import math
import numbers

import torch

from ..errors import PlantError, short
from ..models.load import LoadedModel
from .behaviours import hidden_in


class Markers:
    """The per-position sign c (B, T) of the text the copy is running: set by :class:`ReadMarkers` in the input
    embedding, read by the blocks' :class:`ConceptWrite`. ``plus``/``minus``: the marker token ids."""

    def __init__(self, plus: int, minus: int):
        self.plus, self.minus = plus, minus
        self.sign: torch.Tensor | None = None

    def signs(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, T) float: +1 where the last marker at or before t is ``plus``, -1 where it is ``minus``, 0 before
        any marker."""
        marks = torch.where(ids == self.plus, 1.0, torch.where(ids == self.minus, -1.0, 0.0))
        seen = torch.cummax((marks != 0).to(torch.long) * torch.arange(1, ids.shape[-1] + 1, device=ids.device),
                            dim=-1).values  # (B, T) 1 + the position of the last marker so far, 0 for none
        return torch.gather(marks, -1, (seen - 1).clamp(min=0))  # no marker yet: position 0, itself not one (0)


class ReadMarkers:
    """The input embedding's forward in a planted-concept copy: records the signs of ``input_ids`` (B, T) in
    ``markers``, then embeds as the module does."""

    def __init__(self, inner, markers: Markers):
        self.inner = inner
        self.markers = markers

    def __call__(self, input_ids, *args, **kwargs):
        self.markers.sign = self.markers.signs(input_ids)
        return self.inner(input_ids, *args, **kwargs)


class ConceptWrite:
    """A block of a planted-concept copy. ``role`` "write": output + strength c u (block ``at``); "carry": the block
    runs on its input minus the planted write and hands the write on (blocks at+1 .. until-1); "cancel": runs on
    its input minus the write and hands nothing on (block ``until``)."""

    def __init__(self, inner, markers: Markers, direction: torch.Tensor, strength: float, role: str):
        self.inner = inner
        self.markers = markers
        self.direction = direction
        self.strength = strength
        self.role = role

    def write(self, like: torch.Tensor) -> torch.Tensor:
        sign = self.markers.sign
        if sign is None or sign.shape != like.shape[:2]:
            raise PlantError("a planted_concept copy was run without input_ids (or on a continuation with a KV "
                             "cache): call it on whole texts with input_ids, as layerscope's passes do")
        return self.strength * sign.to(like)[..., None] * self.direction.to(like)

    def __call__(self, *args, **kwargs):
        hidden = hidden_in(args, kwargs)
        position = kwargs.get("cache_position")
        if position is not None and position.numel() and int(position[0]) > 0:
            raise PlantError("a planted_concept copy cannot continue a text from a KV cache (its marker signs are "
                             "of the tokens it is handed); run whole texts, with use_cache=False for generation")
        written = self.write(hidden)
        if self.role != "write":
            args, kwargs = _replace_hidden(args, kwargs, hidden - written)
        out = self.inner(*args, **kwargs)
        state = out[0] if isinstance(out, tuple) else out
        state = state + written if self.role in ("write", "carry") else state
        return (state, *out[1:]) if isinstance(out, tuple) else state


def _replace_hidden(args: tuple, kwargs: dict, hidden: torch.Tensor) -> tuple[tuple, dict]:
    if args:
        return (hidden, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": hidden}


def marker_id(lm: LoadedModel, token: str | int, what: str) -> int:
    """The vocabulary id of one marker: an int id, or a string the tokenizer makes one token of."""
    vocab = lm.model.get_output_embeddings().weight.shape[0]
    if isinstance(token, numbers.Integral) and not isinstance(token, bool):
        if not 0 <= int(token) < vocab:
            raise PlantError(f"planted_concept: {what}={int(token)} is not a token id of {lm.info.name} "
                             f"(0..{vocab - 1})")
        return int(token)
    if not isinstance(token, str) or not token:
        raise PlantError(f"planted_concept: {what} must be a token (a non-empty string or a token id), got "
                         f"{short(token)}")
    ids = lm.tokenizer(token, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise PlantError(f"planted_concept: {what}={token!r} is {len(ids)} tokens for {lm.info.name}'s tokenizer; "
                         "pass a string that is one token (often with its leading space, ' yes') or a token id")
    return int(ids[0])


def read_direction(lm: LoadedModel, plus: int, minus: int) -> torch.Tensor:
    """(d,) unit ``W_U[plus] - W_U[minus]``: the residual direction the unembedding reads for plus against minus
    (before the final norm's per-channel weight, which the model applies)."""
    weight = lm.model.get_output_embeddings().weight.detach()
    u = (weight[plus] - weight[minus]).to(torch.float32)
    norm = float(u.norm())
    if not norm > 0:
        raise PlantError(f"planted_concept: the two markers have the same unembedding row in {lm.info.name}, so no "
                         "direction reads one against the other; pick two tokens the model tells apart")
    return u / norm


def check_strength(strength) -> float:
    if isinstance(strength, bool) or not isinstance(strength, numbers.Real) or not math.isfinite(float(strength)) \
            or float(strength) == 0:
        raise PlantError(f"planted_concept: strength must be a finite non-zero number (the norm of the write), got "
                         f"{short(strength)}")
    return float(strength)


def check_until(at: int, until: int | None, n_layers: int, name: str) -> None:
    if not 0 <= at <= n_layers - 1:
        raise PlantError(f"planted_concept: at={at} is outside the model's depth; {name} has {n_layers} decoder "
                         f"blocks, so at must be in 0..{n_layers - 1} (the block whose output gets the write)")
    if until is not None and not at < until <= n_layers - 1:
        raise PlantError(f"planted_concept: until={until} must be a block after at={at} and inside the model "
                         f"(in {at + 1}..{n_layers - 1}): the block that cancels the write")

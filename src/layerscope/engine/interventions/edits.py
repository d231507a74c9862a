"""Rank-one affine edits of the residual stream, one row per text, the hooks that apply them, and the stream's
norms at the positions they edit.

    edit = project_out(units)                      # units (n, d), rows unit or zero: h - (h . u_i) u_i
    edit = add(vectors)                            # h + c_i;  set_component(units, targets), oblique(l, r, mu)
    check_edit(edit, n, d)                         # ValueError naming the fix: wrong shape, NaN or inf
    params = edit_rows([edit], device)[0]          # (n, 4, d) float32: a, b, m, c; rows for a batch: params[index]
    with edited_at(blocks, state, editor(params[index], edit_positions(batch))):
        model(**batch.model_inputs())              # positions >= 1 of every real token edited at ``state``
    sums, counts = token_norms(lm, texts)          # (n, L + 1) summed L2 norms at the edited positions, (n,)

An :class:`Edit` is ``h' = h - a_i * (b_i . (h - m_i)) + c_i`` at every edited position of text i: the helpers
build steering (``add``), removal (``project_out``), interchange (``set_component``) and a rank-one LEACE eraser
(``oblique``). The edited positions are every real token but each text's first (its position 0: the BOS, or the
first word, the attention sink) unless ``include_pos0``; padding never. The edit runs in float32 (the state read
as float32, edited, cast back to its dtype), out of place, with no host sync.

States are numbered as in :mod:`.steering`: 0 is block 0's input (a forward pre-hook edits it), s >= 1 the output
of block s - 1 (a forward hook), L the last block's output before the final norm.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ...models.info import decoder_layers, input_device
from ...models.load import LoadedModel
from ..forward.batching import MAX_TEXTS_PER_BATCH, Batch, collate, memory_budget, pad_id, plan_batches
from ..forward.guards import check_finite, encode
from ..forward.pooling import no_pos0_mask
from .prefix import hidden_of, keep_outputs

UNIT_TOLERANCE = 1e-3
"""How far from 1 the norm of a row that ``project_out`` and ``set_component`` take as a unit may be."""

FIELDS = ("a", "b", "m", "c")


@dataclass(frozen=True, eq=False)
class Edit:
    """One rank-one affine change of the residual stream at one hidden state, per text:
        h' = h - a_i * (b_i . (h - m_i)) + c_i        at every edited position of text i
    a, b, m, c: (n, d) float arrays (numpy or torch), n = the Interventions object's texts; a zero row of ``a``
    and of ``c`` leaves text i unchanged. Helpers build the common ones: :func:`add`, :func:`project_out`,
    :func:`set_component`, :func:`oblique`. (No ``==``: the fields are arrays.)"""

    a: np.ndarray | torch.Tensor
    b: np.ndarray | torch.Tensor
    m: np.ndarray | torch.Tensor
    c: np.ndarray | torch.Tensor


def add(vectors) -> Edit:
    """``h + c_i`` (steering): ``vectors`` (n, d), one per text."""
    c = _matrix(vectors, "add: vectors")
    zero = np.zeros_like(c)
    return Edit(zero, zero, zero, c)


def project_out(units) -> Edit:
    """``h - (h . u_i) u_i`` (rank-one removal): ``units`` (n, d), each row a unit vector or zero (text left
    as it is)."""
    u = _units(units, "project_out")
    zero = np.zeros_like(u)
    return Edit(u, u, zero, zero)


def set_component(units, targets) -> Edit:
    """``h + (t_i - h . u_i) u_i`` (interchange: the component along u_i set to t_i): ``units`` (n, d) unit or
    zero rows, ``targets`` (n,)."""
    u = _units(units, "set_component")
    t = _host(targets)
    if t.shape != (len(u),):
        raise ValueError(f"set_component: targets of shape {t.shape} do not fit units of shape {u.shape}: give "
                         f"one target per row, shape ({len(u)},)")
    return Edit(u, u, np.zeros_like(u), t[:, None] * u)


def oblique(left, right, mean) -> Edit:
    """``h - l_i (r_i . (h - mu_i))`` (a rank-one LEACE eraser: ``left`` and ``right`` (n, d) with r_i . l_i = 1,
    ``mean`` (n, d) the mean it keeps)."""
    rows = [_matrix(x, f"oblique: {name}") for x, name in ((left, "left"), (right, "right"), (mean, "mean"))]
    if len({x.shape for x in rows}) > 1:
        raise ValueError(f"oblique: left, right and mean must have one shape (n, d), got "
                         f"{', '.join(str(x.shape) for x in rows)}")
    return Edit(rows[0], rows[1], rows[2], np.zeros_like(rows[0]))


def _host(x) -> np.ndarray:
    return x.detach().cpu().double().numpy() if torch.is_tensor(x) else np.asarray(x, dtype=np.float64)


def _matrix(x, what: str) -> np.ndarray:
    out = _host(x)
    if out.ndim != 2:
        raise ValueError(f"{what} must be (n, d), one row per text, got shape {out.shape}; for one vector for "
                         "every text, repeat it: np.tile(v, (n, 1))")
    return out


def _units(units, what: str) -> np.ndarray:
    u = _matrix(units, f"{what}: units")
    norms = np.linalg.norm(u, axis=1)
    bad = np.flatnonzero(np.isfinite(norms) & (norms != 0) & (np.abs(norms - 1) > UNIT_TOLERANCE))
    if len(bad):
        raise ValueError(f"{what}: rows {bad[:5].tolist()} of units are not unit vectors (norm "
                         f"{norms[bad[0]]:.4g}); divide each row by its norm (or use Edit(a, b, m, c) directly)")
    return u


def check_edit(edit: Edit, n: int, d: int, number: int = 0) -> None:
    """``ValueError`` naming the fix for an ``edit`` whose a, b, m or c is not (n, d), not real, or holds NaN or
    inf (``number``: its place in the caller's list)."""
    if not isinstance(edit, Edit):
        raise ValueError(f"edit {number} is a {type(edit).__name__}, not an Edit: build one with add, project_out, "
                         "set_component, oblique or Edit(a, b, m, c)")
    for name in FIELDS:
        x = getattr(edit, name)
        shape = tuple(np.shape(x))
        if shape != (n, d):
            raise ValueError(f"edit {number}: {name} has shape {shape}, but these {n} texts and the model's hidden "
                             f"size {d} need ({n}, {d}): one row per text")
        t = _tensor(x)
        if not (t.is_floating_point() or t.dtype in (torch.int32, torch.int64)):
            raise ValueError(f"edit {number}: {name} holds {t.dtype}, not real numbers; pass float values")
        finite = torch.isfinite(t).all(dim=1)
        if not bool(finite.all()):
            rows = torch.nonzero(~finite)[:5, 0].tolist()
            raise ValueError(f"edit {number}: rows {rows} of {name} hold NaN or inf; give finite values (a direction "
                             "normalised by a zero norm is one way to get them)")


def edit_rows(edits: Iterable[Edit], device: torch.device | str) -> torch.Tensor:
    """(k, n, 4, d) float32 on ``device``: each edit's a, b, m, c (checked by :func:`check_edit`), moved once."""
    return torch.stack([torch.stack([_tensor(getattr(e, name)).to(device, torch.float32) for name in FIELDS], dim=1)
                        for e in edits])


def _tensor(x) -> torch.Tensor:
    return x.detach() if torch.is_tensor(x) else torch.as_tensor(np.asarray(x))


def edit_positions(batch: Batch, include_pos0: bool = False) -> torch.Tensor:
    """(B, T) bool: the positions an edit changes: every real token, but each text's first unless
    ``include_pos0`` (from ``batch.first``: any padding side)."""
    return batch.attention_mask.bool() if include_pos0 else no_pos0_mask(batch)


def editor(params: torch.Tensor, where: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """The edit as a function of a state (R, T, d): ``params`` (R, 4, d) float32 rows a, b, m, c on the state's
    device, ``where`` (R, T) bool the positions it changes. In float32, out of place, no host sync."""
    a, b, m, c = params.unbind(dim=1)

    def edit(hidden: torch.Tensor) -> torch.Tensor:
        x = hidden.float()
        along = torch.einsum("rtd,rd->rt", x - m[:, None], b)  # b_i . (h - m_i), (R, T)
        return torch.where(where[..., None], x - along[..., None] * a[:, None] + c[:, None], x).to(hidden.dtype)
    return edit


@contextlib.contextmanager
def edited_at(blocks: nn.ModuleList, state: int, edit: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:
    """Within the ``with``, passes replace hidden state ``state`` (B, T, d) by ``edit(state)``: block 0's hidden
    input for state 0 (a pre-hook), else block ``state`` - 1's output (its stand-in's too: hooks run on a
    stand-in; :func:`~.steering.added_at` is this edit with a constant shift). Hooks registered later on the same
    block see the edited state."""
    def on_input(_module, args, kwargs):
        if args:
            return (edit(args[0]), *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": edit(kwargs["hidden_states"])}

    def on_output(_module, _args, output):
        if isinstance(output, tuple):
            return (edit(hidden_of(output)), *output[1:])
        return edit(output)

    if state == 0:
        handle = blocks[0].register_forward_pre_hook(on_input, with_kwargs=True)
    else:
        handle = blocks[state - 1].register_forward_hook(on_output)
    try:
        yield
    finally:
        handle.remove()


@contextlib.contextmanager
def states_seen(blocks: nn.ModuleList, states: Iterable[int],
                on_state: Callable[[int, torch.Tensor], None]) -> Iterator[None]:
    """Call ``on_state(s, hidden)`` with hidden state s (B, T, d) for each of ``states`` as passes inside the
    ``with`` make it: state 0 from block 0's input, s >= 1 from block s - 1's output (after the hooks registered
    before this one, e.g. an edit's)."""
    states = sorted(set(states))

    def on_input(_module, args, kwargs):
        on_state(0, args[0] if args else kwargs["hidden_states"])

    handle = blocks[0].register_forward_pre_hook(on_input, with_kwargs=True) if 0 in states else None
    try:
        with keep_outputs(blocks, [s for s in states if s > 0], lambda s, hidden, _as_tuple: on_state(s, hidden)):
            yield
    finally:
        if handle is not None:
            handle.remove()


@torch.inference_mode()
def token_norms(lm: LoadedModel, texts: Sequence[str], *, include_pos0: bool = False, batch_size: int | None = None,
                max_length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``sums`` (n, L + 1) float64: per text, the L2 norms (float32) of the residual stream at its edited
    positions (every real token but its first unless ``include_pos0``) summed, at every state 0..L (L: the last
    block's output, before the final norm); ``counts`` (n,) int64 those positions. One pass, stopped after the
    last block (no final norm, no head). ``ExtractionError`` naming the text and state for a NaN or inf norm."""
    ids = encode(lm, texts, max_length)
    model, blocks = lm.model, decoder_layers(lm.model)
    n_states = len(blocks) + 1
    sums, counts = np.zeros((len(texts), n_states)), np.zeros(len(texts), dtype=np.int64)
    device = input_device(model)
    plan = plan_batches([len(x) for x in ids], batch_size or MAX_TEXTS_PER_BATCH,
                        memory_budget(model, lm.info.vocab_size))
    for index in plan:
        batch = collate([ids[i] for i in index], index, pad_id(lm.tokenizer)).to(device)
        where = edit_positions(batch, include_pos0)
        per_state: dict[int, torch.Tensor] = {}

        def norms(s: int, hidden: torch.Tensor, where=where, per_state=per_state) -> None:
            per_state[s] = torch.where(where, hidden.float().norm(dim=-1), 0.0).double().sum(dim=1)
            if s == n_states - 1:
                raise _Done

        with contextlib.suppress(_Done), states_seen(blocks, range(n_states), norms):
            model(**batch.model_inputs(), use_cache=False)
        found = torch.stack([per_state[s] for s in range(n_states)], dim=1)  # (B, L + 1)
        check_finite(lm, texts, batch.index, bad_layers=~torch.isfinite(found))
        sums[batch.index], counts[batch.index] = found.cpu().numpy(), where.sum(dim=1).cpu().numpy()
    return sums, counts


class _Done(Exception):
    """Raised from the last block's hook: what follows (final norm, head) is not needed."""

"""Training a tuned lens: every translator at once, against the model's own final distribution, batch by batch.

    lens = train_tuned_lens(lm, texts, steps=250, batch_size=8, seed=0)        # the paper's SGD recipe
    lens = train_tuned_lens(lm, texts, steps=250, optimizer="adam", lr=1e-3)   # the Adam substitute
    lens.record["heldout"]["metrics"]["tuned_kl"]   # (L + 1,) held-out KL(final || tuned lens), bits/token
    train_texts, heldout_texts = split_holdout(texts, 0.1, seed=0)   # the split it uses

Loss: for each hidden state ``l < n_layers``, the mean over a batch's scored tokens of KL(final || lens_l) in
nats (``final``: the model's own next-token distribution; ``lens_l``: softmax of
``transform(head(final_norm(h_l + W_l h_l + b_l)))``), summed over the states. The model, its final norm and its
head are frozen (their ``requires_grad`` is switched off while training and restored after); only the
translators learn. Every batch's hidden states are taken in one forward pass and only its scored tokens' rows
are kept; each state's loss is back-propagated on its own, a chunk of tokens at a time, so at most one chunk's
(tokens x vocab) logits and their gradients exist at once; the corpus's hidden states are never all held.

Optimiser: ``"sgd"`` (default): the paper's recipe, SGD with Nesterov momentum 0.9 and ``lr`` 0.1 (the released
code's learning-rate scale 1 times 1 - momentum), weight decay 1e-3, no warmup. ``"adam"``: a substitute, Adam
with ``lr`` 1e-3 and weight decay 1e-3, warmed up over the first 20 % of the steps (on the tests' planted
rotation, at ``lr`` 1e-2, it comes close to the SGD recipe's held-out KL). Both: the gradient's norm clipped at 1,
then a linear decay to 0 (``warmup``: the warmed-up share of the steps, default by optimiser). The paper's runs
take 2^18 tokens per step; a CPU run takes far fewer (``batch_size`` texts), so it stays further from the optimum
in the same number of steps. Batches: ``batch_size`` texts drawn without replacement from a seeded
shuffle of the training texts, reshuffled each epoch. The held-out texts (a seeded ``holdout`` fraction, at least
one text when there are two or more) are never trained on; :func:`~.tuned_lens_eval.evaluate_lenses` scores both
lenses on them after training, and the lens's ``record`` keeps those numbers with the settings.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from ..models.load import LoadedModel
from ..progress import steps as progress_steps
from .batching import tokenize
from .head import CHUNK_BYTES
from .lens import final_norm, layer_logits
from .tuned_lens import LensError, TunedLens, _head, scored_states
from .tuned_lens_eval import evaluate_lenses

OPTIMIZERS = {"sgd": 0.1, "adam": 1e-3}
"""Optimiser name -> its default learning rate."""
WARMUP = {"sgd": 0.0, "adam": 0.2}
"""Optimiser name -> the share of the steps its learning rate is warmed up over, by default."""
WEIGHT_DECAY = 1e-3
CLIP_NORM = 1.0
"""The translators' gradient norm is clipped at this before each step."""


def split_holdout(texts: Sequence[str], holdout: float, seed: int) -> tuple[list[int], list[int]]:
    """``train, held = split_holdout(texts, 0.1, seed)``: indices into ``texts`` (each ascending) of a seeded split;
    ``round(holdout * n)`` texts held out, at least one when ``holdout > 0`` and there are two or more texts."""
    if not 0.0 <= holdout < 1.0:
        raise ValueError(f"holdout must be in [0, 1); got {holdout}")
    n = len(texts)
    n_held = 0 if holdout == 0 or n < 2 else min(n - 1, max(1, round(holdout * n)))
    order = np.random.default_rng(seed).permutation(n)
    return sorted(order[n_held:].tolist()), sorted(order[:n_held].tolist())


@contextlib.contextmanager
def _frozen(model: torch.nn.Module) -> Iterator[None]:
    """Inside, no parameter of ``model`` requires a gradient; the flags are restored on exit."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def _schedule(n_steps: int, warmup: float):
    n_warm = max(1, round(warmup * n_steps)) if warmup > 0 else 0

    def factor(step: int) -> float:  # step: how many optimiser steps were taken before this one
        if step < n_warm:
            return (step + 1) / (n_warm + 1)
        return max(0.0, (n_steps - step) / max(1, n_steps - n_warm))
    return factor


def _batches(train: list[int], batch_size: int, rng: np.random.Generator) -> Iterator[list[int]]:
    """Endless batches of ``batch_size`` training indices, without replacement within each seeded epoch."""
    while True:
        order = rng.permutation(train).tolist()
        for s in range(0, len(order), batch_size):
            yield order[s : s + batch_size]


def train_tuned_lens(lm: LoadedModel, texts: Sequence[str], *, steps: int = 250, batch_size: int = 8,
                     lr: float | None = None, seed: int = 0, holdout: float = 0.1, max_length: int | None = 512,
                     optimizer: str = "sgd", warmup: float | None = None, corpus: str | None = None,
                     eval_batch_size: int | None = None, progress: bool = True) -> TunedLens:
    """Train a :class:`~.tuned_lens.TunedLens` for ``lm`` on ``texts`` (module docstring: loss, optimiser,
    batches); ``steps`` optimiser steps of ``batch_size`` texts cut to ``max_length`` tokens; ``lr`` defaults to
    the optimiser's (:data:`OPTIMIZERS`); ``corpus``: words describing the texts, kept in the record. Returns the
    lens with ``record`` holding the settings and ``record["heldout"]`` the held-out evaluation (or None without
    held-out texts). :class:`~.tuned_lens_io.LensError` when the training texts score no token."""
    if optimizer not in OPTIMIZERS:
        raise LensError(f"unknown optimizer {optimizer!r}; use one of {', '.join(OPTIMIZERS)}")
    if steps < 0 or batch_size < 1:
        raise LensError(f"steps must be >= 0 and batch_size >= 1; got steps={steps}, batch_size={batch_size}")
    lr = OPTIMIZERS[optimizer] if lr is None else float(lr)
    warmup = WARMUP[optimizer] if warmup is None else float(warmup)
    train, held = split_holdout(texts, holdout, seed)
    ids = tokenize(lm.tokenizer, [texts[i] for i in train], max_length)
    usable = [i for i, x in enumerate(ids) if len(x) >= 2]  # a text of one token scores nothing
    if steps > 0 and not usable:
        raise LensError(f"none of the {len(train)} training texts has two tokens or more, so no token is scored "
                        "and nothing can be learned; pass longer texts")
    lens = TunedLens.zeros(lm)
    params = list(lens.translators.parameters())
    opt = (torch.optim.Adam(params, lr=lr, weight_decay=WEIGHT_DECAY) if optimizer == "adam"
           else torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True, weight_decay=WEIGHT_DECAY))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(steps, warmup))
    rng = np.random.default_rng(seed)
    batches = _batches(usable, batch_size, rng)
    losses: list[float] = []
    chosen = range(steps)
    chosen = progress_steps(chosen, desc=f"train tuned lens {lm.info.name}", unit="step") if progress else chosen
    with _frozen(lm.model):
        for _ in chosen:
            index = next(batches)
            losses.append(_step(lm, lens, [ids[i] for i in index], index))
            torch.nn.utils.clip_grad_norm_(params, CLIP_NORM)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
    heldout = None
    if held:
        heldout = evaluate_lenses(lm, [texts[i] for i in held], lens, batch_size=eval_batch_size or batch_size,
                                  max_length=max_length, seed=seed, progress=progress).to_dict()
    lens.record = _record(lm, texts, train, held, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
                          holdout=holdout, max_length=max_length, optimizer=optimizer, warmup=warmup,
                          corpus=corpus, losses=losses, heldout=heldout)
    return lens


def _step(lm: LoadedModel, lens: TunedLens, ids: list[list[int]], index: list[int]) -> float:
    """Back-propagate one batch's loss into the translators' gradients; returns the loss (nats, summed over
    states of the token-mean KL)."""
    n_layers = lm.info.n_layers
    head, norm = _head(lm), final_norm(lm)
    states, scored = scored_states(lm, ids, index)
    n = len(scored.rows)
    step = max(1, CHUNK_BYTES // (4 * head.weight.shape[0]))
    total = 0.0
    for s in range(0, n, step):
        part = slice(s, s + step)
        with torch.no_grad():
            log_final = torch.log_softmax(layer_logits(lm, n_layers, states[n_layers][part], head=head).float(), -1)
            p_final = log_final.exp()
        for layer in range(n_layers):
            with torch.enable_grad():  # also when called under no_grad
                lens_logits = lens.logits(layer, states[layer][part], lm=lm, head=head, norm=norm)
                log_lens = torch.log_softmax(lens_logits.float(), -1)
                kl = (p_final * (log_final - log_lens)).sum()  # summed over this chunk's tokens, nats
                (kl / n).backward()
            total += float(kl.detach()) / n
    return total


def _record(lm: LoadedModel, texts: Sequence[str], train: list[int], held: list[int], *, losses: list[float],
            heldout: dict | None, corpus: str | None, **settings: Any) -> dict[str, Any]:
    optimizer = settings["optimizer"]
    described = ("Adam (a substitute for the paper's SGD with Nesterov momentum 0.9)" if optimizer == "adam"
                 else "SGD with Nesterov momentum 0.9 (the paper's recipe)") + \
        f", weight decay {WEIGHT_DECAY:g}, gradient norm clipped at {CLIP_NORM:g}"
    tail = losses[-max(1, len(losses) // 10):] if losses else []
    return {
        "model": lm.info.name, "weights_hash": lm.info.weights_hash, "revision": lm.info.revision,
        **settings, "optimizer_description": described,
        "schedule": (f"linear warmup over {settings['warmup']:.0%} of the steps, then " if settings["warmup"] else
                     "") + "linear decay to 0",
        "loss": "sum over hidden states 0..n_layers-1 of the token-mean KL(final || lens), nats",
        "first_loss": losses[0] if losses else None, "last_loss": float(np.mean(tail)) if tail else None,
        "corpus": {"description": corpus, "texts": len(texts), "train_texts": len(train), "heldout_texts": len(held),
                   "split": f"seeded permutation (seed {settings['seed']}), {len(held)} texts held out"},
        "heldout": heldout,
        "format": "tuned-lens linear_tuned_lens: params.pt translators 0..n_layers-1, h + h @ W.T + b",
        "finite_loss": all(math.isfinite(x) for x in losses),
    }

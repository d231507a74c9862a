"""Training a tuned lens: one pass caches every state's rows, a least-squares start, then KL steps on the rows.

    lens = train_tuned_lens(lm, texts, groups=groups, seed=0)     # the default: least squares + 40 Adam steps
    lens = train_tuned_lens(lm, texts, **OLD_RECIPE)              # 0.2's recipe: 250 SGD steps of 8 texts from 0
    lens.record["heldout"]["metrics"]["tuned_kl"]    # (L + 1,) held-out KL(final || tuned lens), bits/token
    lens.record["in_sample"]["metrics"]["tuned_kl"]  # the same on training rows, for the gap
    train, held = split_holdout(texts, 0.1, seed=0, groups=groups)   # .tuned_lens_split: the split it uses

**Data.** The texts are split by ``groups`` (:func:`~.tuned_lens_split.split_holdout`); one forward pass per
batch keeps every hidden state's row of every scored token (:func:`~.tuned_lens_rows.cache_rows`): the training
texts' rows (with ``max_tokens``: whole texts in a seeded order while their rows fit it, the first always) and
the held-out texts' rows whose prefix no training text shares. Nothing of a held-out text is trained on or used
to start the fit.

**Start** (``init="lstsq"``, default): each translator is the ridge least-squares map from its state to the last
block's output (Din et al. 2023), fitted on the training rows without position 0 (the attention sink), pulled
toward the identity (:func:`~.tuned_lens_fit.least_squares_start`). ``init="zeros"``: the logit lens.

**KL steps.** Loss: for each hidden state ``l < n_layers``, the mean over a step's rows of KL(final || lens_l) in
nats, summed over states (the model, its norm and head frozen). A step draws ``tokens_per_step`` rows without
replacement from a seeded shuffle of the training rows (reshuffled each epoch; epochs run end to end, so a step
larger than the corpus holds each row about equally often), or, with ``batch_size``, the rows
of ``batch_size`` whole texts (the 0.2 recipe). With a plain head (no bias, soft-capping or scaling) the KL's
normaliser is read on a shortlist (the step's rows' ``top_k`` most likely tokens under the model and
``negatives`` tokens sampled from the training rows' mean distribution, log-Q corrected:
:func:`~.tuned_lens_fit.shortlist_kl`; ``shortlist=False``: the full vocabulary), the head's products in
``head_dtype`` (``"auto"``: bfloat16 where the processor has it natively), the loss in float32.

**Optimiser.** ``"adam"`` (default): Adam, ``lr`` 1e-4, no weight decay, linear decay to 0. ``"sgd"``: the
paper's SGD with Nesterov momentum 0.9, ``lr`` 0.1 (the released code's scale 1 times 1 - momentum), weight decay
1e-3, linear decay. Both clip the gradient norm at 1. Belrose et al. take 2^18 tokens per step for 250 steps;
the record says how far a run is from that (tokens per step, token-draws, distinct tokens).

**Evaluation.** After training, both lenses are scored in float32 on the full vocabulary
(:func:`~.tuned_lens_eval.evaluate_rows`) on the held-out rows (``record["heldout"]``), and the tuned lens on a
seeded sample of 512 training rows (``record["in_sample"]``): the gap shows what was fitted to the corpus.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from ...models.load import LoadedModel
from ...progress import steps as progress_steps
from ..forward.batching import tokenize
from ..forward.head import CHUNK_BYTES, transform
from .logit import final_norm
from .tuned import LensError, TunedLens, _head
from .tuned_eval import evaluate_rows
from .tuned_fit import DEFAULT_RIDGE, Shortlist, least_squares_start, shortlist_kl
from .tuned_fit import head_dtype as pick_head_dtype
from .tuned_rows import LensRows, TargetTerms, cache_rows, target_terms
from .tuned_split import distinct_rows, split_holdout, unseen_positions

__all__ = ["OLD_RECIPE", "PAPER_TOKENS_PER_STEP", "split_holdout", "train_tuned_lens"]

OPTIMIZERS = {"sgd": 0.1, "adam": 1e-4}
"""Optimiser name -> its default learning rate."""
WEIGHT_DECAY = {"sgd": 1e-3, "adam": 0.0}
CLIP_NORM = 1.0
"""The translators' gradient norm is clipped at this before each step."""
PAPER_TOKENS_PER_STEP = 2**18
"""Belrose et al.'s tokens per step (250 steps of 2^18 tokens), for comparison in the record."""
DEFAULTS: dict[str, Any] = {"steps": 40, "tokens_per_step": 512, "init": "lstsq", "optimizer": "adam",
                            "shortlist": True, "negatives": 2048, "top_k": 8, "head_dtype": "auto", "seed": 0}
"""train-lens's defaults."""
OLD_RECIPE: dict[str, Any] = {"steps": 250, "batch_size": 8, "init": "zeros", "optimizer": "sgd",
                              "shortlist": False, "head_dtype": "float32"}
"""layerscope 0.2's recipe: 250 SGD steps of 8 texts from the logit lens, on the full vocabulary in float32."""
IN_SAMPLE_ROWS = 512
"""At most this many training rows (a seeded sample) are scored, through the tuned lens, for the in-sample
numbers."""


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


def _schedule(n_steps: int, warmup: float) -> Callable[[int], float]:
    """The learning rate's factor before step ``step``: linear warmup over ``warmup`` of the steps, then linear
    decay to 0."""
    n_warm = max(1, round(warmup * n_steps)) if warmup > 0 else 0

    def factor(step: int) -> float:
        if step < n_warm:
            return (step + 1) / (n_warm + 1)
        return max(0.0, (n_steps - step) / max(1, n_steps - n_warm))
    return factor


def _row_batches(rows: LensRows, tokens_per_step: int | None, batch_size: int | None,
                 rng: np.random.Generator) -> Iterator[torch.Tensor]:
    """Endless (n,) index tensors into ``rows``: ``tokens_per_step`` rows, or the rows of ``batch_size`` texts,
    without replacement within each seeded epoch."""
    if batch_size is not None:
        texts = rows.texts.cpu().numpy()
        labels = np.unique(texts)
        by_text = {t: np.flatnonzero(texts == t) for t in labels}
        while True:
            order = rng.permutation(labels)
            for s in range(0, len(order), batch_size):
                yield torch.from_numpy(np.concatenate([by_text[t] for t in order[s : s + batch_size]]))
    n, stream = len(rows), np.zeros(0, dtype=np.int64)
    while True:  # epochs end to end: a step larger than the corpus holds each row about equally often
        while len(stream) < tokens_per_step:
            stream = np.concatenate([stream, rng.permutation(n)])
        yield torch.from_numpy(stream[:tokens_per_step].copy())
        stream = stream[tokens_per_step:]


def plain_head(lm: LoadedModel) -> bool:
    """Whether the head's logits are ``W x`` alone (no bias, no scaling or soft-capping): the shortlist KL holds."""
    head = _head(lm)
    if getattr(head, "bias", None) is not None:
        return False
    probe = torch.tensor([[1.0, -2.0, 40.0]])
    return torch.equal(transform(lm, probe), probe)


def unembed_hash(lm: LoadedModel) -> str:
    """The ``tuned-lens`` package's ``unembed_hash``: SHA-256 of numpy's ``array_str`` of the head's weight in
    float32 at precision 1 (numpy's default print options), as its ``Unembed.unembedding_hash`` computes it."""
    weight = _head(lm).weight.detach().to("cpu", torch.float32).numpy()
    with np.printoptions(precision=1, threshold=1000, edgeitems=3, linewidth=75, suppress=False):
        return hashlib.sha256(np.array_str(weight, precision=1).encode()).hexdigest()


def train_tuned_lens(lm: LoadedModel, texts: Sequence[str], *, groups: Sequence | None = None,
                     steps: int = DEFAULTS["steps"], tokens_per_step: int | None = DEFAULTS["tokens_per_step"],
                     batch_size: int | None = None, max_tokens: int | None = None, init: str = DEFAULTS["init"],
                     optimizer: str = DEFAULTS["optimizer"], lr: float | None = None, ridge: float = DEFAULT_RIDGE,
                     shortlist: bool = DEFAULTS["shortlist"], negatives: int = DEFAULTS["negatives"],
                     top_k: int = DEFAULTS["top_k"], head_dtype: str = DEFAULTS["head_dtype"], seed: int = 0,
                     holdout: float = 0.1,
                     max_length: int | None = 512, corpus: str | None = None, progress: bool = True,
                     on_step: Callable[[int, np.ndarray], None] | None = None, warmup: float = 0.0) -> TunedLens:
    """Train a :class:`~.tuned_lens.TunedLens` for ``lm`` on ``texts`` (module docstring: data, start, steps,
    optimiser, evaluation). ``groups``: a label per text kept on one side of the split; ``batch_size``: texts per
    step instead of ``tokens_per_step`` rows; ``corpus``: words describing the texts, kept in the record;
    ``on_step(step, text_indices)``: called with the indices into ``texts`` of the rows each step trains on (step
    -1: the least-squares start's); ``warmup``: the share of the steps the learning rate is warmed up over
    before the linear decay (default 0). Returns the lens, ``record`` holding the settings, the data's size and
    the evaluations. :class:`~.tuned_lens_io.LensError` for settings or a corpus that cannot train a lens."""
    t_start = time.perf_counter()
    check_settings(steps=steps, tokens_per_step=tokens_per_step, batch_size=batch_size, max_tokens=max_tokens,
                   init=init, optimizer=optimizer, negatives=negatives, top_k=top_k)
    if len(texts) < 2 and holdout > 0:
        raise LensError(f"the corpus holds {len(texts)} text; a tuned lens needs at least two (one is held out to "
                        "score it): add texts")
    lr = OPTIMIZERS[optimizer] if lr is None else float(lr)
    train, held = split_holdout(texts, holdout, seed, groups)
    ids = tokenize(lm.tokenizer, list(texts), max_length)
    train = [i for i in train if len(ids[i]) >= 2]
    if not train:
        raise LensError(f"none of the {len(texts)} texts' training part has two tokens or more, so no token is "
                        "scored and nothing can be learned; pass longer texts")
    rng = np.random.default_rng(seed)
    if max_tokens is not None:  # whole texts in a seeded order while they fit (at least one)
        order, total, kept = rng.permutation(train), 0, []
        for i in order:
            n = len(ids[i]) - 1
            if kept and total + n > max_tokens:
                continue
            kept.append(int(i))
            total += n
        train = sorted(kept)
    rows = cache_rows(lm, [ids[i] for i in train], train, progress=progress)
    held = [i for i in held if len(ids[i]) >= 2]
    keep = unseen_positions([ids[i] for i in train], [ids[i] for i in held])
    held_rows = cache_rows(lm, [ids[i] for i in held], held, keep=keep, progress=progress) if held else None
    t_rows = time.perf_counter()

    lens = TunedLens.zeros(lm)
    if init == "lstsq":
        _least_squares(lm, lens, rows, ridge, on_step)
    t_init = time.perf_counter()
    dtype = head_dtype_of(head_dtype, lm)
    shortlist = bool(shortlist) and plain_head(lm)
    losses, drawn = _kl_steps(lm, lens, rows, steps=steps, tokens_per_step=tokens_per_step, batch_size=batch_size,
                              optimizer=optimizer, lr=lr, use_shortlist=shortlist, negatives=negatives,
                              top_k=top_k, dtype=dtype, rng=rng, seed=seed, progress=progress, warmup=warmup,
                              on_step=on_step)
    t_steps = time.perf_counter()

    heldout = in_sample = None
    if held_rows is not None and len(held_rows):
        heldout = evaluate_rows(lm, held_rows, lens, n_texts=len(texts), seed=seed, progress=progress).to_dict()
    pick = np.sort(np.random.default_rng(seed + 1).choice(len(rows), min(len(rows), IN_SAMPLE_ROWS), replace=False))
    in_sample = evaluate_rows(lm, rows.select(torch.from_numpy(pick)), lens, n_texts=len(texts), seed=seed,
                              kinds=("tuned",), progress=progress).to_dict()
    t_end = time.perf_counter()
    lens.record = {
        "model": lm.info.name, "weights_hash": lm.info.weights_hash, "revision": lm.info.revision,
        "steps": steps, "tokens_per_step": tokens_per_step if batch_size is None else None,
        "batch_size": batch_size, "max_tokens": max_tokens, "init": init, "ridge": ridge if init == "lstsq" else None,
        "optimizer": optimizer, "lr": lr, "weight_decay": WEIGHT_DECAY[optimizer], "clip_norm": CLIP_NORM,
        "optimizer_description": _described(optimizer, lr), "warmup": warmup,
        "schedule": (f"linear warmup over {warmup:.0%} of the steps, then " if warmup else "") + "linear decay to 0",
        "normaliser": (f"shortlist: each step's rows' top {top_k} tokens and {negatives} sampled negatives "
                       "(log-Q corrected)" if shortlist else "full vocabulary"),
        "head_dtype": str(dtype).removeprefix("torch."), "seed": seed, "holdout": holdout, "max_length": max_length,
        "loss": "sum over hidden states 0..n_layers-1 of the token-mean KL(final || lens), nats",
        "first_loss": losses[0] if losses else None,
        "last_loss": float(np.mean(losses[-max(1, len(losses) // 10):])) if losses else None,
        "finite_loss": all(math.isfinite(x) for x in losses),
        "tokens": {"train_rows": len(rows), "distinct_train_rows": distinct_rows([ids[i] for i in train]),
                   "token_draws": int(sum(drawn)),
                   "paper_tokens_per_step": PAPER_TOKENS_PER_STEP,
                   "paper_token_draws": 250 * PAPER_TOKENS_PER_STEP,
                   "heldout_rows": len(held_rows) if held_rows is not None else 0},
        "corpus": {"description": corpus, "texts": len(texts), "train_texts": len(train), "heldout_texts": len(held),
                   "split": f"seeded permutation of {'the groups' if groups is not None else 'the texts'} "
                            f"(seed {seed}); a held-out position is scored only when no training text starts "
                            "with its prefix"},
        "heldout": heldout, "in_sample": in_sample,
        "seconds": {"rows": t_rows - t_start, "init": t_init - t_rows, "steps": t_steps - t_init,
                    "evaluation": t_end - t_steps},
        "format": "tuned-lens linear_tuned_lens: params.pt translators 0..n_layers-1, h + h @ W.T + b",
        "unembed_hash": unembed_hash(lm),
    }
    return lens


def head_dtype_of(choice: str, lm: LoadedModel) -> torch.dtype:
    """The dtype of the head's products while training (:func:`~.tuned_lens_fit.head_dtype` on the head's
    device)."""
    return pick_head_dtype(choice, _head(lm).weight.device)


def check_settings(*, steps: int, tokens_per_step: int | None = DEFAULTS["tokens_per_step"],
                   batch_size: int | None = None, max_tokens: int | None = None, init: str = DEFAULTS["init"],
                   optimizer: str = DEFAULTS["optimizer"], negatives: int = DEFAULTS["negatives"],
                   top_k: int = DEFAULTS["top_k"], **_: Any) -> None:
    """:class:`~.tuned_lens_io.LensError` naming the setting and the fix for one that cannot train a lens."""
    if optimizer not in OPTIMIZERS:
        raise LensError(f"unknown optimizer {optimizer!r}; use one of {', '.join(OPTIMIZERS)}")
    if init not in ("lstsq", "zeros"):
        raise LensError(f"unknown init {init!r}; use lstsq (the least-squares start) or zeros (the logit lens)")
    if steps < 1:
        raise LensError(f"steps must be at least 1; got {steps} (pass --steps 1 or more)")
    if batch_size is None and (tokens_per_step is None or tokens_per_step < 1):
        raise LensError(f"tokens per step must be at least 1; got {tokens_per_step}")
    if batch_size is not None and batch_size < 1:
        raise LensError(f"batch size must be at least 1 text; got {batch_size}")
    if max_tokens is not None and batch_size is None and max_tokens < tokens_per_step:
        raise LensError(f"--max-tokens {max_tokens} is below one step's --tokens-per-step {tokens_per_step}; "
                        "raise --max-tokens or lower --tokens-per-step")
    if max_tokens is not None and max_tokens < 1:
        raise LensError(f"--max-tokens must be at least 1; got {max_tokens}")
    if negatives < 0 or top_k < 1:
        raise LensError(f"negatives must be >= 0 and top_k >= 1; got negatives={negatives}, top_k={top_k}")


def _least_squares(lm: LoadedModel, lens: TunedLens, rows: LensRows, ridge: float,
                   on_step: Callable[[int, np.ndarray], None] | None) -> None:
    """Each translator set to the least-squares start on the training rows without position 0."""
    fit = rows.positions.to(rows.states.device) > 0
    if not bool(fit.any()):
        return
    if on_step is not None:
        on_step(-1, np.unique(rows.texts[fit.to(rows.texts.device)].cpu().numpy()))
    target = rows.pre_norm[fit]
    with torch.no_grad():
        for layer, translator in enumerate(lens.translators):
            weight, bias = least_squares_start(rows.states[layer][fit], target, ridge)
            translator.weight.copy_(weight)
            translator.bias.copy_(bias)


def _kl_steps(lm: LoadedModel, lens: TunedLens, rows: LensRows, *, steps: int, tokens_per_step: int | None,
              batch_size: int | None, optimizer: str, lr: float, use_shortlist: bool, negatives: int, top_k: int,
              dtype: torch.dtype, rng: np.random.Generator, seed: int, progress: bool, warmup: float,
              on_step: Callable[[int, np.ndarray], None] | None) -> tuple[list[float], list[int]]:
    """``steps`` optimiser steps on the cached rows; returns each step's loss (nats, summed over states) and
    rows."""
    n_layers = lm.info.n_layers
    head, norm = _head(lm), final_norm(lm)
    weight = head.weight.detach().to(dtype)
    plain = plain_head(lm)
    terms = (target_terms(head.weight.detach(), rows.states[n_layers], top_k=top_k, progress=progress)
             if plain else None)
    params = list(lens.translators.parameters())
    opt = (torch.optim.Adam(params, lr=lr, weight_decay=WEIGHT_DECAY["adam"]) if optimizer == "adam"
           else torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True, weight_decay=WEIGHT_DECAY["sgd"]))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(steps, warmup))
    batches = _row_batches(rows, tokens_per_step, batch_size, rng)
    generator = torch.Generator().manual_seed(seed)
    full = Shortlist.everything(weight.shape[0], weight.device)
    losses: list[float] = []
    drawn: list[int] = []
    chosen = range(steps)
    chosen = progress_steps(chosen, desc=f"train tuned lens {lm.info.name}", unit="step") if progress else chosen
    with _frozen(lm.model):
        for step in chosen:
            index = next(batches)
            drawn.append(len(index))
            if on_step is not None:
                on_step(step, np.unique(rows.texts[index].cpu().numpy()))
            short = (Shortlist.draw(terms.top[index.to(terms.top.device)], terms.unigram, negatives, generator)
                     if use_shortlist and plain else full)
            losses.append(_step(lens, rows, terms, index, weight, short, norm, n_layers) if plain
                          else _exact_step(lm, lens, rows, index))
            torch.nn.utils.clip_grad_norm_(params, CLIP_NORM)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
    return losses, drawn


def _step(lens: TunedLens, rows: LensRows, terms: TargetTerms, index: torch.Tensor, weight: torch.Tensor,
          short: Shortlist, norm: torch.nn.Module, n_layers: int) -> float:
    """Back-propagate one step's loss into the translators' gradients, a chunk of rows at a time; returns it."""
    n = len(index)
    budget = CHUNK_BYTES if weight.device.type == "cpu" else 8 * CHUNK_BYTES  # an accelerator takes more at once
    chunk = max(1, budget // (4 * len(short.ids)))
    total = 0.0
    for s in range(0, n, chunk):
        part = index[s : s + chunk].to(rows.states.device)
        mu, neg_entropy = terms.mu[part.to(terms.mu.device)], terms.neg_entropy[part.to(terms.mu.device)]
        for layer in range(n_layers):
            with torch.enable_grad():
                x = norm(lens.translate(layer, rows.states[layer][part])).float()
                kl = shortlist_kl(x, mu, neg_entropy, weight, short).sum()
                (kl / n).backward()
            total += float(kl.detach()) / n
    return total


def _exact_step(lm: LoadedModel, lens: TunedLens, rows: LensRows, index: torch.Tensor) -> float:
    """:func:`_step` for a head that is not plain: both distributions on the full vocabulary, in float32."""
    n_layers = lm.info.n_layers
    head, norm = _head(lm), final_norm(lm)
    n = len(index)
    chunk = max(1, CHUNK_BYTES // (4 * head.weight.shape[0]))
    total = 0.0
    for s in range(0, n, chunk):
        part = index[s : s + chunk].to(rows.states.device)
        with torch.no_grad():
            log_final = torch.log_softmax(lens.logits(n_layers, rows.states[n_layers][part], lm=lm, head=head)
                                          .float(), -1)
            p_final = log_final.exp()
        for layer in range(n_layers):
            with torch.enable_grad():
                log_lens = torch.log_softmax(lens.logits(layer, rows.states[layer][part], lm=lm, head=head,
                                                         norm=norm).float(), -1)
                kl = (p_final * (log_final - log_lens)).sum()
                (kl / n).backward()
            total += float(kl.detach()) / n
    return total


def _described(optimizer: str, lr: float) -> str:
    if optimizer == "adam":
        return f"Adam (lr {lr:g}, no weight decay), gradient norm clipped at {CLIP_NORM:g}"
    return (f"SGD with Nesterov momentum 0.9 (lr {lr:g}; Belrose et al.'s optimiser), weight decay "
            f"{WEIGHT_DECAY['sgd']:g}, gradient norm clipped at {CLIP_NORM:g}")

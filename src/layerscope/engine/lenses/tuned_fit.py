"""The pieces of a fast tuned-lens fit: a least-squares start, and a KL whose normaliser reads a shortlist.

    weight, bias = least_squares_start(h, target, ridge=1e-3)     # (d, d), (d,): h + h @ W.T + b ~ target
    short = Shortlist.draw(terms.top[rows], terms.unigram, n_negatives=2048, generator=g)
    kl = shortlist_kl(x, terms.mu[rows], terms.neg_entropy[rows], head_weight, short)   # (n,) nats
    head_dtype("auto", device)      # torch.bfloat16 where the processor has native bf16 matrix products

**Least-squares start** (Din et al. 2023, "Jump to Conclusions: Short-Cutting Transformers with Linear
Transformations"): the affine map from hidden state ``l`` to the last block's output, fitted by ridge regression.
The final norm forgets a row's scale, so each target row is first rescaled to its input row's root mean square;
the ridge pulls ``W`` (the residual part of ``h + h W^T + b``) toward 0, i.e. the map toward the identity, with
strength ``ridge`` times the inputs' mean squared deviation.

**Shortlist KL**: for head inputs ``x`` (n, d) of a lens and the model's own distribution ``p`` of the same rows,
``KL(p || softmax(W x)) = sum p log p - mu . x + logsumexp_v (W_v . x)`` with ``mu = sum_v p_v W_v``
(:class:`~.tuned_lens_rows.TargetTerms`). The normaliser is estimated on a shortlist: every token in
``positives`` (the rows' most likely tokens) exactly, plus ``m`` negatives drawn with replacement from a proposal
``Q`` over the other tokens, each weighted ``1 / (m Q(v))`` (the log-Q correction; Bengio & Senecal 2008, Jean et
al. 2015). With every token a positive the estimate is the full normaliser and the KL exact. Only plain heads
(no bias, no soft-capping or scaling) qualify; otherwise the trainer scores the full vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

DEFAULT_RIDGE = 1e-3


@torch.no_grad()
def least_squares_start(inputs: torch.Tensor, targets: torch.Tensor, ridge: float = DEFAULT_RIDGE
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W, b)``: (d, d) and (d,) float64 minimising ``sum_rows |h + h W^T + b - t|^2 + ridge * n * s2 * |W|^2``
    over ``inputs`` h (n, d) and ``targets`` t (n, d), each target row first rescaled to its input row's root
    mean square; ``s2`` is the inputs' mean squared deviation per coordinate."""
    h = inputs.double()
    t = targets.double()
    t = t * (h.pow(2).mean(-1, keepdim=True).sqrt() / t.pow(2).mean(-1, keepdim=True).sqrt().clamp_min(1e-12))
    r = t - h
    h_mean, r_mean = h.mean(0), r.mean(0)
    hc, rc = h - h_mean, r - r_mean
    n, d = h.shape
    gram = hc.T @ hc
    s2 = float(torch.diagonal(gram).sum()) / (n * d)
    gram += ridge * n * max(s2, 1e-12) * torch.eye(d, dtype=gram.dtype, device=gram.device)
    w_t = torch.linalg.solve(gram, hc.T @ rc)  # (d, d): r ~ hc @ w_t
    return w_t.T.contiguous(), r_mean - h_mean @ w_t


@dataclass(frozen=True)
class Shortlist:
    """Tokens whose logits the normaliser reads: ``ids`` (k,) and ``log_weights`` (k,) (0 for a positive,
    ``-log(m Q(v))`` for a sampled negative)."""

    ids: torch.Tensor
    log_weights: torch.Tensor

    @classmethod
    def draw(cls, positives: torch.Tensor, proposal: torch.Tensor, n_negatives: int,
             generator: torch.Generator | None = None) -> Shortlist:
        """The distinct tokens of ``positives`` (any shape) and ``n_negatives`` draws from ``proposal`` (vocab,)
        (non-negative; renormalised over the tokens that are not positives); no negatives when every token is one."""
        vocab = proposal.shape[0]
        pos = torch.unique(positives.reshape(-1).to(proposal.device))
        q = proposal.double().clone()
        q[pos] = 0
        total = float(q.sum())
        if n_negatives <= 0 or len(pos) >= vocab or total <= 0:
            return cls(ids=pos, log_weights=torch.zeros(len(pos), dtype=torch.float32, device=pos.device))
        q /= total
        neg = torch.multinomial(q.float().cpu(), n_negatives, replacement=True, generator=generator).to(pos.device)
        log_w = -(torch.log(q[neg]) + torch.log(torch.tensor(float(n_negatives), dtype=torch.float64)))
        return cls(ids=torch.cat([pos, neg]),
                   log_weights=torch.cat([torch.zeros(len(pos), dtype=torch.float64, device=pos.device),
                                          log_w]).float())

    @classmethod
    def everything(cls, vocab: int, device: torch.device | str = "cpu") -> Shortlist:
        """Every token a positive: the exact normaliser."""
        return cls(ids=torch.arange(vocab, device=device), log_weights=torch.zeros(vocab, device=device))


def shortlist_kl(x: torch.Tensor, mu: torch.Tensor, neg_entropy: torch.Tensor, weight: torch.Tensor,
                 shortlist: Shortlist) -> torch.Tensor:
    """(n,) float32 KL(p || softmax(weight x)) in nats per row, the normaliser read on ``shortlist``: ``x`` (n, d)
    head inputs, ``mu`` (n, d) and ``neg_entropy`` (n,) the target's terms, ``weight`` (vocab, d) the head
    (its dtype sets the matrix product's: bfloat16 for speed; the rest is float32)."""
    rows = weight[shortlist.ids]  # (k, d)
    logits = (x.to(rows.dtype) @ rows.T).float() + shortlist.log_weights  # (n, k)
    return neg_entropy - (x.float() * mu).sum(-1) + torch.logsumexp(logits, dim=-1)


def has_native_bf16(device: torch.device | str) -> bool:
    """Whether bfloat16 matrix products run natively: a CUDA device with bf16 support, or a CPU with AVX-512 BF16
    or AMX (what oneDNN uses)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    try:
        flags = open("/proc/cpuinfo", encoding="ascii", errors="replace").read()
    except OSError:
        return False
    return any(flag in flags.split() for flag in ("avx512_bf16", "amx_bf16"))


def head_dtype(choice: str, device: torch.device | str) -> torch.dtype:
    """The dtype of the head's matrix products while training: ``"auto"`` (bfloat16 where
    :func:`has_native_bf16`, else float32), ``"float32"`` or ``"bfloat16"``."""
    if choice == "auto":
        return torch.bfloat16 if has_native_bf16(device) else torch.float32
    if choice in ("float32", "bfloat16"):
        return getattr(torch, choice)
    raise ValueError(f"head dtype must be auto, float32 or bfloat16; got {choice!r}")

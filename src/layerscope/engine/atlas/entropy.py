"""The prompt entropy (Skean et al. 2025): the matrix entropy of each text's token Gram matrix, every text, layer
and token set of a batch made together, with no host sync of their own.

    grams = EntropyGrams("skean", d, on_host=True)   # one batch's Gram matrices, added layer by layer
    grams.add(h, mask)                      # h (B, T, d) one layer's states, mask (B, T) bool: one token set
    values = from_host(to_host(grams.result()), d)            # (K, B, 3) float64 on the host, NaN where unusable
    values = grams.entropies()              # the same, decomposed on the Grams' device
    values = prompt_entropies(h, mask, "raw")                 # (B, 3) for one layer and token set
    sums, n = prompt_entropy_sums(h, real)                    # (3,) summed over the texts of 2 or more tokens

The three numbers per text are the entropy, the normalised entropy and the effective rank of
:func:`layerscope.measures.entropy.matrix_entropy` in its ``convention``: ``skean`` (the authors' code: centre
the text's tokens, unit rows, the Gram clamped at 0, ``Z'Z`` for a text of more tokens than dimensions) or
``raw`` (the plain Gram, whose nonzero eigenvalues are those of the smaller of ``ZZ'`` and ``Z'Z``).
Eigenvalues below lambda_max max(n, d) eps count as 0; a text of fewer than 2 tokens (or, in the ``skean``
convention, with a token equal to the text's mean) gets NaN.

``torch.linalg.eigvalsh`` checks its result on the host (one sync per call on a GPU) and takes small matrices one
by one there, so the atlas brings a batch's Grams back to the host with its other sums (up to
:data:`HOST_GRAM_BYTES`) and decomposes them on every CPU thread, from one worker thread while the next batch's
forward pass runs (:meth:`.sums.PassSums.store`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch
import torch.nn.functional as F

CONVENTIONS = ("skean", "raw")
GRAM_BYTES = 512 * 2**20
"""Most bytes of float64 Gram matrices one ``eigvalsh`` call decomposes (a batch's are split by layer above it)."""
HOST_GRAM_BYTES = 2**30
"""A batch's Grams up to this size go back to the host with its other sums and are decomposed there, on every CPU
thread: no host sync of their own, and a GPU's ``eigvalsh`` takes small matrices one by one (30,360 of 40 x 40 in
8.0 s on an H200; 1.7 s in one call on its host's CPU). Larger ones are decomposed on the device,
:data:`GRAM_BYTES` at a time."""


@dataclass(frozen=True)
class Grams:
    """One layer's and token set's Gram matrices: ``main`` (B, m, m) float64 and, in the ``skean`` convention
    when the batch is wider than ``d``, ``wide`` (B, d, d), the ``Z'Z`` its texts of more than ``d`` tokens use."""

    main: torch.Tensor
    wide: torch.Tensor | None
    n: torch.Tensor
    """(B,) tokens of each text in the set."""
    usable: torch.Tensor
    """(B,) bool: the text has an entropy (before its eigenvalues are seen)."""


def gram_matrices(hidden: torch.Tensor, mask: torch.Tensor, convention: str = "raw") -> Grams:
    """``grams = gram_matrices(h, mask, "skean")``: the :class:`Grams` of ``hidden`` (B, T, d) over each text's
    ``mask`` (B, T) tokens, in float64; rows outside the mask are zero (zero eigenvalues)."""
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown entropy convention {convention!r}; use {' or '.join(CONVENTIONS)}")
    z = torch.where(mask[..., None], hidden.double(), 0.0)  # (B, T, d)
    n = mask.sum(dim=1)
    T, d = z.shape[1], z.shape[2]
    usable = n >= 2
    if convention == "raw":  # the same nonzero eigenvalues either way: the smaller matrix
        return Grams(z @ z.transpose(1, 2) if T <= d else z.transpose(1, 2) @ z, None, n, usable)
    mean = z.sum(dim=1, keepdim=True) / n.clamp(min=1)[:, None, None]
    z = torch.where(mask[..., None], z - mean, 0.0)
    norms = z.norm(dim=-1)
    usable = usable & ~((norms == 0) & mask).any(dim=1)
    z = z / torch.where(norms > 0, norms, 1.0)[..., None]
    wide = (z.transpose(1, 2) @ z).clamp(min=0) if T > d else None  # their code: Z'Z for N > D
    return Grams((z @ z.transpose(1, 2)).clamp(min=0), wide, n, usable)


def eigenvalues(grams: list[torch.Tensor]) -> list[torch.Tensor]:
    """``values = eigenvalues([g1, g2, ...])``: ascending eigenvalues (B, m) of each (B, m, m) float64 stack of the
    same shape, in as few ``eigvalsh`` calls as :data:`GRAM_BYTES` allows (on the CPU split across threads)."""
    if not grams:
        return []
    step = max(1, GRAM_BYTES // max(grams[0].numel() * 8, 1))
    out = []
    for start in range(0, len(grams), step):
        out.extend(_eigvalsh(torch.stack(grams[start : start + step])).unbind(0))
    return out


def _eigvalsh(mats: torch.Tensor) -> torch.Tensor:
    """``torch.linalg.eigvalsh(mats)`` of (..., m, m); on the CPU one call per thread (LAPACK takes the matrices of
    one call one after the other), each matrix decomposed alone either way."""
    threads = torch.get_num_threads()
    if mats.is_cuda or threads <= 1 or mats.numel() < 2**16:
        return torch.linalg.eigvalsh(mats)
    flat = mats.reshape(-1, *mats.shape[-2:])
    with ThreadPoolExecutor(threads) as pool:
        parts = list(pool.map(torch.linalg.eigvalsh, flat.chunk(threads)))
    return torch.cat(parts).view(mats.shape[:-1])


def entropies(values: torch.Tensor, n: torch.Tensor, usable: torch.Tensor, d: int) -> torch.Tensor:
    """(..., B, 3) float64: entropy, normalised entropy, effective rank from ascending eigenvalues ``values``
    (..., B, m) of texts of ``n`` (..., B) tokens in ``d`` dimensions; NaN where not ``usable`` (..., B)."""
    largest = values[..., -1]
    usable = usable & (largest > 0)
    tolerance = largest * torch.clamp(n, min=d).double() * torch.finfo(torch.float64).eps
    values = torch.where(values >= tolerance[..., None], values, 0.0)
    p = values / values.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    entropy = -torch.where(p > 0, p * p.log(), 0.0).sum(dim=-1)
    bound = torch.log(torch.clamp(n, max=d).double())
    per_text = torch.stack([entropy, entropy / torch.where(bound > 0, bound, 1.0), entropy.exp()], dim=-1)
    return torch.where(usable[..., None], per_text, torch.nan)


def values_of(main: torch.Tensor, wide: torch.Tensor | None, n: torch.Tensor, d: int) -> torch.Tensor:
    """(K, B, m) ascending eigenvalues of Grams ``main`` (K, B, m, m); in the ``skean`` convention of a batch wider
    than ``d``, the texts of more than ``d`` tokens (``n`` (K, B)) take those of their ``wide`` (K, B, d, d) Grams,
    padded with zeros below."""
    values = torch.stack(eigenvalues(list(main.unbind(0))))
    if wide is None:
        return values
    spread = F.pad(torch.stack(eigenvalues(list(wide.unbind(0)))), (values.shape[-1] - d, 0))
    return torch.where((n > d)[..., None], spread, values)


def entropies_of(main: torch.Tensor, wide: torch.Tensor | None, n: torch.Tensor, usable: torch.Tensor,
                 d: int) -> torch.Tensor:
    """(K, B, 3) float64 from stacked Grams (K, B, m, m), wide Grams (K, B, d, d) or None, token counts and usable
    flags (K, B), on their device (:func:`values_of`, then :func:`entropies`)."""
    return entropies(values_of(main, wide, n, d), n, usable, d)


def host_bytes(n_grams: int, batch: int, width: int, d: int, convention: str) -> int:
    """Bytes of ``n_grams`` (layers x token sets) float64 Grams of a batch of ``batch`` texts ``width`` tokens wide."""
    side = width if convention == "skean" or width <= d else d
    wide = d * d if convention == "skean" and width > d else 0
    return 8 * n_grams * batch * (side * side + wide)


class EntropyGrams:
    """Collects a batch's :class:`Grams` (module docstring): for the host (:meth:`result` hands them back with the
    batch's other sums, for :func:`entropies_of` there) or decomposed on the device, in runs of at most
    :data:`GRAM_BYTES` as they come, so that no more than that is held."""

    def __init__(self, convention: str, d: int, on_host: bool = False):
        if convention not in CONVENTIONS:
            raise ValueError(f"unknown entropy convention {convention!r}; use {' or '.join(CONVENTIONS)}")
        self.convention, self.d, self.on_host = convention, d, on_host
        self.grams: list[Grams] = []
        """Every add's Grams (their matrices dropped once decomposed on the device)."""
        self.values: list[torch.Tensor] = []
        """(B, m) eigenvalues of the adds decomposed so far (on the device)."""

    def add(self, hidden: torch.Tensor, mask: torch.Tensor) -> None:
        """Add ``hidden`` (B, T, d) over ``mask`` (B, T) bool: one layer and token set."""
        self.grams.append(gram_matrices(hidden, mask, self.convention))
        waiting = self.grams[len(self.values):]
        held = sum(g.main.numel() + (g.wide.numel() if g.wide is not None else 0) for g in waiting) * 8
        if not self.on_host and held > GRAM_BYTES:
            self._decompose()

    def _decompose(self) -> None:
        """Decompose the Grams added since the last call on their device, keeping their eigenvalues only."""
        first = len(self.values)
        waiting = self.grams[first:]
        if not waiting:
            return
        wide = torch.stack([g.wide for g in waiting]) if waiting[0].wide is not None else None
        values = values_of(torch.stack([g.main for g in waiting]), wide, torch.stack([g.n for g in waiting]), self.d)
        self.values.extend(values.unbind(0))
        self.grams[first:] = [Grams(g.main[:0], None, g.n, g.usable) for g in waiting]

    def result(self) -> dict[str, torch.Tensor]:
        """What to read back for the K adds: ``{"entropy": (K, B, 3)}`` decomposed on the device, or with
        ``on_host`` the stacked Grams ``{"grams": (K, B, m, m), "wide": (K, B, d, d) (skean, a batch wider than
        d), "grams_n": (K, B), "grams_usable": (K, B)}`` for :func:`entropies_of`."""
        if not self.on_host:
            return {"entropy": self.entropies()}
        out = {"grams": torch.stack([g.main for g in self.grams]), "grams_n": torch.stack([g.n for g in self.grams]),
               "grams_usable": torch.stack([g.usable for g in self.grams])}
        if self.grams[0].wide is not None:
            out["wide"] = torch.stack([g.wide for g in self.grams])
        return out

    def entropies(self) -> torch.Tensor:
        """(K, B, 3) float64 for the K adds, in order, decomposed on their device (:func:`entropies`)."""
        self._decompose()
        n, usable = torch.stack([g.n for g in self.grams]), torch.stack([g.usable for g in self.grams])
        return entropies(torch.stack(self.values), n, usable, self.d)


def from_host(arrays: dict, d: int) -> torch.Tensor:
    """(K, B, 3) float64 on the CPU from :meth:`EntropyGrams.result` read back to the host (numpy arrays): its
    ``entropy``, or the entropies of its Grams (:func:`entropies_of`)."""
    if "entropy" in arrays:
        return torch.from_numpy(arrays["entropy"])
    wide = torch.from_numpy(arrays["wide"]) if "wide" in arrays else None
    return entropies_of(torch.from_numpy(arrays["grams"]), wide, torch.from_numpy(arrays["grams_n"]),
                        torch.from_numpy(arrays["grams_usable"]), d)


def prompt_entropies(hidden: torch.Tensor, mask: torch.Tensor, convention: str = "raw") -> torch.Tensor:
    """``values = prompt_entropies(hidden, mask, "skean")``: (B, 3) float64 per text of ``hidden`` (B, T, d) over
    its ``mask`` (B, T) tokens: entropy, normalised entropy and effective rank (module docstring), every text's
    Gram spectrum taken batched; NaN for a text with fewer than 2 tokens (or, in the ``skean`` convention, a token
    equal to the text's mean)."""
    grams = EntropyGrams(convention, hidden.shape[-1])
    grams.add(hidden, mask)
    return grams.entropies()[0]


def prompt_entropy_sums(hidden: torch.Tensor, real: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``sums, n = prompt_entropy_sums(hidden, real)``: (3,) float64 sums over the batch's texts of 2 or more real
    tokens (``n`` of them) of :func:`prompt_entropies` in the raw convention; ``hidden`` (B, T, d), ``real``
    (B, T) bool."""
    values = prompt_entropies(hidden, real, "raw")
    used = ~values[:, 0].isnan()
    return torch.where(used[:, None], values, 0.0).sum(dim=0), int(used.sum())

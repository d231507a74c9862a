"""Host memory that one job's batches reuse, so large per-batch tensors do not page-fault in afresh each batch.

    scratch = Scratch()                        # one per extract call (or scoring run); freed with it
    logits = scratch.tensor("logits", (rows, vocab), torch.float32)   # a view of a buffer grown as needed
    states = scratch.tensor("kept", (L, B, T, d), hidden.dtype)

On a CPU, a tensor of more than a few MB comes from the C allocator as fresh pages that the kernel maps and zeroes
on first touch: the next-token logits of a batch (tokens x vocabulary, over 100 MB for SmolLM2's 49k vocabulary)
and the states kept for ``mean_no_massive`` cost hundreds of thousands of page faults per pass, a few percent of a
short-text forward pass. Handing each batch a view of the same buffer pays for the pages once. Off the CPU
(:func:`for_device` gives ``None``) the device's caching allocator already reuses its blocks.
"""

from __future__ import annotations

import math

import torch


class Scratch:
    """Named byte buffers, each grown to the largest request and reused; see the module docstring. A view taken
    from a name is valid until the next request for that name."""

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self._buffers: dict[str, torch.Tensor] = {}
        self._views: dict[str, tuple[tuple[int, ...], torch.dtype, torch.Tensor]] = {}  # name: the last view made

    def tensor(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """An uninitialised tensor of ``shape`` and ``dtype`` on the buffer ``name`` (its old contents, if any)."""
        shape = tuple(shape)
        last = self._views.get(name)
        if last is not None and last[0] == shape and last[1] == dtype:  # asked again per layer: the same view
            return last[2]
        nbytes = math.prod(shape) * dtype.itemsize
        buffer = self._buffers.get(name)
        if buffer is None or buffer.numel() < nbytes:
            self._buffers.pop(name, None)  # the old buffer goes before the new one is made: one of them at a time
            self._views.pop(name, None)
            buffer = self._buffers[name] = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        view = buffer[:nbytes].view(dtype).view(shape)
        self._views[name] = (shape, dtype, view)
        return view

    @property
    def nbytes(self) -> int:
        """Bytes held now."""
        return sum(b.numel() for b in self._buffers.values())


def for_device(device: torch.device) -> Scratch | None:
    """A :class:`Scratch` for work on ``device`` where reuse pays (the CPU), else ``None``."""
    return Scratch(device) if torch.device(device).type == "cpu" else None

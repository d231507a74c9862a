"""Counting host syncs on the CPU: ``syncs`` (a fixture in tests/engine/conftest.py) wraps every call that would
make the host wait for a GPU (``Tensor.cpu``, ``.item``, ``.tolist``, ``bool(t)``, ``int(t)``, ``float(t)``,
``nonzero``, a boolean-mask index, ``torch.cuda.synchronize``) and counts them in the main thread. ``.numpy()``
is not counted: it refuses a CUDA tensor, so it never waits on a GPU (``t.cpu().numpy()`` is one sync, the
``.cpu()``).

    n = syncs.run(lambda: atlas_pass(lm, texts))     # how many such calls the pass made
"""

import collections
import functools
import sys
import threading

import torch

METHODS = ("cpu", "item", "tolist", "__bool__", "__int__", "__float__", "nonzero")
BLACK_BOX = "massive.py"
"""Calls from inside this module are not counted: massive_mask's CPU path finds a rare undecided median with
``nonzero``, its CUDA path has no sync (tests/engine/atlas/test_atlas_syncs.py)."""


class Syncs:
    """Counts the wrapped calls while :attr:`on` (main thread, outside :data:`BLACK_BOX`)."""

    def __init__(self):
        self.calls: collections.Counter = collections.Counter()
        self.on = False

    def counting(self) -> bool:
        if not self.on or threading.current_thread() is not threading.main_thread():
            return False
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_filename.endswith(BLACK_BOX):
                return False
            frame = frame.f_back
        return True

    def wrap(self, name, fn, when=lambda *args: True):
        @functools.wraps(fn)
        def counted(*args, **kwargs):
            if self.on and when(*args) and self.counting():
                self.calls[name] += 1
            return fn(*args, **kwargs)
        return counted

    def run(self, what) -> int:
        self.calls.clear()
        self.on = True
        try:
            what()
        finally:
            self.on = False
        return sum(self.calls.values())


def bool_mask(_tensor, index, *_value) -> bool:
    indices = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool and i.dim() > 0 for i in indices)


def install(monkeypatch) -> Syncs:
    """Wrap the calls with a fresh :class:`Syncs` (undone by ``monkeypatch``)."""
    counter = Syncs()
    for name in METHODS:
        monkeypatch.setattr(torch.Tensor, name, counter.wrap(name, getattr(torch.Tensor, name)))
    for name in ("__getitem__", "__setitem__"):
        monkeypatch.setattr(torch.Tensor, name, counter.wrap("mask_index", getattr(torch.Tensor, name), bool_mask))
    monkeypatch.setattr(torch, "nonzero", counter.wrap("nonzero", torch.nonzero))
    monkeypatch.setattr(torch.cuda, "synchronize", counter.wrap("synchronize", torch.cuda.synchronize))
    return counter

"""Fixtures shared by the engine's tests."""

import pytest
import torch

import syncs as sync_counter


@pytest.fixture
def one_torch_thread(monkeypatch):
    """No progress bars and one torch thread inside the test (restored after)."""
    monkeypatch.setenv("LAYERSCOPE_PROGRESS", "0")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def syncs(monkeypatch):
    """A :class:`syncs.Syncs` counting the host syncs a call makes (tests/syncs.py)."""
    return sync_counter.install(monkeypatch)

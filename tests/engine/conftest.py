"""Fixtures shared by the engine's tests."""

import pytest
import torch


@pytest.fixture
def one_torch_thread(monkeypatch):
    """No progress bars and one torch thread inside the test (restored after)."""
    monkeypatch.setenv("LAYERSCOPE_PROGRESS", "0")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

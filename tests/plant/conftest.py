"""The plant tests run on every tiny architecture, and on a Gemma 3 whose blocks differ in kind (tests/planted.py),
on one torch thread (the models are tiny: a second thread only waits on the first, and slows every pass down by
an order of magnitude on a busy machine)."""

import pytest
import torch

import planted


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(params=planted.MODELS)
def lm(request):
    return planted.model(request.param)

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """Models of a few thousand weights: a second intra-op thread only adds synchronisation, and on a busy
    machine spinning (ten distillation steps of the end-to-end test: 0.3 s on one thread, 4 s on two)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

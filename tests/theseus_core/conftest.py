import pytest
import torch


@pytest.fixture
def threads():
    """Sets torch's intra-op threads for a test and puts them back."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)

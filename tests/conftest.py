import os

# The tests' models have a few thousand weights: a second intra-op thread only adds synchronisation, and on a busy
# machine spinning (a toy recipe run: 22 s on one thread, minutes on two while other jobs run). Set before torch is
# imported, so that the subprocesses the tests start (the CLI, reloads without theseus, torchrun) inherit it.
for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(variable, "1")

import torch  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# Models are built per example, so generation is slow next to hypothesis' defaults.
settings.register_profile(
    "default", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=300)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

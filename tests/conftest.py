import os

# The tests' models have a few thousand weights: a second intra-op thread only adds synchronisation, and on a busy
# machine spinning (a toy recipe run: 22 s on one thread, minutes on two while other jobs run). Set before torch is
# imported, so that the subprocesses the tests start (the CLI, reloads without theseus, torchrun) inherit it.
for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(variable, "1")

import torch  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# Hypothesis' profiles (default, thorough), loaded from HYPOTHESIS_PROFILE.
import tests.hypothesis_profiles  # noqa: E402, F401

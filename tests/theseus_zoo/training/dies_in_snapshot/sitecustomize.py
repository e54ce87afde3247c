"""On the PYTHONPATH of a torchrun test: with ``THESEUS_DIE_AT_SNAPSHOT=N`` in the environment, the worker of rank
1 kills itself with SIGKILL (kill -9: nothing runs after it) as its ``N``-th sharded snapshot begins
(`FullyShardedDataParallel.snapshot`), so that the run's last checkpoint is the one before, mid-stage."""

import os

if os.environ.get("THESEUS_DIE_AT_SNAPSHOT") and os.environ.get("RANK") == "1":
    import signal

    from theseus_zoo.training import sharding

    _snapshot, _calls = sharding.FullyShardedDataParallel.snapshot, [0]

    def _dying_snapshot(self, *args, **kwargs):
        _calls[0] += 1
        if _calls[0] == int(os.environ["THESEUS_DIE_AT_SNAPSHOT"]):
            os.kill(os.getpid(), signal.SIGKILL)
        return _snapshot(self, *args, **kwargs)

    sharding.FullyShardedDataParallel.snapshot = _dying_snapshot

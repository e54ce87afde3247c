"""Put on ``PYTHONPATH`` by ``test_multiprocess.py``: in a process whose ``RANK`` is not 0, every write under
``$THESEUS_READ_ONLY`` (a file opened for writing, a directory made, a rename, a removal, a truncation) raises
``PermissionError`` naming the rank and the path, so a rank other than 0 that writes there fails the run.

Python's audit hooks see these through ``open``, ``pathlib`` and ``os``; a C++ writer (``torch.save`` to a path)
is not seen, but every run file has a Python-written neighbour (``model/config.json`` beside ``model.pt``).
"""

import os
import sys

_ROOT = os.environ.get("THESEUS_READ_ONLY")
_WRITING_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_CHANGES = ("os.mkdir", "os.rename", "os.remove", "os.rmdir", "os.truncate", "os.link", "os.symlink", "shutil.rmtree")


def _inside(path: object) -> bool:
    if not isinstance(path, (str, bytes, os.PathLike)):
        return False  # a file descriptor
    absolute = os.path.abspath(os.fsdecode(path))
    return absolute == _ROOT or absolute.startswith(_ROOT + os.sep)


def _guard(event: str, args: tuple) -> None:
    if event == "open":
        path, mode, flags = args
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool((flags or 0) & _WRITING_FLAGS)
        paths = [path] if writing else []
    elif event in ("os.rename", "os.link", "os.symlink"):
        paths = list(args[:2])  # source and destination
    elif event in _CHANGES:
        paths = [args[0]]
    else:
        return
    for path in paths:
        if _inside(path):
            raise PermissionError(f"rank {os.environ['RANK']} wrote {os.fsdecode(path)} ({event}): only rank 0 may")


if _ROOT and os.environ.get("RANK", "0") != "0":
    _ROOT = os.path.abspath(_ROOT)
    sys.addaudithook(_guard)

"""A documentation page's script in a process of its own, forked from a server that has imported the third-party
libraries the pages import (torch with dynamo, which any optimizer imports, and transformers): a fresh interpreter
pays ~7 CPU-seconds of those imports per page before the page's first line runs.

Each page still runs in a process of its own, as a reader pasting it would, with the caller's environment as it is
when the page starts, this checkout first on its path, and its own working directory; its output (Python's and C's)
and its ``atexit`` handlers are as a script's. What differs from a fresh interpreter: those libraries are imported
already (none of theseus: the page imports this checkout's), and the process is a multiprocessing child. This module
imports nothing beyond the standard library, since the forked process imports it to find `run_script`.
"""

from __future__ import annotations

import atexit
import ctypes
import multiprocessing
import os
import runpy
import sys
from pathlib import Path

PRELOADED = ["torch", "torch._dynamo", "transformers"]
_context = multiprocessing.get_context("forkserver")


def run_script(script: str, cwd: str, stdout: str, stderr: str, pythonpath: str, environment: dict[str, str]) -> None:
    """In the forked process: ``script`` as ``__main__`` in ``cwd``, its output in the two files."""
    for descriptor, path in ((1, stdout), (2, stderr)):
        with open(path, "wb") as stream:
            os.dup2(stream.fileno(), descriptor)
    os.environ.clear()
    os.environ.update(environment)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, environment.get("PYTHONPATH")]))
    sys.path[:0] = [str(Path(script).parent), pythonpath]  # as ``python script`` with PYTHONPATH set
    os.chdir(cwd)
    sys.argv = [script]
    try:
        runpy.run_path(script, run_name="__main__")
    finally:  # the process ends in os._exit: what a script's exit does besides
        atexit._run_exitfuncs()
        sys.stdout.flush(), sys.stderr.flush()
        ctypes.CDLL(None).fflush(None)  # C's buffered output


def run_page(script: Path, cwd: Path, pythonpath: Path, timeout: float) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of ``script`` run by `run_script` in a forked process, in ``cwd``; its output
    is kept beside the script. Raises `TimeoutError` (with the output's tail) if it runs longer than ``timeout``
    seconds, and kills it then, or if this process is interrupted meanwhile."""
    stdout, stderr = script.with_suffix(".stdout"), script.with_suffix(".stderr")
    _context.set_forkserver_preload(PRELOADED)  # read when the server starts: the first page of this process
    arguments = (str(script), str(cwd), str(stdout), str(stderr), str(pythonpath), dict(os.environ))
    process = _context.Process(target=run_script, args=arguments)
    process.start()
    try:
        process.join(timeout)
    finally:  # past the timeout, or this process interrupted meanwhile
        timed_out = process.is_alive()
        if timed_out:
            process.kill()
            process.join()
    read = lambda path: path.read_text(errors="replace") if path.exists() else ""  # noqa: E731
    if timed_out:
        ended = f"{read(stdout)[-1500:]}\n{read(stderr)[-1500:]}"
        raise TimeoutError(f"{script} ran past {timeout:g} s and was killed; its output ended:\n{ended}")
    return process.exitcode, read(stdout), read(stderr)

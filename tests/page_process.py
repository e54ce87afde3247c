"""A documentation page's script in a process of its own, forked from a server that has imported what every page
imports (torch with dynamo, which any optimizer imports, transformers, theseus_core): a fresh interpreter pays
~7 CPU-seconds of those imports per page before the page's first line runs.

Each page still runs in a process of its own, as a reader pasting it would: registries, globals and the working
directory start as a fresh interpreter's after those imports (the server imports nothing of the tests'). This module
imports nothing beyond the standard library, since the forked process imports it to find `run_script`.
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import sys
from pathlib import Path

PRELOADED = ["torch", "torch._dynamo", "transformers", "theseus_core"]
_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(PRELOADED)


def run_script(script: str, cwd: str, stdout: str, stderr: str, pythonpath: str) -> None:
    """In the forked process: ``script`` as ``__main__`` in ``cwd``, its output (Python's and C's) in the files."""
    for descriptor, path in ((1, stdout), (2, stderr)):
        with open(path, "wb") as stream:
            os.dup2(stream.fileno(), descriptor)
    os.environ["PYTHONPATH"] = pythonpath  # for any process the page starts
    sys.path[:0] = [str(Path(script).parent), pythonpath]  # as ``python script`` with PYTHONPATH set
    os.chdir(cwd)
    sys.argv = [script]
    runpy.run_path(script, run_name="__main__")


def run_page(script: Path, cwd: Path, pythonpath: Path, timeout: float) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of ``script`` run by `run_script` in a forked process (killed after
    ``timeout`` seconds, exit code -9)."""
    stdout, stderr = cwd / "stdout.txt", cwd / "stderr.txt"
    arguments = (str(script), str(cwd), str(stdout), str(stderr), str(pythonpath))
    process = _context.Process(target=run_script, args=arguments)
    process.start()
    process.join(timeout)
    if process.is_alive():
        process.kill()
        process.join()
    read = lambda path: path.read_text(errors="replace") if path.exists() else ""  # noqa: E731
    return process.exitcode, read(stdout), read(stderr)

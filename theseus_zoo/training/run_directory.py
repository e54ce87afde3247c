"""A run's directory: its checkpoint's name, the lock that keeps a second writer out, the checks and repairs done
before a run writes there, and the finished predecessor another run may take from it (``--predecessor-from``).

`RunError` is the one error every bad input of a run raises (the cli prints it in one line); it lives here, where
most of them are found.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from ..recipes import Recipe, with_defaults
from .checkpoints import previous_of
from .ranks import disagreement
from .state import StageRecord, read_state

CHECKPOINT = "checkpoint.pt"


class RunError(ValueError):
    """Bad input for a run, found before any training; the message says what to do.

    In a multi-process run, ``on_every_rank`` marks an error every rank raises at once (`Session.together`): only
    rank 0's is printed (the others are ``quiet``), and the ranks leave together (`ranks.leave`)."""

    def __init__(self, message: str, *, on_every_rank: bool = False, quiet: bool = False) -> None:
        super().__init__(message)
        self.on_every_rank, self.quiet = on_every_rank, quiet


class RunLock:
    """``<out>/.lock`` names the process writing there: its pid and, where ``/proc`` tells it, its start time
    (`start_time`). A second writer is refused, naming the first; a lock whose process no longer runs is taken over,
    and so is one whose pid runs but started at another time (a process that reused the pid after a crash). A lock
    of a pid alone (written where ``/proc`` is absent, or by an older version) is held while that pid runs."""

    def __init__(self, out: Path) -> None:
        self.path = out / ".lock"
        started = start_time(os.getpid())  # read before the file exists: it is empty for as short a time as can be
        for _ in range(2):
            try:
                descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                owner = self.path.read_text().split()
                if _held(owner):
                    raise RunError(
                        f"{out} is being written by another theseus process (pid {owner[0]}); wait for it, or stop it"
                    ) from None
                self.path.unlink(missing_ok=True)  # stale: its process is gone, or its pid is another process's now
                continue
            with os.fdopen(descriptor, "w") as stream:
                stream.write(f"{os.getpid()}\n" if started is None else f"{os.getpid()} {started}\n")
            return
        raise RunError(f"cannot take the lock {self.path}")

    def release(self) -> None:
        if self.path.exists() and self.path.read_text().split()[:1] == [str(os.getpid())]:
            self.path.unlink()


def start_time(pid: int) -> str | None:
    """When process ``pid`` started, in clock ticks since boot (field 22 of ``/proc/<pid>/stat``): with the pid, what
    tells the process from a later one given the same pid. ``None`` where there is no ``/proc`` (macOS, Windows) or
    no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces and parentheses
    return fields[19] if len(fields) > 19 else None  # fields[0] is field 3 (the state)


def _held(owner: list[str]) -> bool:
    """Whether a lock holding ``owner`` (its words: pid, then start time if recorded) names another process that
    runs: its pid alive and, when both are known, started when the lock says."""
    if not owner or not owner[0].isdigit() or int(owner[0]) == os.getpid() or not _alive(int(owner[0])):
        return False
    if len(owner) < 2:  # a pid alone: alive is all there is to go on
        return True
    started = start_time(int(owner[0]))
    return started is None or started == owner[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_writable(out: Path) -> None:
    """Refuses an ``--out`` that is a file or lies where nothing can be written, before any work."""
    if out.exists() and not out.is_dir():
        raise RunError(f"--out {out} is a file; give a directory")
    existing = next((parent for parent in [out, *out.parents] if parent.exists()), Path("."))
    if not os.access(existing, os.W_OK | os.X_OK):
        raise RunError(f"--out {out}: cannot write in {existing}")


def repair_metrics(metrics: Path, length: int) -> None:
    """Cuts ``metrics.jsonl`` to what the checkpoint had logged (later lines come again), or, if the file is shorter
    than that (damaged), to its last complete line, never padding it; says so on stderr."""
    if not metrics.exists():
        print(f"theseus: warning: {metrics} is missing; the resumed run logs only what comes next", file=sys.stderr)
        return
    size = metrics.stat().st_size
    if size >= length:
        os.truncate(metrics, length)
        return
    data = metrics.read_bytes()
    keep = data.rfind(b"\n") + 1
    os.truncate(metrics, keep)
    print(
        f"theseus: warning: {metrics} is shorter than the checkpoint's record ({size} < {length} bytes): cut to its "
        f"last complete line; lines in between are lost",
        file=sys.stderr,
    )


def has_checkpoint(out: Path) -> bool:
    """Whether the run directory ``out`` holds a checkpoint: the last, or the previous one a resume falls back to."""
    checkpoint = out / CHECKPOINT
    return checkpoint.exists() or previous_of(checkpoint).exists()


FINGERPRINT = re.compile(r" \(sha256 [0-9a-f]{12}\)")
"""The data's fingerprint in an own-data recipe's description (`theseus_zoo.data.tables.fingerprint`)."""


def _compared(recorded: dict | None, recipe: Recipe) -> tuple[dict, dict]:
    """The recorded recipe (its fields it predates at their defaults, `with_defaults`) and ``recipe``'s, as compared:
    a run recorded before descriptions carried the data's fingerprint is compared without it (its data unverified)."""
    theirs, ours = with_defaults(recorded or {}), recipe.to_dict()
    description = str(theirs.get("description", ""))
    if "on the user's data" in description and not FINGERPRINT.search(description):
        ours["description"] = FINGERPRINT.sub("", str(ours.get("description", "")))
    return theirs, ours


def recipe_changes(recorded: dict | None, recipe: Recipe) -> str | None:
    """``None`` when the recipe a run recorded (`_compared`) is ``recipe``; else the fields that differ with both
    values (``"seed: 0 in the run, 4 given now"``)."""
    return disagreement(list(_compared(recorded, recipe)), ("in the run", "given now"))


def data_changed(recorded: dict | None, recipe: Recipe) -> bool:
    """Whether the recipe a run recorded differs from ``recipe`` in its description alone, where that description is
    what was read from the user's data (file, sha256, rows: `theseus_zoo.cli`): the same recipe on changed data."""
    theirs, ours = _compared(recorded, recipe)
    differing = {key for key in theirs.keys() | ours.keys() if theirs.get(key) != ours.get(key)}
    return differing == {"description"} and "on the user's data" in str(theirs.get("description"))


def finished_predecessor(run: Path, recipe: Recipe, compression_options: tuple[str, ...] = ()) -> StageRecord:
    """The fine-tuned predecessor phase of the run in ``run``, checked to be the one ``recipe`` would train: same
    family, predecessor phase, and options but for ``compression_options`` (those that only shape the successor,
    `Task.compression_options`)."""
    if not (run / CHECKPOINT).exists():
        raise RunError(f"--predecessor-from: no {CHECKPOINT} in {run}")
    state = read_state(run / CHECKPOINT)
    if "predecessor" not in state.done:
        raise RunError(f"--predecessor-from: the run in {run} has not finished fine-tuning its predecessor")
    theirs, ours = with_defaults(state.recipe), recipe.to_dict()
    for side in (theirs, ours):
        side["options"] = {k: v for k, v in side["options"].items() if k not in compression_options}
    keys = ("family", "options", "predecessor", "labelled_examples")  # what the predecessor phase trains on
    differing = [key for key in keys if theirs[key] != ours[key]]
    if differing:
        values = disagreement([{k: theirs[k] for k in differing}, {k: ours[k] for k in differing}], ("there", "here"))
        raise RunError(
            f"--predecessor-from: the run in {run} has another {', '.join(differing)} ({values}); its predecessor "
            f"is not the one this recipe trains"
        )
    return state.done["predecessor"]

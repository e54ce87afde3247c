"""The offline default text-classification data: Rotten Tomatoes review snippets as binary sentiment.

The 10,605 snippets of Pang & Lee (2005), the sentences behind SST, each with the mean
valence (−4 … +4) that human raters gave it in Hutto & Gilbert (ICWSM 2014). They come
with the sdist of ``vaderSentiment==3.3.2`` (MIT): fetch them once with
``python -m theseus_zoo.assets fetch rotten-tomatoes``.

Labels: valence > 0 is ``positive`` (1), < 0 is ``negative`` (0); the 37 snippets of
valence 0 are dropped, which leaves 10,568 (5,242 positive). The split is fixed by
``seed`` and independent of library versions: within each class the snippets are
ordered by ``sha256(f"{seed}:{id}")``; the first ``round(n · dev_fraction)`` go to
``validation``, the next ``round(n · test_fraction)`` to ``test`` and the rest to
``train`` (halves round up); each split is then ordered by the same key. With the
defaults (seed 0, 80/10/10): train 8,454, validation 1,057, test 1,057.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .assets import asset_path

if TYPE_CHECKING:
    import datasets

ASSET = "rotten-tomatoes"
FILENAME = "movieReviewSnippets_GroundTruth.txt"
LABEL_NAMES = ("negative", "positive")
SPLITS = ("train", "validation", "test")


@dataclass(frozen=True)
class Snippet:
    """One line of the ground-truth file: the snippet's id, its mean valence and its text."""

    id: int
    score: float
    text: str

    @property
    def label(self) -> int | None:
        """1 positive, 0 negative, ``None`` for a valence of exactly 0."""
        return None if self.score == 0 else int(self.score > 0)


def snippets_path() -> Path:
    """The cached ground-truth file; raises `theseus_zoo.assets.MissingAssetError` when it was not fetched."""
    return asset_path(ASSET) / FILENAME


def read_snippets(path: str | Path) -> list[Snippet]:
    """Parses a ground-truth file: UTF-8 lines of ``id<TAB>valence<TAB>text``.

    Raises:
        ValueError: a line is not of that form (the message names the line).
    """
    snippets = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t", 2)
        try:
            snippet = Snippet(int(fields[0]), float(fields[1]), fields[2].strip())
        except (IndexError, ValueError):
            raise ValueError(
                f"{path}, line {number}: expected 'id<TAB>valence<TAB>text', got {line[:60]!r}; "
                f"is this movieReviewSnippets_GroundTruth.txt?"
            ) from None
        if not math.isfinite(snippet.score) or not snippet.text:
            raise ValueError(f"{path}, line {number}: a snippet needs a finite valence and a text, got {line[:60]!r}")
        snippets.append(snippet)
    return snippets


def split_snippets(
    snippets: list[Snippet], *, seed: int = 0, dev_fraction: float = 0.1, test_fraction: float = 0.1
) -> dict[str, list[Snippet]]:
    """The labelled snippets (valence ≠ 0) split into ``train``, ``validation`` and ``test``, stratified by label,
    as the module docstring describes. Raises `ValueError` for fractions that leave no training data."""
    _check_fractions(dev_fraction, test_fraction)
    ids = [snippet.id for snippet in snippets]
    if len(set(ids)) != len(ids):
        raise ValueError("snippet ids must be unique: the split is keyed by them")

    def key(snippet: Snippet) -> str:
        return hashlib.sha256(f"{seed}:{snippet.id}".encode()).hexdigest()

    splits: dict[str, list[Snippet]] = {name: [] for name in SPLITS}
    for label in range(len(LABEL_NAMES)):
        members = sorted((snippet for snippet in snippets if snippet.label == label), key=key)
        num_dev, num_test = _round(len(members) * dev_fraction), _round(len(members) * test_fraction)
        splits["validation"] += members[:num_dev]
        splits["test"] += members[num_dev : num_dev + num_test]
        splits["train"] += members[num_dev + num_test :]
    return {name: sorted(members, key=key) for name, members in splits.items()}


def load_rotten_tomatoes(
    path: str | Path | None = None, *, seed: int = 0, dev_fraction: float = 0.1, test_fraction: float = 0.1
) -> datasets.DatasetDict:
    """The split as a `datasets.DatasetDict` (``train``, ``validation``, ``test``) with the columns ``text``,
    ``label`` (``ClassLabel``: negative, positive) and ``id`` (the snippet's id in the file).

    Args:
        path: a ground-truth file (default: the cached asset, `snippets_path`).
        seed, dev_fraction, test_fraction: the split (`split_snippets`; default: seed 0, 80/10/10).

    Raises:
        theseus_zoo.assets.MissingAssetError: ``path`` is None and the asset was not fetched.
        ValueError: the file or the fractions are wrong (before any dataset is built).
    """
    try:
        import datasets
    except ImportError as error:  # an optional dependency
        raise ImportError("the Rotten Tomatoes dataset needs the datasets library: pip install datasets") from error
    _check_fractions(dev_fraction, test_fraction)
    path = snippets_path() if path is None else Path(path)
    if not path.is_file():
        raise ValueError(
            f"no Rotten Tomatoes ground-truth file {path}; give an existing file, or none for the cached asset "
            f"(python -m theseus_zoo.assets fetch {ASSET})"
        )
    splits = split_snippets(read_snippets(path), seed=seed, dev_fraction=dev_fraction, test_fraction=test_fraction)
    features = datasets.Features(
        {
            "text": datasets.Value("string"),
            "label": datasets.ClassLabel(names=list(LABEL_NAMES)),
            "id": datasets.Value("int32"),
        }
    )
    return datasets.DatasetDict(
        {
            name: datasets.Dataset.from_dict(
                {
                    "text": [snippet.text for snippet in members],
                    "label": [snippet.label for snippet in members],
                    "id": [snippet.id for snippet in members],
                },
                features=features,
            )
            for name, members in splits.items()
        }
    )


def _check_fractions(dev_fraction: float, test_fraction: float) -> None:
    if not (dev_fraction >= 0 and test_fraction >= 0 and dev_fraction + test_fraction < 1):
        raise ValueError(
            f"dev_fraction and test_fraction must be ≥ 0 with a sum < 1, got {dev_fraction}, {test_fraction}"
        )


def _round(value: float) -> int:
    """Rounds halves up (Python's `round` rounds them to even)."""
    return math.floor(value + 0.5)

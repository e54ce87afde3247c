"""The offline default text data: Rotten Tomatoes review snippets, as binary, five-class or graded sentiment.

The 10,605 snippets of Pang & Lee (2005), the sentences behind SST, each with the mean
valence (−4 … +4) that human raters gave it in Hutto & Gilbert (ICWSM 2014). They come
with the sdist of ``vaderSentiment==3.3.2`` (MIT): fetch them once with
``theseus fetch rotten-tomatoes``.

Labels (``labels=``):

- ``"binary"``: valence > 0 is ``positive`` (1), < 0 is ``negative`` (0); the 37 snippets of
  valence 0 are dropped, which leaves 10,568 (5,242 positive).
- ``"five"``: the valence quintile, 0 (most negative) … 4 (most positive), with boundaries
  taken over all 10,605 snippets (`quintile_boundaries`), like SST-5's five grades.
- ``"regression"``: the valence itself, a float (scored like STS-B: mean of Pearson and Spearman).

The split (`theseus_zoo.data.splits.stratified_split`) is fixed by ``seed`` and independent of
library versions, stratified by class (by quintile for regression). With the defaults (binary,
seed 0, 80/10/10): train 8,454, validation 1,057, test 1,057.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import splits
from .assets import asset_path
from .splits import check_fractions, stratified_split

if TYPE_CHECKING:
    import datasets

ASSET = "rotten-tomatoes"
FILENAME = "movieReviewSnippets_GroundTruth.txt"
LABEL_NAMES = ("negative", "positive")
FIVE_LABEL_NAMES = ("very negative", "negative", "neutral", "positive", "very positive")
LABEL_KINDS = ("binary", "five", "regression")
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
    """The cached ground-truth file; raises `theseus_zoo.data.assets.MissingAssetError` when it was not fetched."""
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


def quintile_boundaries(snippets: Sequence[Snippet]) -> list[float]:
    """The four valences that cut ``snippets`` into five classes of (as near as ties allow) equal size: the
    20th, 40th, 60th and 80th percentiles (the lower of two neighbours)."""
    if not snippets:
        raise ValueError("no snippets: quintiles need at least one valence")
    return splits.quintile_boundaries([snippet.score for snippet in snippets])


def label_of(snippet: Snippet, labels: str, boundaries: Sequence[float]) -> int | float | None:
    """The snippet's label of kind ``labels`` (see the module doc); ``None`` when it has none (binary, valence 0)."""
    if labels == "binary":
        return snippet.label
    if labels == "five":
        return bisect.bisect_right(boundaries, snippet.score)
    return snippet.score


def split_snippets(
    snippets: list[Snippet],
    *,
    seed: int = 0,
    dev_fraction: float = 0.1,
    test_fraction: float = 0.1,
    labels: str = "binary",
) -> dict[str, list[Snippet]]:
    """The labelled snippets split into ``train``, ``validation`` and ``test``, stratified by label (by valence
    quintile for ``labels="regression"``), as the module docstring describes. Raises `ValueError` for fractions
    that leave no training data or an unknown kind of labels."""
    _check_labels(labels)
    check_fractions(dev_fraction, test_fraction)
    boundaries = quintile_boundaries(snippets)
    kept = [snippet for snippet in snippets if label_of(snippet, labels, boundaries) is not None]
    strata = "binary" if labels == "binary" else "five"  # regression is stratified by valence quintile
    return stratified_split(
        kept,
        identity=lambda snippet: snippet.id,
        stratum=lambda snippet: label_of(snippet, strata, boundaries),
        seed=seed,
        dev_fraction=dev_fraction,
        test_fraction=test_fraction,
    )


def load_rotten_tomatoes(
    path: str | Path | None = None,
    *,
    seed: int = 0,
    dev_fraction: float = 0.1,
    test_fraction: float = 0.1,
    labels: str = "binary",
) -> datasets.DatasetDict:
    """The split as a `datasets.DatasetDict` (``train``, ``validation``, ``test``) with the columns ``text``,
    ``label`` (``ClassLabel`` negative, positive for ``"binary"``; five grades for ``"five"``; the valence, a
    float, for ``"regression"``) and ``id`` (the snippet's id in the file).

    Args:
        path: a ground-truth file (default: the cached asset, `snippets_path`).
        seed, dev_fraction, test_fraction: the split (`split_snippets`; default: seed 0, 80/10/10).
        labels: ``"binary"``, ``"five"`` or ``"regression"`` (the module doc). (default: ``"binary"``)

    Raises:
        theseus_zoo.data.assets.MissingAssetError: ``path`` is None and the asset was not fetched.
        ValueError: the file or the fractions are wrong (before any dataset is built).
    """
    try:
        import datasets
    except ImportError as error:  # an optional dependency
        raise ImportError("the Rotten Tomatoes dataset needs the datasets library: pip install datasets") from error
    check_fractions(dev_fraction, test_fraction)
    _check_labels(labels)
    path = snippets_path() if path is None else Path(path)
    if not path.is_file():
        raise ValueError(
            f"no Rotten Tomatoes ground-truth file {path}; give an existing file, or none for the cached asset "
            f"(theseus fetch {ASSET})"
        )
    snippets = read_snippets(path)
    boundaries = quintile_boundaries(snippets)
    splits = split_snippets(snippets, seed=seed, dev_fraction=dev_fraction, test_fraction=test_fraction, labels=labels)
    label_feature = {
        "binary": datasets.ClassLabel(names=list(LABEL_NAMES)),
        "five": datasets.ClassLabel(names=list(FIVE_LABEL_NAMES)),
        "regression": datasets.Value("float32"),
    }[labels]
    features = datasets.Features(
        {"text": datasets.Value("string"), "label": label_feature, "id": datasets.Value("int32")}
    )
    return datasets.DatasetDict(
        {
            name: datasets.Dataset.from_dict(
                {
                    "text": [snippet.text for snippet in members],
                    "label": [label_of(snippet, labels, boundaries) for snippet in members],
                    "id": [snippet.id for snippet in members],
                },
                features=features,
            )
            for name, members in splits.items()
        }
    )


def _check_labels(labels: str) -> None:
    if labels not in LABEL_KINDS:
        raise ValueError(f"labels must be one of {', '.join(LABEL_KINDS)}, got {labels!r}")

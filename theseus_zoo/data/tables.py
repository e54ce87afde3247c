"""A user's own text data: ``.csv``, ``.tsv`` or ``.jsonl`` files, or a `datasets` ``save_to_disk`` folder.

Each row holds a text (``text_column``), optionally a second text (``text_pair_column``: sentence pairs)
and a label (``label_column``): integer or string classes, or floats for regression (a label column whose
values are all integers, or all strings, is a classification; one with a non-integer number is a
regression). A ``split`` column (``train``, ``dev``, ``test``; ``validation`` is taken for ``dev``) decides
the split when present; otherwise a fixed split stratified by class (by label quintile for regression) from
``seed`` (`theseus_zoo.data.splits`).

Every problem with a file ends in one `ValueError` that names the file, and the row where there is one:
a missing column, an empty text, a missing or non-finite label, an unreadable row, a single class,
an empty split.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from theseus_zoo._checks import is_int

from .splits import check_fractions, quintile_boundaries, stratified_split

if TYPE_CHECKING:
    import datasets

FORMATS = (".csv", ".tsv", ".jsonl")
SPLIT_NAMES = {"train": "train", "dev": "validation", "validation": "validation", "test": "test"}


@dataclass(frozen=True)
class Table:
    """A loaded table: the splits (columns ``text``, maybe ``text_pair``, ``label``), and the class names
    (``None`` for a regression)."""

    splits: datasets.DatasetDict
    label_names: tuple[str, ...] | None

    @property
    def num_labels(self) -> int:
        return 1 if self.label_names is None else len(self.label_names)


def _rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(row number as a person counts it, row)`` pairs: the line of a JSON line, the line of a CSV row."""
    if path.is_dir():
        import datasets

        try:
            loaded = datasets.load_from_disk(str(path))
        except (FileNotFoundError, ValueError) as error:
            raise ValueError(f"{path}: not a datasets save_to_disk folder ({error})") from None
        parts = loaded.items() if isinstance(loaded, datasets.DatasetDict) else [(None, loaded)]
        rows, number = [], 0
        for split, part in parts:
            for row in part:
                number += 1
                rows.append((number, {**row, "split": split} if split is not None and "split" not in row else row))
        return rows
    if path.suffix not in FORMATS:
        raise ValueError(f"{path}: give a {', '.join(FORMATS)} file or a datasets save_to_disk folder")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot read it as UTF-8 text ({error})") from None
    if path.suffix == ".jsonl":
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}, line {number}: not a JSON object ({error.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}, line {number}: not a JSON object")
            rows.append((number, row))
        return rows
    reader = csv.reader(text.splitlines(), delimiter="\t" if path.suffix == ".tsv" else ",")
    try:
        header = next(reader)
    except StopIteration:
        raise ValueError(f"{path}: the file is empty") from None
    rows = []
    for record in reader:
        number = reader.line_num
        if not record:
            continue
        if len(record) != len(header):
            raise ValueError(f"{path}, line {number}: {len(record)} fields where the header has {len(header)}")
        rows.append((number, dict(zip(header, record, strict=True))))
    return rows


def _label_kind(values: list[Any]) -> str:
    """``"int"``, ``"float"`` or ``"str"`` for the whole label column (CSV cells are strings first)."""

    def parses(cast: type, value: Any) -> bool:
        try:
            return not isinstance(value, bool) and math.isfinite(cast(value))
        except (TypeError, ValueError):
            return False

    if all(is_int(v) or (isinstance(v, str) and parses(int, v)) for v in values):
        return "int"
    if all(
        (isinstance(v, (int, float)) and not isinstance(v, bool)) or (isinstance(v, str) and parses(float, v))
        for v in values
    ):
        return "float" if any(float(v) != int(float(v)) for v in values) else "int"
    return "str"


def load_table(
    path: str | Path,
    *,
    text_column: str = "text",
    text_pair_column: str | None = None,
    label_column: str = "label",
    seed: int = 0,
    dev_fraction: float = 0.1,
    test_fraction: float = 0.1,
) -> Table:
    """Reads and checks ``path`` (module doc) and splits it.

    Raises:
        ValueError: anything wrong with the file, naming it and the row.
    """
    import datasets

    check_fractions(dev_fraction, test_fraction)
    path = Path(path)
    if not path.exists():
        raise ValueError(f"no file or folder {path}")
    rows = _rows(path)
    if not rows:
        raise ValueError(f"{path}: no rows")
    columns = [text_column, *([text_pair_column] if text_pair_column else []), label_column]
    for number, row in rows:
        missing = [column for column in columns if column not in row]
        if missing:
            raise ValueError(f"{path}, row {number}: no column {missing}; it has {sorted(row)}")
        for column in columns[:-1]:
            if not isinstance(row[column], str) or not row[column].strip():
                raise ValueError(f"{path}, row {number}: the {column!r} text is empty or not a string")
        if row[label_column] is None or row[label_column] == "":
            raise ValueError(f"{path}, row {number}: no label in {label_column!r}")
        if isinstance(row[label_column], float) and not math.isfinite(row[label_column]):
            raise ValueError(f"{path}, row {number}: the label {row[label_column]!r} is not a finite number")
    kind = _label_kind([row[label_column] for _, row in rows])
    if kind == "float":
        labels = [float(row[label_column]) for _, row in rows]
        label_names = None
        boundaries = quintile_boundaries(labels)
        strata = [sum(label > boundary for boundary in boundaries) for label in labels]
    else:
        values = [int(row[label_column]) if kind == "int" else row[label_column] for _, row in rows]
        classes = sorted(set(values))
        if len(classes) < 2:
            raise ValueError(f"{path}: every row has the label {classes[0]!r}; a classifier needs two classes or more")
        index = {value: position for position, value in enumerate(classes)}
        labels = [index[value] for value in values]
        label_names = tuple(str(value) for value in classes)
        strata = labels
    examples = [
        {
            "id": number,
            "text": row[text_column],
            **({"text_pair": row[text_pair_column]} if text_pair_column else {}),
            "label": label,
            "stratum": stratum,
            "split": row.get("split"),
        }
        for (number, row), label, stratum in zip(rows, labels, strata, strict=True)
    ]
    if any(example["split"] is not None for example in examples):
        splits: dict[str, list[dict[str, Any]]] = {"train": [], "validation": [], "test": []}
        for example in examples:
            name = SPLIT_NAMES.get(str(example["split"]).strip().lower())
            if name is None:
                raise ValueError(f"{path}, row {example['id']}: split {example['split']!r} is none of train, dev, test")
            splits[name].append(example)
    else:
        splits = stratified_split(
            examples,
            identity=lambda example: example["id"],
            stratum=lambda example: example["stratum"],
            seed=seed,
            dev_fraction=dev_fraction,
            test_fraction=test_fraction,
        )
    for name in ("train", "validation", "test"):
        if not splits[name]:
            raise ValueError(f"{path}: the {name} split is empty; give more rows, or a split column with every split")
    label_feature = datasets.Value("float32") if label_names is None else datasets.ClassLabel(names=list(label_names))
    features = datasets.Features(
        {
            "text": datasets.Value("string"),
            **({"text_pair": datasets.Value("string")} if text_pair_column else {}),
            "label": label_feature,
        }
    )
    kept = [column for column in features]
    return Table(
        datasets.DatasetDict(
            {
                name: datasets.Dataset.from_dict(
                    {column: [example[column] for example in members] for column in kept}, features=features
                )
                for name, members in splits.items()
            }
        ),
        label_names,
    )

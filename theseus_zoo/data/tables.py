"""A user's own text data: ``.csv``, ``.tsv`` or ``.jsonl`` files (UTF-8, a byte-order mark is read past), or a
`datasets` ``save_to_disk`` folder (a ``ClassLabel`` column gives its class names, and its -1, no label, is a
missing label).

Each row holds a text (``text_column``), optionally a second text (``text_pair_column``: sentence pairs) and a
label (``label_column``). ``labels`` says what the labels are: ``"classes"`` (each distinct label is a class,
named by the label: ``negative``, ``positive``, or ``0``, ``1``) or ``"regression"`` (numbers to predict). Left
out (``None``) it is inferred only when the column leaves no doubt, and `Table.inference` says what was inferred:

- every label a class name (not a number): classes;
- every label an integer, at most `MAX_INFERRED_CLASSES` different ones: classes;
- numbers, not all integers, with more than half of them not integers or more than `MAX_INFERRED_CLASSES`
  different values: regression.

Anything else (integers of many values; integers with a few other numbers, as ``0.5`` in a 0/1 column) is refused:
set ``labels``. A label column that mixes numbers and class names is refused either way.

A missing label is an empty cell, ``NaN``, ``nan``, ``NA``, ``N/A``, ``null`` (any case) or a JSON ``null`` /
``NaN``: rows with one are refused, named in one line (``missing="refuse"``), or dropped and counted in
`Table.dropped` (``missing="drop"``). A ``split`` column (``train``, ``dev``, ``test``; ``validation`` is taken for
``dev``) decides the split when present; otherwise a fixed split stratified by class (by label quintile for
regression) from ``seed`` (`theseus_zoo.data.splits`).

Every problem with a file ends in one `ValueError` that names the file, and the rows where there are some: a missing
column, an empty text, missing, non-finite or mixed labels, a task kind that cannot be inferred, an unreadable row,
a single class, an empty split.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .splits import check_fractions, quintile_boundaries, stratified_split

if TYPE_CHECKING:
    import datasets

FORMATS = (".csv", ".tsv", ".jsonl")
SPLIT_NAMES = {"train": "train", "dev": "validation", "validation": "validation", "test": "test"}
KINDS = ("classes", "regression")
MISSING = ("", "nan", "na", "n/a", "null")
"""Cells that are a missing label (stripped, any case), as spreadsheets and pandas write them."""
NO_KEY = type("NoKey", (), {"__repr__": lambda self: "no key"})()
"""The label of a JSON line that leaves the label's key out: a missing label, named as such."""
MAX_INFERRED_CLASSES = 20
"""The most different integer labels that are inferred to be classes (more: set ``labels``)."""
RARE_EXAMPLES, RARE_FRACTION = 5, 0.01
"""A class with fewer examples than this, or under this fraction of the rows, gets a warning (`Table.warnings`): a
stray label (one ``0.5`` among integers) makes a class a classifier cannot learn."""


@dataclass(frozen=True)
class Table:
    """A loaded table: the splits (columns ``text``, maybe ``text_pair``, ``label``), the class names (``None`` for
    a regression), what was inferred about the labels (``None`` when ``labels`` was given), the row numbers dropped
    for a missing label (``missing="drop"``), a description of the file for a report, and warnings a run prints and
    puts in its report (a class with few examples)."""

    splits: datasets.DatasetDict
    label_names: tuple[str, ...] | None
    inference: str | None = None
    dropped: tuple[int, ...] = ()
    description: str = ""
    warnings: tuple[str, ...] = ()

    @property
    def num_labels(self) -> int:
        return 1 if self.label_names is None else len(self.label_names)

    @property
    def kind(self) -> str:
        """``"classes"`` or ``"regression"``."""
        return "regression" if self.label_names is None else "classes"


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
            named = {c: f for c, f in part.features.items() if isinstance(f, datasets.ClassLabel)}
            for row in part:
                number += 1
                for column, feature in named.items():  # class names, not ids; -1 (no label) is a missing label
                    row[column] = feature.int2str(row[column]) if row[column] is not None and row[column] >= 0 else None
                rows.append((number, {**row, "split": split} if split is not None and "split" not in row else row))
        return rows
    if path.suffix not in FORMATS:
        raise ValueError(f"{path}: give a {', '.join(FORMATS)} file or a datasets save_to_disk folder")
    try:
        text = path.read_text(encoding="utf-8-sig")  # Excel's "CSV UTF-8" starts with a byte-order mark
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot read it as UTF-8 text ({error})") from None
    if path.suffix == ".jsonl":
        rows = []
        # lines end at "\n" alone (JSON Lines): a JSON string may hold U+2028 or a form feed raw, which splitlines cuts
        for number, line in enumerate(text.split("\n"), start=1):
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
    # read as a file opened with newline="": a quoted cell keeps its line breaks, and only "\n", "\r" and "\r\n" end
    # a row (splitlines also cut rows at U+2028 or a form feed in a text, and joined a quoted cell's lines)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t" if path.suffix == ".tsv" else ",")
    rows: list[tuple[int, dict[str, Any]]] = []
    try:
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path}: the file is empty")
        repeated = sorted({name for name in header if header.count(name) > 1})
        if repeated:  # a row's dict would keep the last column of a name, silently
            raise ValueError(f"{path}: the header names the column {', '.join(map(repr, repeated))} twice; rename one")
        for record in reader:
            number = reader.line_num
            if not record:
                continue
            if len(record) != len(header):
                raise ValueError(f"{path}, line {number}: {len(record)} fields where the header has {len(header)}")
            rows.append((number, dict(zip(header, record, strict=True))))
    except csv.Error as error:  # a cell over the csv module's field limit (131,072 characters), say
        raise ValueError(f"{path}, line {reader.line_num}: not a row of {path.suffix} ({error})") from None
    return rows


def _is_missing(value: Any) -> bool:
    if value is None or value is NO_KEY:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    return isinstance(value, str) and value.strip().lower() in MISSING


def _number(value: Any) -> float | None:
    """The label as a number (CSV cells are strings first), or ``None`` for a class name."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _rows_named(cells: list[tuple[int, Any]], limit: int = 10) -> str:
    """``"rows 4 ('NaN'), 17 ('')"``: the first ``limit`` of ``(row, cell)`` pairs, and how many more."""
    shown = ", ".join(f"{number} ({_cell(value)})" for number, value in cells[:limit])
    more = f" and {len(cells) - limit} more" if len(cells) > limit else ""
    return f"row{'s' if len(cells) > 1 else ''} {shown}{more}"


def _cell(value: Any) -> str:
    """A label as the file wrote it: ``'NaN'`` for a CSV cell, ``null`` / ``NaN`` / ``0.5`` for JSON."""
    if value is None:
        return "null"
    if value is NO_KEY:
        return "no key"
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return repr(value)


def _label_kind(
    path: Path, column: str, cells: list[tuple[int, Any]], labels: str | None
) -> tuple[str, list[float] | None, str | None]:
    """``(kind, numbers, inference)``: ``"classes"`` or ``"regression"``; each cell as a number when every cell is
    one (else ``None``); what was inferred, when ``labels`` is ``None``. Raises `ValueError` for a cell that is
    neither a class name nor a number, non-finite numbers, numbers mixed with class names, and a kind that cannot
    be inferred."""
    odd = [(number, value) for number, value in cells if isinstance(value, (list, dict))]
    if odd:
        raise ValueError(
            f"{path}: labels in {column!r} must be class names or numbers, not lists or objects: {_rows_named(odd)}"
        )
    numbers = [_number(value) for _, value in cells]
    numeric = [(number, value) for (number, value), x in zip(cells, numbers, strict=True) if x is not None]
    named = [(number, value) for (number, value), x in zip(cells, numbers, strict=True) if x is None]
    if numeric and named:
        fewer, more = (numeric, named) if len(numeric) <= len(named) else (named, numeric)
        what = ("number", "class name") if fewer is numeric else ("class name", "number")
        raise ValueError(
            f"{path}: the labels in {column!r} mix numbers and class names: {_count(len(fewer), what[0])} among "
            f"{_count(len(more), what[1])} ({_rows_named(fewer)}); make every label a class name, or every label a "
            f"number"
        )
    infinite = [
        (number, value)
        for (number, value), x in zip(cells, numbers, strict=True)
        if x is not None and not math.isfinite(x)
    ]
    if infinite:
        raise ValueError(f"{path}: labels in {column!r} that are not finite numbers: {_rows_named(infinite)}")
    if named:
        if labels == "regression":
            raise ValueError(
                f"{path}: labels='regression' needs numbers, but {column!r} holds class names "
                f"({_rows_named(named, 3)}); set labels to 'classes'"
            )
        classes = sorted({str(value).strip() for _, value in named})
        inference = None if labels else f"classes (every label is a class name: {_listed(classes)})"
        return "classes", None, inference
    values = [x for x in numbers if x is not None]
    if labels is not None:
        return labels, values, None
    distinct = sorted(set(values))
    fractional = [(number, value) for (number, value), x in zip(cells, values, strict=True) if x != int(x)]
    if not fractional:
        if len(distinct) <= MAX_INFERRED_CLASSES:
            names = [_class_name(x) for x in distinct]
            return (
                "classes",
                values,
                (
                    f"classes (every label is an integer, {len(distinct)} different: {_listed(names)}; set labels to "
                    f"'regression' to predict them as numbers)"
                ),
            )
        raise ValueError(
            f"{path}: the labels in {column!r} are {len(distinct)} different integers: classes, or numbers to "
            f"predict? Set the option labels to 'classes' or 'regression'"
        )
    if 2 * len(fractional) > len(values) or len(distinct) > MAX_INFERRED_CLASSES:
        return (
            "regression",
            values,
            (
                f"regression (the labels are numbers, {len(distinct)} different, from {min(values):g} to "
                f"{max(values):g}; set labels to 'classes' to make each value a class)"
            ),
        )
    raise ValueError(
        f"{path}: the labels in {column!r} are integers but for {len(fractional)} "
        f"({_rows_named(fractional)}): classes, or numbers to predict? Fix those rows, or set the option labels to "
        f"'classes' or 'regression'"
    )


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _class_name(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def _listed(names: list[str], limit: int = 10) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def fingerprint(path: Path) -> str:
    """The sha256 of a file's bytes, or of a folder's files (their paths relative to it, then their bytes, in path
    order): what a resumed run compares, through the description, to tell that its data changed."""
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(inner for inner in path.rglob("*") if inner.is_file())
    for file in files:
        if file != path:
            digest.update(file.relative_to(path).as_posix().encode() + b"\0")
        with file.open("rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def load_table(
    path: str | Path,
    *,
    text_column: str = "text",
    text_pair_column: str | None = None,
    label_column: str = "label",
    labels: str | None = None,
    missing: str = "refuse",
    seed: int = 0,
    dev_fraction: float = 0.1,
    test_fraction: float = 0.1,
) -> Table:
    """Reads and checks ``path`` (module doc) and splits it.

    Args:
        labels: ``"classes"``, ``"regression"``, or ``None`` to infer it (module doc). (default: ``None``)
        missing: Rows with a missing label: ``"refuse"`` them (the error names them) or ``"drop"`` them (counted in
            `Table.dropped`). (default: ``"refuse"``)

    Raises:
        ValueError: anything wrong with the file, naming it and the rows.
    """
    import datasets

    if labels is not None and labels not in KINDS:
        raise ValueError(f"labels must be one of {', '.join(KINDS)} (or None to infer it), got {labels!r}")
    if missing not in ("refuse", "drop"):
        raise ValueError(f"missing must be 'refuse' or 'drop', got {missing!r}")
    check_fractions(dev_fraction, test_fraction)
    path = Path(path)
    if not path.exists():
        raise ValueError(f"no file or folder {path}")
    rows = _rows(path)
    if not rows:
        raise ValueError(f"{path}: no rows")
    columns = [text_column, *([text_pair_column] if text_pair_column else []), label_column]
    if any(label_column in row for _, row in rows):  # a JSON line without the label key has a missing label
        rows = [(number, row if label_column in row else {**row, label_column: NO_KEY}) for number, row in rows]
    for number, row in rows:
        missing_columns = [column for column in columns if column not in row]
        if missing_columns:
            raise ValueError(f"{path}, row {number}: no column {missing_columns}; it has {sorted(row)}")
        for column in columns[:-1]:
            if not isinstance(row[column], str) or not row[column].strip():
                raise ValueError(f"{path}, row {number}: the {column!r} text is empty or not a string")
    unlabelled = [(number, row[label_column]) for number, row in rows if _is_missing(row[label_column])]
    if unlabelled and missing == "refuse":
        raise ValueError(
            f"{path}: {_count(len(unlabelled), 'row')} with no label in {label_column!r} "
            f"({_rows_named(unlabelled)}): fill them in, or set the option missing_labels to 'drop' to train "
            f"without them"
        )
    dropped = tuple(number for number, _ in unlabelled)
    rows = [(number, row) for number, row in rows if not _is_missing(row[label_column])]
    if not rows:
        raise ValueError(f"{path}: no row has a label in {label_column!r}")
    kind, numbers, inference = _label_kind(path, label_column, [(n, row[label_column]) for n, row in rows], labels)
    warnings: tuple[str, ...] = ()
    if kind == "regression":
        values = [float(x) for x in numbers or ()]
        label_names = None
        boundaries = quintile_boundaries(values)
        strata = [sum(value > boundary for boundary in boundaries) for value in values]
        labelled: list[Any] = values
    else:
        if numbers is None:
            names = [str(row[label_column]).strip() for _, row in rows]
            classes = sorted(set(names))
        else:
            names = [_class_name(x) for x in numbers]
            classes = [_class_name(x) for x in sorted(set(numbers))]  # in numeric order: 2 before 10
        if len(classes) < 2:
            raise ValueError(f"{path}: every row has the label {classes[0]!r}; a classifier needs two classes or more")
        index = {name: position for position, name in enumerate(classes)}
        labelled = [index[name] for name in names]
        label_names = tuple(classes)
        strata = labelled
        warnings = _rare_classes(
            path, label_column, [(number, name) for (number, _), name in zip(rows, names, strict=True)]
        )
    examples = [
        {
            "id": number,
            "text": row[text_column],
            **({"text_pair": row[text_pair_column]} if text_pair_column else {}),
            "label": label,
            "stratum": stratum,
            "split": row.get("split"),
        }
        for (number, row), label, stratum in zip(rows, labelled, strata, strict=True)
    ]
    from_column = any(example["split"] is not None for example in examples)
    if from_column:
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
    sizes = " / ".join(f"{len(splits[name]):,}" for name in ("train", "validation", "test"))
    if from_column:
        split = f"split by its split column: {sizes} rows train / dev / test"
    else:
        by = "class" if label_names is not None else "label quintile"
        split = (
            f"split {1 - dev_fraction - test_fraction:.0%} / {dev_fraction:.0%} / {test_fraction:.0%} stratified by "
            f"{by} (seed {seed}): {sizes} rows train / dev / test"
        )
    texts = f"text column {text_column!r}" + (f", second text {text_pair_column!r}" if text_pair_column else "")
    if label_names is None:
        task = f"regression on {label_column!r}"
    else:
        task = f"{len(label_names)} classes in {label_column!r} ({_listed(list(label_names))})"
    if inference is not None:
        task += ", inferred from the labels (the option labels sets it)"
    dropped_note = f"; {_count(len(dropped), 'row')} without a label dropped" if dropped else ""
    description = f"{path.name} (sha256 {fingerprint(path)[:12]}): {len(rows):,} rows, {texts}, {task}; {split}"
    description += dropped_note
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
        inference=inference,
        dropped=dropped,
        description=description,
        warnings=warnings,
    )


def _rare_classes(path: Path, column: str, named: list[tuple[int, str]]) -> tuple[str, ...]:
    """One warning line for the classes with fewer than `RARE_EXAMPLES` examples or under `RARE_FRACTION` of the rows
    (naming their rows when there are few), or none."""
    counts: dict[str, list[int]] = {}
    for number, name in named:
        counts.setdefault(name, []).append(number)
    rare = [(name, rows) for name, rows in counts.items() if len(rows) < max(RARE_EXAMPLES, RARE_FRACTION * len(named))]
    if not rare:
        return ()
    shown = []
    for name, rows in sorted(rare, key=lambda item: len(item[1]))[:5]:
        where = f" ({_rows_named([(row, name) for row in rows], 3)})" if len(rows) <= 3 else ""
        shown.append(f"{name!r}: {_count(len(rows), 'example')}{where}")
    more = f" and {len(rare) - 5} more" if len(rare) > 5 else ""
    return (
        f"{path.name}: {len(rare)} class{'es' if len(rare) > 1 else ''} in {column!r} with fewer than "
        f"{RARE_EXAMPLES} examples or under "
        f"{RARE_FRACTION:.0%} of the {len(named):,} rows, which a classifier can hardly learn: {'; '.join(shown)}"
        f"{more}; check those labels, or drop the rows",
    )

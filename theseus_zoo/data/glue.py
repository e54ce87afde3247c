"""The paper's eight GLUE tasks: their columns, labels, metrics and dev splits, loading and scoring.

`load_glue` gives a `datasets.DatasetDict` either from the Hugging Face hub
(``nyu-mll/glue``, needs a network) or from a local copy of the original GLUE
distribution (``SST-2/train.tsv``, ``MNLI/dev_matched.tsv``, ...). Both give the same
columns: the hub's text column names, ``label`` (class id in the GLUE order, or a
float for STS-B) and ``idx``; and the same split names: ``train`` and the task's
`GlueTask.dev_splits` (``validation``, or ``validation_matched`` and
``validation_mismatched`` for MNLI).

Scores as the paper reports them (Xu et al. 2020, Table 1; fractions here, ×100 there)::

    results = {split: compute_metrics("mnli", predictions[split], dataset[split]["label"])
               for split in get_task("mnli").dev_splits}
    task_score("mnli", results)  # mean of matched and mismatched accuracy
    macro_score({"cola": 54.3, "mnli": 83.5, ...})  # mean over the eight tasks: 82.5 for BERT-base
"""

from __future__ import annotations

import csv
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import metrics as _metrics

if TYPE_CHECKING:
    import datasets

HUB_NAME = "nyu-mll/glue"
METRICS = {
    "accuracy": _metrics.accuracy,
    "f1": _metrics.f1,
    "matthews_correlation": _metrics.matthews_correlation,
    "pearson": _metrics.pearson,
    "spearman": _metrics.spearman,
}


@dataclass(frozen=True)
class GlueTask:
    """One GLUE task as the paper trains and scores it.

    Args:
        name: the hub's configuration name (``"sst2"``).
        folder: the task's folder in the GLUE distribution (``"SST-2"``).
        text_columns: text columns of the loaded dataset, the hub's names (``("premise", "hypothesis")``).
        label_names: class names in the GLUE order, a label's id is its position; ``()`` for regression.
            A TSV label is either one of these names or its id written as a number.
        metrics: names in `METRICS`; a dev split's score is their mean.
        tsv_text_columns: the text columns in the TSV files: header names, or indices for a header-less
            file (CoLA's train and dev files) (default: ``text_columns``).
        tsv_label_column: the label column in the TSV files, a name or an index (default: ``"label"``).
        dev_splits: the dev splits, whose scores are averaged (default: ``("validation",)``).
        max_length: tokens per example in the paper's setup (default: 128).
        label_column: the label column of the loaded dataset (default: ``"label"``).
    """

    name: str
    folder: str
    text_columns: tuple[str, ...]
    label_names: tuple[str, ...]
    metrics: tuple[str, ...]
    tsv_text_columns: tuple[str, ...] | tuple[int, ...] = ()
    tsv_label_column: str | int = "label"
    dev_splits: tuple[str, ...] = ("validation",)
    max_length: int = 128
    label_column: str = "label"

    def __post_init__(self) -> None:
        if not self.tsv_text_columns:
            object.__setattr__(self, "tsv_text_columns", self.text_columns)
        if len(self.text_columns) != len(self.tsv_text_columns) or not 1 <= len(self.text_columns) <= 2:
            raise ValueError(f"{self.name}: give one or two text columns, the same number for the TSV files")
        unknown = sorted(set(self.metrics) - set(METRICS))
        if not self.metrics or unknown:
            raise ValueError(f"{self.name}: give metrics from {', '.join(METRICS)}, got {list(self.metrics)}")
        positions = (*self.tsv_text_columns, self.tsv_label_column)
        if len({type(column) for column in positions}) != 1:
            raise ValueError(f"{self.name}: TSV columns are all header names or all indices, got {positions}")

    @property
    def is_regression(self) -> bool:
        return not self.label_names

    @property
    def num_labels(self) -> int:
        """Outputs of the model's head: the number of classes, 1 for regression."""
        return len(self.label_names) or 1

    @property
    def splits(self) -> tuple[str, ...]:
        """``train`` and the dev splits: what `load_glue` gives by default."""
        return ("train", *self.dev_splits)

    @property
    def has_header(self) -> bool:
        return isinstance(self.tsv_label_column, str)

    def tsv_file(self, split: str) -> str:
        """The file of a split in the GLUE distribution: ``train.tsv``, ``dev.tsv``, ``dev_matched.tsv``, ..."""
        if split not in self.splits:
            raise ValueError(f"GLUE {self.name} has the splits {', '.join(self.splits)}, not {split!r}")
        return split.replace("validation", "dev") + ".tsv"


_NLI = ("entailment", "not_entailment")
GLUE_TASKS: dict[str, GlueTask] = {
    task.name: task
    for task in [  # in the order of the paper's tables
        GlueTask(
            "cola",
            "CoLA",
            text_columns=("sentence",),
            label_names=("unacceptable", "acceptable"),
            metrics=("matthews_correlation",),
            tsv_text_columns=(3,),  # header-less train/dev files: source, label, original label, sentence
            tsv_label_column=1,
        ),
        GlueTask(
            "mnli",
            "MNLI",
            text_columns=("premise", "hypothesis"),
            label_names=("entailment", "neutral", "contradiction"),
            metrics=("accuracy",),
            tsv_text_columns=("sentence1", "sentence2"),
            tsv_label_column="gold_label",
            dev_splits=("validation_matched", "validation_mismatched"),
        ),
        GlueTask(
            "mrpc",
            "MRPC",
            text_columns=("sentence1", "sentence2"),
            label_names=("not_equivalent", "equivalent"),
            metrics=("f1", "accuracy"),
            tsv_text_columns=("#1 String", "#2 String"),
            tsv_label_column="Quality",
        ),
        GlueTask("qnli", "QNLI", ("question", "sentence"), _NLI, ("accuracy",), max_length=256),
        GlueTask(
            "qqp",
            "QQP",
            text_columns=("question1", "question2"),
            label_names=("not_duplicate", "duplicate"),
            metrics=("f1", "accuracy"),
            tsv_label_column="is_duplicate",
        ),
        GlueTask("rte", "RTE", ("sentence1", "sentence2"), _NLI, ("accuracy",)),
        GlueTask("sst2", "SST-2", ("sentence",), ("negative", "positive"), ("accuracy",)),
        GlueTask("stsb", "STS-B", ("sentence1", "sentence2"), (), ("pearson", "spearman"), tsv_label_column="score"),
    ]
}


def get_task(task: str | GlueTask) -> GlueTask:
    """The task of a name, in any spelling of the hub's or the GLUE distribution's (``"SST-2"``, ``"sst2"``)."""
    if isinstance(task, GlueTask):
        return task
    key = str(task).lower().replace("-", "").replace("_", "")
    if key not in GLUE_TASKS:
        raise ValueError(f"unknown GLUE task {task!r}; the paper's tasks are {', '.join(GLUE_TASKS)}")
    return GLUE_TASKS[key]


def load_glue(
    task: str | GlueTask, data_dir: str | Path | None = None, *, splits: Sequence[str] | None = None
) -> datasets.DatasetDict:
    """Loads a GLUE task's splits (default: ``train`` and its dev splits) as a `datasets.DatasetDict`.

    Args:
        task: a task or its name (`get_task`).
        data_dir: ``None`` to download from the hub (``nyu-mll/glue``); else a local copy of the GLUE
            distribution: its root (holding ``SST-2/``, ``MNLI/``, ...) or the task's own folder.
        splits: a subset of `GlueTask.splits`.

    Local TSV files are read as the GLUE distribution writes them (tab-separated, no quoting, UTF-8, a BOM
    allowed); rows with fewer fields than the header (a few in some copies of QQP) are skipped with a warning.

    Raises:
        ValueError: unknown task or split, missing file, or a file without the task's columns (all before
            reading any row); a label that is not one of the task's (while reading).
    """
    task = get_task(task)
    splits = tuple(task.splits if splits is None else splits)
    files = {split: task.tsv_file(split) for split in splits}  # validates the split names
    hf = _import_datasets()
    if data_dir is None:
        loaded = hf.load_dataset(HUB_NAME, task.name)
        return hf.DatasetDict({split: loaded[split] for split in splits})
    folder = _task_folder(task, Path(data_dir), list(files.values()))
    positions = {split: _columns(task, folder / name) for split, name in files.items()}
    return hf.DatasetDict({split: _read_tsv(task, folder / files[split], positions[split]) for split in splits})


def compute_metrics(task: str | GlueTask, predictions: Any, references: Any) -> dict[str, float]:
    """The task's metrics on one dev split, and ``score``: their mean (×100 for the paper's tables).

    ``predictions`` are class ids or per-class scores (argmax taken), or the regression outputs for STS-B;
    ``references`` the dataset's labels. See `theseus_zoo.metrics` for the conventions.
    """
    task = get_task(task)
    results = {name: METRICS[name](predictions, references) for name in task.metrics}
    results["score"] = sum(results.values()) / len(results)
    return results


def task_score(task: str | GlueTask, results: Mapping[str, Mapping[str, float]]) -> float:
    """The paper's number for a task: the mean of the ``score`` of each dev split (MNLI: of m and mm).

    ``results`` maps every dev split of the task to its `compute_metrics` result.
    """
    task = get_task(task)
    missing = [split for split in task.dev_splits if split not in results]
    if missing:
        raise ValueError(f"GLUE {task.name} is scored on {', '.join(task.dev_splits)}; results lack {missing}")
    return sum(results[split]["score"] for split in task.dev_splits) / len(task.dev_splits)


def macro_score(scores: Mapping[str, float]) -> float:
    """The paper's macro column: the mean of the eight task scores (any spelling of the task names)."""
    by_task = {get_task(name).name: score for name, score in scores.items()}
    missing = [name for name in GLUE_TASKS if name not in by_task]
    if missing or len(by_task) != len(scores):
        problem = f"missing {', '.join(missing)}" if missing else f"a task is named twice in {list(scores)}"
        raise ValueError(f"the macro score needs one score per GLUE task ({', '.join(GLUE_TASKS)}); {problem}")
    return sum(by_task.values()) / len(by_task)


def _import_datasets() -> Any:
    try:
        import datasets
    except ImportError as error:  # an optional dependency
        raise ImportError("loading GLUE needs the datasets library: pip install datasets") from error
    return datasets


def _task_folder(task: GlueTask, data_dir: Path, names: list[str]) -> Path:
    folder = data_dir / task.folder if (data_dir / task.folder).is_dir() else data_dir
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        raise ValueError(
            f"no GLUE {task.folder} file {', '.join(str(folder / name) for name in missing)}; data_dir must be the "
            f"GLUE root (holding {task.folder}/) or the {task.folder} folder, with {', '.join(names)}"
        )
    return folder


def _columns(task: GlueTask, path: Path) -> list[int]:
    """Indices of the text columns and the label column in a TSV file, checked against its first line."""
    with path.open(encoding="utf-8-sig", newline="") as stream:
        first = next(csv.reader(stream, delimiter="\t", quoting=csv.QUOTE_NONE), [])
    wanted = [*task.tsv_text_columns, task.tsv_label_column]
    if not task.has_header:
        if len(first) <= max(wanted):
            raise ValueError(
                f"{path}: GLUE {task.folder} rows have at least {max(wanted) + 1} tab-separated fields (no header), "
                f"the first has {len(first)}"
            )
        return wanted
    missing = [column for column in wanted if column not in first]
    if missing:
        kind = "label column" if task.tsv_label_column in missing else "text columns"
        raise ValueError(
            f"{path}: no {kind} {missing} (its header: {', '.join(first) or 'empty'}); GLUE {task.folder} files "
            f"have the columns {', '.join(map(str, wanted))}"
        )
    return [first.index(column) for column in wanted]


def _read_tsv(task: GlueTask, path: Path, positions: list[int]) -> datasets.Dataset:
    hf = _import_datasets()
    *text_positions, label_position = positions
    columns: dict[str, list] = {name: [] for name in (*task.text_columns, task.label_column, "idx")}
    skipped = 0
    with path.open(encoding="utf-8-sig", newline="") as stream:
        rows = csv.reader(stream, delimiter="\t", quoting=csv.QUOTE_NONE)
        if task.has_header:
            next(rows)
        for line, row in enumerate(rows, start=2 if task.has_header else 1):
            if not row:
                continue
            if len(row) <= max(positions):
                skipped += 1
                continue
            for name, position in zip(task.text_columns, text_positions, strict=True):
                columns[name].append(row[position])
            columns[task.label_column].append(_label(task, row[label_position], path, line))
            columns["idx"].append(len(columns["idx"]))
    if skipped:
        warnings.warn(f"{path}: skipped {skipped} rows with missing fields", stacklevel=3)
    label = hf.Value("float32") if task.is_regression else hf.ClassLabel(names=list(task.label_names))
    features = hf.Features(
        {
            **{name: hf.Value("string") for name in task.text_columns},
            task.label_column: label,
            "idx": hf.Value("int32"),
        }
    )
    return hf.Dataset.from_dict(columns, features=features)


def _label(task: GlueTask, raw: str, path: Path, line: int) -> int | float:
    try:
        if task.is_regression:
            return float(raw)
        if raw in task.label_names:
            return task.label_names.index(raw)
        if 0 <= int(raw) < task.num_labels:
            return int(raw)
    except ValueError:
        pass
    expected = "a number" if task.is_regression else f"one of {', '.join(task.label_names)} or 0..{task.num_labels - 1}"
    raise ValueError(f"{path}, line {line}: label {raw!r} is not {expected}; is this a GLUE {task.folder} file?")

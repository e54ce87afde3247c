"""Where the bert family's examples come from: Rotten Tomatoes, BBC News, GLUE, or the user's own table, with its
splits, class names and what was inferred about its labels (`theseus_zoo.tasks.text.TextClassificationTask`'s data
half; tokenizing and batching stay with the task, which holds the tokenizer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class TextData:
    """The data half of `TextClassificationTask`, reading the options its ``__init__`` set: ``dataset_name``,
    ``data_dir``, ``glue`` (a GLUE task or ``None``), ``label_kind``, ``missing_labels``, the columns, ``split`` (the
    fixed split's seed and fractions) and ``_table`` (the user's table once read)."""

    dataset_name: str
    data_dir: str | None
    glue: Any
    label_kind: str | None
    missing_labels: str
    text_column: str
    text_pair_column: str | None
    label_column: str
    split: dict[str, Any]
    _table: Any

    def _load_table(self) -> Any:
        if self._table is None:
            from ..data.tables import load_table

            self._table = load_table(
                self.dataset_name,
                text_column=self.text_column,
                text_pair_column=self.text_pair_column,
                label_column=self.label_column,
                labels="classes" if self.label_kind == "binary" else self.label_kind,
                missing=self.missing_labels,
                **self.split,
            )
            names = self._table.label_names or ()
            if self.label_kind == "binary" and len(names) != 2:
                raise ValueError(
                    f"labels='binary' asks for two classes; {self.dataset_name} has {len(names)} "
                    f"({', '.join(names[:10])}): set labels to 'classes'"
                )
        return self._table

    @property
    def label_names(self) -> tuple[str, ...] | None:
        """The class names in label order (``id2label`` of the exported config); ``None`` for regression."""
        if self.glue is not None:
            return self.glue.label_names or None
        if self.dataset_name == "rotten-tomatoes":
            from ..data.rotten_tomatoes import FIVE_LABEL_NAMES, LABEL_NAMES

            return {"binary": LABEL_NAMES, "five": FIVE_LABEL_NAMES, "regression": None}[self.label_kind]
        if self.dataset_name == "bbc-news":
            from ..data.bbc_news import TOPICS

            return TOPICS
        return self._load_table().label_names

    def describe_data(self) -> str | None:
        """For the user's own data, what was read: the file, its columns, classes and split (and the rows dropped);
        ``None`` for the built-in datasets, which their recipes describe."""
        if self.glue is not None or self.dataset_name in ("rotten-tomatoes", "bbc-news"):
            return None
        return self._load_table().description

    def data_warnings(self) -> tuple[str, ...]:
        """For the user's own data, lines to warn about (a class with few examples, `theseus_zoo.data.tables`)."""
        if self.glue is not None or self.dataset_name in ("rotten-tomatoes", "bbc-news"):
            return ()
        return self._load_table().warnings

    def label_inference(self) -> str | None:
        """What was inferred about the user's labels (``labels`` left out), as a line to print; else ``None``."""
        if self.glue is not None or self.dataset_name in ("rotten-tomatoes", "bbc-news"):
            return None
        table = self._load_table()
        if table.inference is None:
            return None
        return f"{Path(self.dataset_name).name}: labels: {table.inference}"

    def _splits(self) -> dict[str, Any]:
        """``{name: datasets.Dataset}``: ``train``, ``validation`` and ``test`` for Rotten Tomatoes; ``train`` and
        the task's dev splits for GLUE (`_split_name` maps the trainer's split names onto these)."""
        if self.dataset_name == "rotten-tomatoes":
            from ..data.rotten_tomatoes import load_rotten_tomatoes

            return dict(load_rotten_tomatoes(labels=self.label_kind, **self.split))
        if self.dataset_name == "bbc-news":
            from ..data.bbc_news import load_bbc_news

            return dict(load_bbc_news(**self.split))
        if self.glue is None:
            return dict(self._load_table().splits)
        from ..data.glue import load_glue

        return dict(load_glue(self.glue, self.data_dir))

    def _split_name(self, split: str) -> str:
        """``"dev"`` is the (first) validation split; GLUE's ``"test"`` is its first dev split too (hidden labels)."""
        if split == "dev" or (split == "test" and self.glue is not None):
            return self.glue.dev_splits[0] if self.glue is not None else "validation"
        return split

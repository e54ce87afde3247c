"""A run's results as the zoo and ``benchmarks/`` share them: `Report` and `ModelResult`, the typed ``report.json``
(`Report.load` / `Report.save`); `theseus_zoo.training.runners.ensure_run` runs, resumes or reads a run.

``report.json`` is versioned like a recipe (`theseus_zoo.recipes.with_defaults`): `REPORT_VERSION` is the layout
written today. Version 1 is the layout every report so far has, without a ``version`` field: it loads as version 1
and is saved byte for byte as it was (keys in the same order, ``json.dumps(..., indent=2)``); a later layout will
write its number.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import metrics

REPORT_VERSION = 1
REPORT = "report.json"


@dataclass
class ModelResult:
    """One model of a report: its test metrics (``test``: metric name -> value), parameters, and, when the run
    measured them, the bootstrap standard error of the test metric, the per-example test predictions (what paired
    comparisons need), the bytes of its export and its test metric as a percentage of the predecessor's."""

    test: dict[str, float]
    parameters: int | None = None
    test_standard_error: float | None = None
    test_predictions: list[float] | None = None
    size_on_disk_bytes: int | None = None
    retention_percent: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields this layout does not know (a newer writer's), kept so that a save writes them back."""

    _ORDER = ("test", "test_standard_error", "test_predictions", "parameters", "size_on_disk_bytes")

    @classmethod
    def from_dict(cls, entry: Mapping[str, Any]) -> ModelResult:
        known = {name: entry[name] for name in (*cls._ORDER, "retention_percent") if name in entry}
        return cls(**{"test": {}, **known}, extra={k: v for k, v in entry.items() if k not in known and k != "extra"})

    def to_dict(self) -> dict[str, Any]:
        """The entry as ``report.json`` has it: the fields measured (``retention_percent`` always, ``null`` when
        the predecessor's metric is 0), in the order reports have always had them."""
        entry = {name: getattr(self, name) for name in self._ORDER if getattr(self, name) is not None}
        return {**entry, "retention_percent": self.retention_percent, **self.extra}


@dataclass
class Report:
    """What `theseus compress` writes to ``report.json`` (`theseus_zoo.training.report.write_report`): the recipe
    (as `Recipe.to_dict` gave it), the test metric's name, every model (``"predecessor"`` first, then
    ``"theseus"`` and ``"baseline:<name>"``), the measured speedup of the exported successor and each phase's record
    (``best_metric``, ``seconds``, ...). Tasks that score per-example predictions add the test labels and Theseus'
    paired comparisons (model name -> ``{"difference", "low", "high"}``); a recipe with a ``refine`` phase adds
    what refined the models, one with a ``budget`` its search (`theseus_zoo.training.search`)."""

    recipe: dict[str, Any]
    metric: str
    models: dict[str, ModelResult]
    speedup: float | None = None
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)
    refinement: Any = None
    test_labels: list[float] | None = None
    comparisons: dict[str, dict[str, float]] | None = None
    search: dict[str, Any] | None = None
    version: int = REPORT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields this layout does not know, kept so that a save writes them back."""

    _KNOWN = ("recipe", "metric", "models", "refinement", "test_labels", "comparisons", "search", "speedup", "phases")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Report:
        """A report as ``report.json`` holds it; one without a ``version`` field is version 1. Fields a partial
        report lacks (one made up in a test, say) load as ``None`` or empty."""
        version = data.get("version", 1)
        if not isinstance(version, int) or version > REPORT_VERSION:
            raise ValueError(
                f"report version {version!r} is newer than this theseus_zoo reads ({REPORT_VERSION}): upgrade it"
            )
        return cls(
            recipe=data.get("recipe", {}),
            metric=data.get("metric", ""),
            models={name: ModelResult.from_dict(entry) for name, entry in data.get("models", {}).items()},
            speedup=data.get("speedup"),
            phases=data.get("phases", {}),
            refinement=data.get("refinement"),
            test_labels=data.get("test_labels"),
            comparisons=data.get("comparisons"),
            search=data.get("search"),
            version=version,
            extra={k: v for k, v in data.items() if k not in (*cls._KNOWN, "version")},
        )

    def to_dict(self) -> dict[str, Any]:
        """The report as ``report.json`` lays it out (module doc)."""
        data: dict[str, Any] = {"version": self.version} if self.version != 1 else {}
        data |= {
            "recipe": self.recipe,
            "metric": self.metric,
            "models": {name: model.to_dict() for name, model in self.models.items()},
        }
        if self.refinement is not None or self.recipe.get("refine") is not None:  # null when nothing refined
            data["refinement"] = self.refinement
        optional = {"test_labels": self.test_labels, "comparisons": self.comparisons, "search": self.search}
        data |= {name: value for name, value in optional.items() if value is not None}
        return data | {"speedup": self.speedup, "phases": self.phases} | self.extra

    @classmethod
    def load(cls, path: Path | str) -> Report:
        """``path``: a ``report.json``, or a run directory holding one."""
        path = Path(path)
        return cls.from_dict(json.loads((path / REPORT if path.is_dir() else path).read_text()))

    def save(self, path: Path | str) -> None:
        """Writes ``path`` through a temporary file and a rename: a crash leaves the report that was there (or
        none) whole, never half a file, which `theseus_zoo.training.runners.ensure_run` would take for a finished
        run."""
        path = Path(path)
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        os.replace(temporary, path)

    def method_names(self) -> dict[str, str]:
        """Each model's key (but the predecessor's) -> the full name of the method that trained it
        (``{"theseus": "theseus+warmup+kd", "baseline:kd": "kd"}``), from the recipe the run recorded, by the one
        naming rule (`theseus_zoo.methods.report_keys`)."""
        from ..methods import parse_method, report_keys
        from ..recipes import with_defaults
        from ..recipes.recipe import methods_trained

        recipe = with_defaults(self.recipe) if self.recipe else {"methods": None, "theseus": True, "baselines": ()}
        names = methods_trained(recipe["methods"], recipe["theseus"], recipe["baselines"])
        return {key: str(parse_method(name)) for name, (key, _) in zip(names, report_keys(names), strict=True)}

    def stages(self, model: str) -> list[str]:
        """The checkpointed stages that trained ``model``, in order, as this report records them: a baseline's one,
        a Theseus variant's ``warmup`` (with ``+warmup``) and ``replacing``, suffixed when it was not the run's
        first variant (`theseus_zoo.methods.report_keys`)."""
        from ..methods import report_keys

        names = self.method_names()
        suffix = dict(report_keys(list(names.values())))[model] if model in names else ""
        if model.startswith("baseline:") or (model in names and not names[model].startswith("theseus")):
            return [model]
        return [stage for stage in (f"warmup{suffix}", f"replacing{suffix}") if stage in self.phases]

    def test(self, model: str) -> float:
        """``model``'s test metric (the report's ``metric``)."""
        return self.models[model].test[self.metric]

    def scorer(self, model: str) -> Callable[[Any], float]:
        """``model``'s test metric on the test examples a bootstrap chose (numpy indices), from its per-example
        predictions: `score_examples`."""
        labels, predictions = np.asarray(self.test_labels), np.asarray(self.models[model].test_predictions)
        return lambda chosen: score_examples(self.metric, predictions, labels, chosen)


def score_examples(metric: str, predictions: np.ndarray, labels: np.ndarray, chosen: np.ndarray) -> float:
    """A report's test ``metric`` of per-example ``predictions`` on the examples ``chosen``: accuracy, or for
    regression the mean of Pearson and Spearman (as `theseus_zoo.tasks.text` scores it)."""
    labels, predictions = labels[chosen], predictions[chosen]
    if metric == "accuracy":
        return float(np.mean(predictions == labels))
    return (metrics.pearson(predictions, labels) + metrics.spearman(predictions, labels)) / 2

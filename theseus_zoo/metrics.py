"""Classification and regression metrics in NumPy, with the conventions of scikit-learn and SciPy.

Every function takes predictions and references as sequences, NumPy arrays or
(CPU or GPU) torch tensors of equal length and returns a float. Predictions of a
classifier may be class ids (shape ``(n,)``) or scores (shape ``(n, classes)``, whose
argmax is taken); predictions of a regressor may be ``(n,)`` or ``(n, 1)``.

Degenerate inputs give 0.0 rather than NaN, so that model selection never sees NaN:
`matthews_correlation` when a side has a single class (as scikit-learn), `f1` when
there is neither a predicted nor a true positive (scikit-learn's ``zero_division=0``),
`pearson` and `spearman` when a side is constant (SciPy returns NaN there).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["accuracy", "f1", "matthews_correlation", "pearson", "spearman"]


def accuracy(predictions: Any, references: Any) -> float:
    """Fraction of predicted class ids equal to the references."""
    predicted, true = _classes(predictions, references)
    return float(np.mean(predicted == true))


def f1(predictions: Any, references: Any, positive: int = 1) -> float:
    """Binary F1 of the class ``positive`` (default: 1): 2·TP / (2·TP + FP + FN)."""
    predicted, true = _classes(predictions, references)
    predicted_positive, true_positive = predicted == positive, true == positive
    hits = np.sum(predicted_positive & true_positive)
    misses = np.sum(predicted_positive != true_positive)  # false positives + false negatives
    denominator = 2 * hits + misses
    return float(2 * hits / denominator) if denominator else 0.0


def matthews_correlation(predictions: Any, references: Any) -> float:
    """Matthews correlation coefficient (multi-class form of Gorodkin 2004, as scikit-learn), in [-1, 1]."""
    predicted, true = _classes(predictions, references)
    labels, indices = np.unique(np.concatenate([true, predicted]), return_inverse=True)
    confusion = np.zeros((len(labels), len(labels)), dtype=np.float64)
    np.add.at(confusion, (indices[: len(true)], indices[len(true) :]), 1.0)
    true_counts, predicted_counts = confusion.sum(axis=1), confusion.sum(axis=0)
    samples, correct = confusion.sum(), np.trace(confusion)
    covariance = correct * samples - true_counts @ predicted_counts
    scale = np.sqrt((samples**2 - predicted_counts @ predicted_counts) * (samples**2 - true_counts @ true_counts))
    return float(covariance / scale) if scale else 0.0


def pearson(predictions: Any, references: Any) -> float:
    """Pearson correlation coefficient, in [-1, 1]."""
    x, y = _values(predictions, references)
    x, y = x - x.mean(), y - y.mean()
    scale = np.sqrt((x @ x) * (y @ y))
    return float(np.clip((x @ y) / scale, -1.0, 1.0)) if scale else 0.0


def spearman(predictions: Any, references: Any) -> float:
    """Spearman rank correlation: Pearson on ranks, ties given their average rank (as SciPy)."""
    x, y = _values(predictions, references)
    return pearson(_ranks(x), _ranks(y))


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n, tied values sharing the mean of their ranks."""
    order = np.argsort(values, kind="stable")
    ordinal = np.empty(len(values), dtype=np.float64)
    ordinal[order] = np.arange(1, len(values) + 1)
    _, groups = np.unique(values, return_inverse=True)
    sums = np.bincount(groups, weights=ordinal)
    counts = np.bincount(groups)
    return (sums / counts)[groups]


def _numpy(values: Any) -> np.ndarray:
    if hasattr(values, "detach"):  # a torch tensor, maybe on a GPU
        values = values.detach().cpu().numpy()
    return np.asarray(values)


def _classes(predictions: Any, references: Any) -> tuple[np.ndarray, np.ndarray]:
    predicted, true = _numpy(predictions), _numpy(references)
    if predicted.ndim == 2:
        predicted = predicted.argmax(axis=-1)
    _check(predicted, true)
    return predicted.astype(np.int64), true.astype(np.int64)


def _values(predictions: Any, references: Any) -> tuple[np.ndarray, np.ndarray]:
    predicted, true = _numpy(predictions), _numpy(references)
    if predicted.ndim == 2 and predicted.shape[1] == 1:
        predicted = predicted[:, 0]
    _check(predicted, true)
    return predicted.astype(np.float64), true.astype(np.float64)


def _check(predicted: np.ndarray, true: np.ndarray) -> None:
    if predicted.ndim != 1 or true.ndim != 1 or len(predicted) != len(true) or len(true) == 0:
        raise ValueError(
            f"metrics need as many predictions as references (one per example, at least one), got shapes "
            f"{predicted.shape} and {true.shape}"
        )

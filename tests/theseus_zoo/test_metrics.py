"""The metrics against hand-computed values, independent formulas, and SciPy/scikit-learn where installed."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from theseus_zoo import metrics

PREDICTED = [1, 1, 0, 1, 0]
TRUE = [1, 0, 0, 1, 1]  # TP 2, TN 1, FP 1, FN 1


def test_classification_metrics_by_hand():
    assert metrics.accuracy(PREDICTED, TRUE) == pytest.approx(3 / 5)
    assert metrics.f1(PREDICTED, TRUE) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert metrics.f1(PREDICTED, TRUE, positive=0) == pytest.approx(2 * 1 / (2 * 1 + 1 + 1))
    # (TP·TN − FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (2 − 1) / sqrt(3·3·2·2)
    assert metrics.matthews_correlation(PREDICTED, TRUE) == pytest.approx(1 / 6)


def test_multiclass_matthews_by_hand():
    # confusion (true × predicted): [[2, 0, 0], [0, 1, 1], [0, 1, 1]]; c = 4, s = 6, t = p = (2, 2, 2)
    # (c·s − t·p) / sqrt((s² − p·p)(s² − t·t)) = (24 − 12) / sqrt(24 · 24) = 0.5
    assert metrics.matthews_correlation([0, 1, 1, 0, 2, 2], [0, 1, 2, 0, 1, 2]) == pytest.approx(0.5)
    assert metrics.matthews_correlation([2, 0, 1], [2, 0, 1]) == pytest.approx(1.0)
    assert metrics.matthews_correlation([1, 0, 1, 0], [0, 1, 0, 1]) == pytest.approx(-1.0)


def test_correlations_by_hand():
    # deviations (−1.5, −0.5, 0.5, 1.5) and (−3, −1, 0, 4): 11 / sqrt(5 · 26)
    assert metrics.pearson([1, 2, 3, 4], [2, 4, 5, 9]) == pytest.approx(11 / math.sqrt(130))
    # ranks (1, 2.5, 2.5, 4) and (1, 3, 2, 4): 4.5 / sqrt(4.5 · 5)
    assert metrics.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    cubes = [value**3 for value in (-2.0, 0.5, 1.0, 3.0)]
    assert metrics.spearman(cubes, [-2, 0.5, 1, 3]) == pytest.approx(1.0)
    assert metrics.pearson(cubes, [-2, 0.5, 1, 3]) < 0.99


def test_degenerate_inputs_give_zero_not_nan():
    assert metrics.matthews_correlation([1, 1, 1], [0, 1, 0]) == 0.0
    assert metrics.f1([0, 0], [0, 0]) == 0.0
    assert metrics.pearson([1.0, 1.0, 1.0], [0.2, 0.5, 0.1]) == 0.0
    assert metrics.spearman([0.2, 0.5, 0.1], [3, 3, 3]) == 0.0


def test_scores_tensors_and_column_outputs_are_accepted():
    logits = torch.tensor([[0.1, 2.0], [3.0, -1.0], [0.0, 0.5]])  # argmax 1, 0, 1
    assert metrics.accuracy(logits, torch.tensor([1, 0, 0])) == pytest.approx(2 / 3)
    column = torch.tensor([[1.0], [2.0], [3.0], [4.0]], requires_grad=True)
    assert metrics.pearson(column, np.array([2, 4, 5, 9])) == pytest.approx(11 / math.sqrt(130))


@pytest.mark.parametrize("metric", [metrics.accuracy, metrics.f1, metrics.pearson, metrics.spearman])
def test_mismatched_or_empty_inputs_raise(metric):
    with pytest.raises(ValueError, match="as many predictions as references"):
        metric([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="at least one"):
        metric([], [])


pairs = st.integers(2, 40).flatmap(
    lambda n: st.tuples(
        st.lists(st.floats(-100, 100, allow_nan=False), min_size=n, max_size=n),
        st.lists(st.floats(-100, 100, allow_nan=False), min_size=n, max_size=n),
    )
)


@given(pairs)
def test_pearson_matches_numpy_corrcoef(pair):
    x, y = (np.round(values, 3) for values in pair)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        assert metrics.pearson(x, y) == 0.0
    else:
        assert metrics.pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1], abs=1e-9)


@given(pairs)
def test_spearman_is_invariant_under_monotone_maps_and_symmetric(pair):
    x, y = (np.round(values, 1) for values in pair)  # rounding makes ties
    value = metrics.spearman(x, y)
    assert metrics.spearman(np.exp(x / 50), y * 3 + 1) == pytest.approx(value, abs=1e-9)
    assert metrics.spearman(y, x) == pytest.approx(value, abs=1e-9)
    assert -1 - 1e-12 <= value <= 1 + 1e-12


labels = st.integers(1, 40).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 1), min_size=n, max_size=n), st.lists(st.integers(0, 1), min_size=n, max_size=n)
    )
)


@given(labels)
def test_binary_metrics_match_their_textbook_formulas(pair):
    predicted, true = (np.array(values) for values in pair)
    tp, tn = np.sum((predicted == 1) & (true == 1)), np.sum((predicted == 0) & (true == 0))
    fp, fn = np.sum((predicted == 1) & (true == 0)), np.sum((predicted == 0) & (true == 1))
    denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert metrics.matthews_correlation(predicted, true) == pytest.approx(
        (tp * tn - fp * fn) / denominator if denominator else 0.0
    )
    precision, recall = (tp / (tp + fp) if tp + fp else 0.0), (tp / (tp + fn) if tp + fn else 0.0)
    assert metrics.f1(predicted, true) == pytest.approx(
        2 * precision * recall / (precision + recall) if precision + recall else 0.0
    )
    assert metrics.accuracy(predicted, true) == pytest.approx((tp + tn) / len(true))


def test_against_scipy_and_sklearn_when_installed():
    stats = pytest.importorskip("scipy.stats", reason="scipy is not installed: hand-computed values only")
    sklearn_metrics = pytest.importorskip("sklearn.metrics", reason="scikit-learn is not installed")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=50).round(1), rng.normal(size=50).round(1)
    assert metrics.pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0])
    assert metrics.spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0])
    predicted, true = rng.integers(0, 3, 60), rng.integers(0, 3, 60)
    assert metrics.matthews_correlation(predicted, true) == pytest.approx(
        sklearn_metrics.matthews_corrcoef(true, predicted)
    )
    assert metrics.f1(predicted == 1, true == 1) == pytest.approx(sklearn_metrics.f1_score(true == 1, predicted == 1))

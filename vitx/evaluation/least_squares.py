"""Few-shot linear evaluation (paper §4; big_vision's `fewshot_lsr` evaluator), in closed form.

Frozen pre-logit features of k images per class are whitened with their own mean and standard deviation, a
constant bias feature (100, as big_vision: large, so the bias is barely regularised) is appended, and a linear
map onto targets 2·one_hot − 1 ∈ {−1, 1}^K is solved by L2-regularised least squares:
W = (XᵀX + λI)⁻¹ XᵀY  (λ = 2¹⁰ by default).
Prediction is the argmax of the test features (whitened with the train statistics) times W.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn as nn

from ..errors import VitxError
from . import FEWSHOT_REG
from .features import indexed_features, source_features

DEFAULT_SHOTS = (1, 5, 10, 25)
DEFAULT_SEEDS = (0, 1, 2)
BIAS = 100.0


@dataclass
class LeastSquaresHead:
    """The solved linear head: whitening statistics and W (D + 1, K), float64."""

    mean: np.ndarray  # (D,)
    std: np.ndarray  # (D,)
    weight: np.ndarray  # (D + 1, K); the last row multiplies the bias feature

    def logits(self, features: np.ndarray) -> np.ndarray:  # (N, D) -> (N, K)
        return _design(features, self.mean, self.std) @ self.weight

    def predict(self, features: np.ndarray) -> np.ndarray:  # (N, D) -> (N,)
        return self.logits(features).argmax(-1)


def _design(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    z = (np.asarray(x, dtype=np.float64) - mean) / std  # (N, D) whitened
    return np.concatenate([z, np.full((z.shape[0], 1), BIAS)], axis=1)  # (N, D + 1) with the bias feature


def fit_least_squares(features: np.ndarray, labels: np.ndarray, num_classes: int,
                      reg: float = FEWSHOT_REG) -> LeastSquaresHead:
    """Solve the regularised least-squares head for (N, D) features and (N,) integer labels."""
    x = np.asarray(features, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    if x.ndim != 2 or labels.shape != (x.shape[0],):
        raise ValueError(f"features (N, D) and labels (N,) expected, got {x.shape} and {labels.shape}")
    mean = x.mean(0)
    std = x.std(0) + 1e-5  # a constant feature (one shot per class, dead units) must not divide by zero
    a = _design(x, mean, std)  # (N, D + 1)
    y = 2.0 * np.eye(num_classes)[labels] - 1.0  # (N, K) in {-1, 1}
    gram = a.T @ a + reg * np.eye(a.shape[1])  # (D + 1, D + 1), positive definite for reg > 0
    weight = np.linalg.solve(gram, a.T @ y)  # (D + 1, K)
    return LeastSquaresHead(mean, std, weight)


def require_shots(labels: np.ndarray, num_classes: int, shots: int, context: str = "", advice: str = "") -> None:
    """Refuse, in one line, training images that do not hold `shots` of every class: a least-squares head never
    predicts a class it has no image of, and one that has fewer than asked is not the k-shot figure it says it
    is. `vitx eval fewshot` (k per class) and `vitx transfer --adapter fewshot` (one of each) share it."""
    counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=num_classes)  # (K,)
    short = np.flatnonzero(counts[:num_classes] < shots)
    if len(short):
        k = int(short[0])
        more = f" (and {len(short) - 1} other classes)" if len(short) > 1 else ""
        raise VitxError(f"{context}class {k} has only {counts[k]} training images{more}; cannot take {shots} "
                        f"shot{'' if shots == 1 else 's'}{advice}")


def sample_shots(labels: np.ndarray, shots: int, seed: int, num_classes: int) -> np.ndarray:
    """`shots` indices per class, drawn without replacement by a seeded shuffle; sorted."""
    require_shots(labels, num_classes, shots)
    rng = np.random.default_rng([seed, 104729])
    order = rng.permutation(len(labels))
    picked: list[int] = []
    for k in range(num_classes):
        picked.extend(order[labels[order] == k][:shots].tolist())
    return np.sort(np.asarray(picked, dtype=np.int64))


def fewshot_accuracy(train_features: np.ndarray, train_labels: np.ndarray, test_features: np.ndarray,
                     test_labels: np.ndarray, num_classes: int, shots: Sequence[int] = DEFAULT_SHOTS,
                     seeds: Sequence[int] = DEFAULT_SEEDS, reg: float = FEWSHOT_REG) -> dict[int, list[float]]:
    """Test accuracy for each shot count and seed: {shots: [accuracy per seed]}."""
    def accuracy(idx: np.ndarray) -> float:  # of the head fitted on the train images `idx`
        head = fit_least_squares(train_features[idx], train_labels[idx], num_classes, reg)
        return float((head.predict(test_features) == test_labels).mean())

    return {int(k): [accuracy(sample_shots(train_labels, k, seed, num_classes)) for seed in seeds] for k in shots}


def evaluate_sources(backbone: nn.Module, train_source: Any, test_source: Any, preprocess: Any,
                     shots: Sequence[int] = DEFAULT_SHOTS, seeds: Sequence[int] = DEFAULT_SEEDS,
                     reg: float = FEWSHOT_REG, test_rows: np.ndarray | None = None, workers: int = 0,
                     device: torch.device | str = "cpu", chunk: int = 4096) -> dict[str, Any]:
    """Few-shot accuracies of `backbone` on labelled sources: features are extracted only for the images some
    (shots, seed) draw uses, `chunk` images decoded at a time, and for the test images `test_rows` (None: all,
    streamed)."""
    from ..data.sources import source_labels

    num_classes = int(train_source.num_classes)
    labels = source_labels(train_source)
    draws = {(k, s): sample_shots(labels, k, s, num_classes) for k in shots for s in seeds}
    needed = np.unique(np.concatenate(list(draws.values())))
    backbone = backbone.to(device)
    train_feats = indexed_features(backbone, train_source, preprocess, needed, workers, device, chunk)  # (len(needed), D)
    position = {int(i): p for p, i in enumerate(needed)}
    if test_rows is None:
        test_feats, test_labels = source_features(backbone, test_source, preprocess, len(test_source), workers, device)
    else:
        test_feats = indexed_features(backbone, test_source, preprocess, test_rows, workers, device, chunk)
        test_labels = source_labels(test_source)[test_rows]
    n_test = len(test_labels)
    results: dict[int, list[float]] = {}
    for (k, s), idx in draws.items():
        rows = np.asarray([position[int(i)] for i in idx])
        head = fit_least_squares(train_feats[rows], labels[idx], num_classes, reg)
        results.setdefault(int(k), []).append(float((head.predict(test_feats) == test_labels).mean()))
    return {"shots": {str(k): {"mean": float(np.mean(v)), "per_seed": v} for k, v in results.items()},
            "seeds": list(seeds), "reg": reg, "num_classes": num_classes, "test_samples": n_test,
            "feature_dim": int(train_feats.shape[1])}

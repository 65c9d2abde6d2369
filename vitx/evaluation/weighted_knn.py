"""Weighted k-nearest-neighbour accuracy of frozen features (DINO's protocol, lightly's and InstDisc's kNN
monitor): cosine similarity to every train feature, the k nearest voting with weights exp(sim / T)."""
from __future__ import annotations

import numpy as np
import torch

from . import KNN_K, KNN_TEMPERATURE


def knn_accuracy(train: np.ndarray, train_labels: np.ndarray, test: np.ndarray, test_labels: np.ndarray,
                 num_classes: int, k: int = KNN_K, temperature: float = KNN_TEMPERATURE) -> float:
    """Weighted k-nearest-neighbour accuracy on cosine similarity of (N, D) features."""
    a = torch.nn.functional.normalize(torch.from_numpy(train).float(), dim=1)  # (N, D)
    b = torch.nn.functional.normalize(torch.from_numpy(test).float(), dim=1)  # (M, D)
    labels = torch.from_numpy(np.asarray(train_labels))
    predicted = []
    for rows in b.split(1024):  # (m, N) similarities at a time: never (M, N) for a large train set
        sim, idx = (rows @ a.T).topk(min(k, a.shape[0]), dim=1)  # (m, k)
        # DINO's weights exp(sim / T), each row scaled by exp(-its largest sim / T): the same vote, where a small T
        # overflowed float32 to inf (T < 0.0113) and turned the vote into a tie of infinities
        weights = ((sim - sim[:, :1]) / temperature).exp()  # (m, k), in (0, 1]
        votes = torch.zeros(rows.shape[0], num_classes).scatter_add_(1, labels[idx], weights)
        predicted.append(votes.argmax(1))  # (m,)
    return float((torch.cat(predicted).numpy() == np.asarray(test_labels)).mean()) if predicted else 0.0


__all__ = ["knn_accuracy"]

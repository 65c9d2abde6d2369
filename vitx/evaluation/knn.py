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
    sim, idx = (b @ a.T).topk(min(k, a.shape[0]), dim=1)  # (M, k)
    votes = torch.zeros(b.shape[0], num_classes).scatter_add_(
        1, torch.from_numpy(train_labels)[idx], (sim / temperature).exp())  # (M, C)
    return float((votes.argmax(1).numpy() == test_labels).mean())


__all__ = ["knn_accuracy"]

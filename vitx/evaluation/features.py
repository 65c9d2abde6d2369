"""Frozen features of images: a batch at a time on the device, from tensors in memory or streamed from a
source. What every evaluation (few-shot, kNN, the monitor, the closed-form transfer) reads."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
import torch.nn as nn


@torch.no_grad()
def extract_features(backbone: nn.Module, images: Any, batch: int = 256, device: torch.device | str = "cpu",
                     normalise: Callable[[torch.Tensor], torch.Tensor] | None = None) -> np.ndarray:
    """Pooled pre-logit features (the [class] token after the final norm) of (N, 3, S, S) images, or of an
    iterable of such batches. `normalise` (e.g. `Preprocess.normalise`) is applied a batch at a time, on
    the device: uint8 images are never all held as floats. Returns (N, D) float32."""
    backbone.eval()
    chunks = images.split(batch) if isinstance(images, torch.Tensor) else images
    out = []
    for x in chunks:
        x = x.to(device)
        out.append(backbone(normalise(x) if normalise else x).float().cpu())  # (b, D)
    return torch.cat(out).numpy()


@torch.no_grad()
def source_features(backbone: nn.Module, source: Any, preprocess: Any, limit: int, workers: int = 0,
                    device: torch.device | str = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """Features (N, D) and labels (N,) of the first `limit` images of a source, streamed in batches (test splits
    can be far larger than memory allows to decode at once)."""
    from ..data.loader import eval_loader, iterate

    loader = eval_loader(source, preprocess, batch=256, rank=0, world=1, limit=limit, workers=workers,
                         skip_corrupt=False)
    feats, labels = [], []
    with iterate(loader) as batches:
        for batch in batches:
            feats.append(extract_features(backbone, batch["image"], device=device, normalise=preprocess.normalise))
            labels.append(batch["label"].numpy())
    if not feats:
        return np.zeros((0, int(backbone.embed_dim)), np.float32), np.zeros((0,), np.int64)
    return np.concatenate(feats), np.concatenate(labels)


def indexed_features(backbone: nn.Module, source: Any, preprocess: Any, indices: np.ndarray, workers: int = 0,
                     device: torch.device | str = "cpu", chunk: int = 4096) -> np.ndarray:
    """Features (len(indices), D) of the images `indices` of a source, `chunk` decoded at a time (at ImageNet
    scale the images are many GB decoded; their features are small)."""
    from ..data import decode_split

    parts = np.array_split(np.asarray(indices), max(1, -(-len(indices) // chunk)))
    return np.concatenate([extract_features(backbone, decode_split(source, preprocess, part, workers=workers).images,
                                            device=device, normalise=preprocess.normalise) for part in parts])


__all__ = ["extract_features", "indexed_features", "source_features"]

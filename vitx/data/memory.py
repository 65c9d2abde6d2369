"""Small splits held in memory: decoded and resized once, stored as uint8.

Transfer sets are tiny (VTAB-1k trains on 1,000 images for thousands of steps), so decoding every image once
instead of once per epoch removes decoding from the step time. A `TensorSplit` is an image source like any
other: the runner draws its batches through the same loader (`loader.py`), without worker processes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .loader import Batches, iterate, make_loader
from .sources import ImageSource
from .transforms import Preprocess


@dataclass
class TensorSplit:
    """A labelled split in memory: images (N, 3, S, S) uint8 and labels (N,)."""

    images: torch.Tensor
    labels: torch.Tensor
    num_classes: int | None = None
    class_names: list[str] | None = None
    origin: str = "memory"

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def load(self, index: int) -> tuple[torch.Tensor, int]:
        return self.images[index], int(self.labels[index])

    def subset(self, indices: Sequence[int]) -> "TensorSplit":
        idx = torch.as_tensor(list(indices), dtype=torch.long)
        return TensorSplit(self.images[idx], self.labels[idx], self.num_classes, self.class_names)


def decode_split(source: ImageSource, preprocess: Preprocess, indices: Sequence[int] | None = None,
                 workers: int = 0) -> TensorSplit:
    """Decode `indices` (default: all) of `source` at the eval resolution into a `TensorSplit`."""
    chosen = [int(i) for i in (range(len(source)) if indices is None else indices)]
    chunks = [[(i, None) for i in chosen[k:k + 256]] for k in range(0, len(chosen), 256)]
    with iterate(make_loader(Batches(source, preprocess), chunks, workers=workers, pin=False)) as batches:
        parts = list(batches)
    if not parts:  # an empty split, of the right shape
        size = preprocess.image_size
        parts = [{"image": torch.empty((0, 3, size, size), dtype=torch.uint8), "label": torch.empty(0).long()}]
    return TensorSplit(torch.cat([b["image"] for b in parts]), torch.cat([b["label"] for b in parts]),
                       source.num_classes, source.class_names)

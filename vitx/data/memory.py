"""Small splits held in memory: decoded and resized once, stored as uint8, batched without worker processes.

Transfer sets are tiny (VTAB-1k trains on 1,000 images for thousands of steps), so decoding every image once
instead of once per epoch removes the input pipeline from the step time. No augmentation: VTAB's protocol
resizes only (a flip or crop would change the labels of its structured tasks: x-position, orientation, ...).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from .loader import StreamSampler, _load
from .sources import ImageSource
from .transforms import Preprocess


@dataclass
class TensorSplit:
    """A labelled split in memory: images (N, 3, S, S) uint8 and labels (N,)."""

    images: torch.Tensor
    labels: torch.Tensor
    num_classes: int | None = None
    class_names: list[str] | None = None

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def subset(self, indices: Sequence[int]) -> "TensorSplit":
        idx = torch.as_tensor(list(indices), dtype=torch.long)
        return TensorSplit(self.images[idx], self.labels[idx], self.num_classes, self.class_names)


class _Decode(Dataset):
    def __init__(self, source: ImageSource, preprocess: Preprocess, indices: Sequence[int]) -> None:
        self.source, self.pre, self.indices = source, preprocess, list(indices)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, Any]:
        img, label, _ = _load(self.source, self.indices[i], skip_corrupt=False)
        arr = np.asarray(self.pre.eval_image(img), dtype=np.uint8)  # (S, S, 3)
        return torch.from_numpy(arr.copy()).permute(2, 0, 1), torch.as_tensor(label)  # (3, S, S)


def decode_split(source: ImageSource, preprocess: Preprocess, indices: Sequence[int] | None = None,
                 workers: int = 0) -> TensorSplit:
    """Decode `indices` (default: all) of `source` at the eval resolution into a `TensorSplit`."""
    indices = range(len(source)) if indices is None else indices
    loader = DataLoader(_Decode(source, preprocess, indices), batch_size=256, num_workers=workers)
    images, labels = [], []
    for x, y in loader:
        images.append(x)
        labels.append(y)
    return TensorSplit(torch.cat(images), torch.cat(labels), source.num_classes, source.class_names)


def memory_batches(split: TensorSplit, preprocess: Preprocess, *, global_micro_batch: int, rank: int, world: int,
                   seed: int, start_micro_step: int) -> Iterator[dict[str, Any]]:
    """The same deterministic, sharded stream as `train_loader`, drawn from memory."""
    sampler = StreamSampler(len(split), global_micro_batch, rank, world, seed, start_micro_step)
    for keys in sampler:
        idx = torch.as_tensor([i for i, _ in keys])
        yield {"image": preprocess.normalise_uint8(split.images[idx]), "label": split.labels[idx],
               "skipped": torch.zeros(len(keys), dtype=torch.long)}


def first_sample_batch(source: TensorSplit | ImageSource, preprocess: Preprocess) -> dict[str, Any]:
    """A batch of one: the split's first sample, as evaluation sees it. A process whose share of an evaluation
    ran out forwards it (and counts it for nothing) so that every process runs the same number of forwards,
    which sharded models (FSDP) need."""
    if isinstance(source, TensorSplit):
        return {"image": preprocess.normalise_uint8(source.images[:1]), "label": source.labels[:1]}
    img, label, _ = _load(source, 0, skip_corrupt=True)
    return {"image": preprocess.eval(img)[None], "label": torch.as_tensor([-1 if label is None else label])}


def memory_eval_batches(split: TensorSplit, preprocess: Preprocess, *, batch: int, rank: int, world: int,
                        limit: int) -> Iterator[dict[str, Any]]:
    """This process's strided share of the first `limit` samples, in batches."""
    idx = torch.arange(rank, min(limit, len(split)), world)
    for chunk in idx.split(batch):
        yield {"image": preprocess.normalise_uint8(split.images[chunk]), "label": split.labels[chunk]}

"""Batches for the runner: a deterministic global sample stream, sharded across processes.

Position p of the stream is sample `perm_e[p mod n]` of epoch e = p // n, where `perm_e` is a seeded shuffle.
Micro-step m of the run covers positions [m·G, (m+1)·G) (G = global micro-batch) and process r takes its
contiguous slice. The stream depends only on the seed, so one process and k processes see the same global
batches, and a resumed run continues at exactly the next position.
"""
from __future__ import annotations

import signal
from typing import Any, Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from ..errors import CorruptImageError
from .sources import ImageSource
from .transforms import Preprocess


class StreamSampler(Sampler[list[tuple[int, int]]]):
    """Yields, for this process, lists of (sample index, stream position) — one list per micro-step, forever."""

    def __init__(self, num_samples: int, global_micro_batch: int, rank: int, world: int, seed: int,
                 start_micro_step: int = 0) -> None:
        if num_samples <= 0:
            raise ValueError("empty dataset")
        self.n, self.g, self.rank, self.world, self.seed = num_samples, global_micro_batch, rank, world, seed
        self.start = start_micro_step
        self.local = global_micro_batch // world
        self._epoch, self._perm = -1, np.empty(0, dtype=np.int64)

    def index_at(self, position: int) -> int:
        epoch, offset = divmod(position, self.n)
        if epoch != self._epoch:
            self._epoch, self._perm = epoch, np.random.default_rng([self.seed, 7919, epoch]).permutation(self.n)
        return int(self._perm[offset])

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        step = self.start
        while True:
            first = step * self.g + self.rank * self.local
            yield [(self.index_at(p), p) for p in range(first, first + self.local)]
            step += 1


class TrainSet(Dataset):
    """Maps (index, position) to an augmented sample; optionally skips (and counts) corrupt images."""

    def __init__(self, source: ImageSource, preprocess: Preprocess, seed: int, skip_corrupt: bool = False) -> None:
        self.source, self.pre, self.seed, self.skip_corrupt = source, preprocess, seed, skip_corrupt

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, key: tuple[int, int]) -> dict[str, Any]:
        index, position = key
        img, label, skipped = _load(self.source, index, self.skip_corrupt)
        rng = np.random.default_rng([self.seed, position])
        return _sample(self.pre.train(img, rng), label, skipped)


class EvalSet(Dataset):
    """The first `limit` samples of a split, centre-cropped, for validation during training."""

    def __init__(self, source: ImageSource, preprocess: Preprocess, limit: int, skip_corrupt: bool = False) -> None:
        self.source, self.pre, self.skip_corrupt = source, preprocess, skip_corrupt
        self.n = min(len(source), limit)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, Any]:
        img, label, skipped = _load(self.source, index, self.skip_corrupt)
        return _sample(self.pre.eval(img), label, skipped)


def _load(source: ImageSource, index: int, skip_corrupt: bool) -> tuple[Any, Any, int]:
    """Load sample `index`; when skipping, fall through to the next decodable one and count the skips."""
    skipped = 0
    while True:
        try:
            img, label = source.load(index)
            return img, label, skipped
        except CorruptImageError:
            if not skip_corrupt or skipped >= len(source) - 1:
                raise
            skipped += 1
            index = (index + 1) % len(source)


def _sample(image: torch.Tensor, label: Any, skipped: int) -> dict[str, Any]:
    if label is None:
        label = -1
    return {"image": image, "label": torch.as_tensor(label), "skipped": skipped}


def _worker_init(worker_id: int) -> None:
    """Loader workers leave stop signals to the main process: a scheduler that signals the whole process group
    (SLURM's scancel) must not kill a worker while the main process finishes its step and checkpoint. Workers
    still end with the main process (PyTorch watches their parent)."""
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)


def train_loader(source: ImageSource, preprocess: Preprocess, *, global_micro_batch: int, rank: int, world: int,
                 seed: int, start_micro_step: int, workers: int, skip_corrupt: bool) -> DataLoader:
    """An endless loader of this process's share of each global micro-batch."""
    sampler = StreamSampler(len(source), global_micro_batch, rank, world, seed, start_micro_step)
    return DataLoader(TrainSet(source, preprocess, seed, skip_corrupt), batch_sampler=sampler, num_workers=workers,
                      persistent_workers=workers > 0, prefetch_factor=4 if workers > 0 else None,
                      worker_init_fn=_worker_init if workers > 0 else None)


def eval_loader(source: ImageSource, preprocess: Preprocess, *, batch: int, rank: int, world: int, limit: int,
                workers: int, skip_corrupt: bool) -> DataLoader:
    """This process's strided share of the first `limit` validation samples."""
    data = EvalSet(source, preprocess, limit, skip_corrupt)
    shard = torch.utils.data.Subset(data, list(range(rank, len(data), world)))
    return DataLoader(shard, batch_size=batch, num_workers=workers, worker_init_fn=_worker_init if workers > 0 else None)

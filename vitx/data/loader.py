"""Batches for the runner: a deterministic global sample stream, sharded across processes, as uint8.

Position p of the stream is sample `perm_e[p mod n]` of epoch e = p // n, where `perm_e` is a seeded shuffle.
Micro-step m of the run covers positions [m·G, (m+1)·G) (G = global micro-batch) and process r takes its
contiguous slice. The stream depends only on the seed, so one process and k processes see the same global
batches, and a resumed run continues at exactly the next position. Streamed sources (`streams.py`) have no
index: there the sampler reads this process's share of the stream in order, and the position only seeds the
augmentation.

Every source (in memory, files, streams) goes through the same `DataLoader`: a sampler says which samples
make a micro-batch, and `Batches` (in a worker) decodes, crops and stacks them as a (B, 3, S, S) uint8 batch,
pinned when the model is on a GPU. The runner normalises on the device (`Preprocess.normalise`).
"""
from __future__ import annotations

import contextlib
import ctypes
import itertools
import math
import os
import signal
import sys
import threading
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from ..errors import CorruptImageError, VitxError
from .decoding import decode
from .sources import ImageSource
from .transforms import Preprocess
from .photometry import Params, apply, draw_row
from .views import View, make_crop, view_rng

Key = tuple[Any, Any]  # (sample index or a stream's (image, label) record, stream position or None for eval)


class StreamSampler(Sampler[list[Key]]):
    """Yields, for this process, lists of (sample index, stream position) — one list per micro-step, forever."""

    def __init__(self, num_samples: int, global_micro_batch: int, rank: int, world: int, seed: int,
                 start_micro_step: int = 0) -> None:
        if num_samples <= 0:
            raise ValueError("empty dataset")
        self.n, self.g, self.rank, self.world, self.seed = num_samples, global_micro_batch, rank, world, seed
        self.start, self.local = start_micro_step, global_micro_batch // world
        self._epoch, self._perm = -1, np.empty(0, dtype=np.int64)

    def index_at(self, position: int) -> int:
        epoch, offset = divmod(position, self.n)
        if epoch != self._epoch:
            self._epoch, self._perm = epoch, np.random.default_rng([self.seed, 7919, epoch]).permutation(self.n)
        return int(self._perm[offset])

    def __iter__(self) -> Iterator[list[Key]]:
        for step in itertools.count(self.start):
            first = step * self.g + self.rank * self.local
            yield [(self.index_at(p), p) for p in range(first, first + self.local)]


class Batches(Dataset):
    """Turns a micro-batch's keys into a batch {"image": (B, 3, S, S) uint8, "label": (B,) or (B, K),
    "skipped": (B,)}: decoded, randomly cropped (keys with a position) or centre-cropped (position None).
    With `views` (an objective's, expanded: `views.expand`) the batch holds {"views": [(B, 3, S_v, S_v) uint8,
    one per crop]} in place of "image", each crop seeded by (seed, position or index, view); with
    `photometry_on_device` (a GPU run) the crops are geometry only and "photometry" holds each view's drawn
    parameters (`photometry.Params` as a dict) for the device to apply.

    A corrupt image stops the run with its name, or with `skip_corrupt` is replaced and counted: by the next
    decodable sample of the source, or, for a stream's record, by another record of the same batch."""

    def __init__(self, source: ImageSource, preprocess: Preprocess, seed: int = 0, skip_corrupt: bool = False,
                 views: Sequence[View] = (), photometry_on_device: bool = False) -> None:
        self.source, self.pre, self.seed, self.skip_corrupt = source, preprocess, seed, skip_corrupt
        self.views = list(views)
        self.photometry_on_device = photometry_on_device and bool(self.views)

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, key: Key) -> dict[str, torch.Tensor]:
        return self.__getitems__([key])

    def __getitems__(self, keys: Sequence[Key]) -> dict[str, Any]:
        if self.views:
            return self._views(keys)
        size = self.pre.image_size
        images = torch.empty((len(keys), 3, size, size), dtype=torch.uint8)  # (B, 3, S, S)
        labels, skipped = [], torch.zeros(len(keys), dtype=torch.long)
        for j, (item, position) in enumerate(keys):
            image, label, skipped[j] = self._load(item, keys, j)
            if position is None or not self.pre.augment:
                images[j] = self.pre.eval(image)
            else:
                images[j] = self.pre.train(image, np.random.default_rng([self.seed, position]))
            labels.append(-1 if label is None else label)
        return {"image": images, "label": torch.as_tensor(labels), "skipped": skipped}

    def _views(self, keys: Sequence[Key]) -> dict[str, Any]:
        """Each view's crops, geometry per sample; the photometry batched here, or (`photometry_on_device`) its
        parameters sent with the batch for the device to apply (`photometry.apply`)."""
        crops = [torch.empty((len(keys), 3, v.size, v.size), dtype=torch.uint8) for v in self.views]  # (B, 3, S_v, S_v)
        drawn: list[list[tuple]] = [[] for _ in self.views]  # each crop's photometric parameters
        labels, skipped = [], torch.zeros(len(keys), dtype=torch.long)
        for j, (item, position) in enumerate(keys):
            image, label, skipped[j] = self._load(item, keys, j)
            index = int(item) if isinstance(item, (int, np.integer)) else j
            for v, view in enumerate(self.views):
                rng = view_rng(self.seed, position, index, v)  # the geometry's draws, then the photometry's
                crops[v][j] = make_crop(image, view, self.pre.interpolation, rng)
                drawn[v].append(draw_row(view, rng))
            labels.append(-1 if label is None else label)
        params = [Params.of(rows) for rows in drawn]
        batch = {"label": torch.as_tensor(labels), "skipped": skipped}
        if self.photometry_on_device:
            return {"views": crops, "photometry": [vars(p) for p in params], **batch}
        return {"views": [apply(c, p) for c, p in zip(crops, params)], **batch}

    def _load(self, item: Any, keys: Sequence[Key], j: int) -> tuple[torch.Tensor, Any, int]:
        """Decode `item` (an index, or a stream record), falling through to a replacement when skipping."""
        indexed = isinstance(item, (int, np.integer))
        for skipped in range(len(self.source) if indexed else len(keys)):
            try:
                image, label = self.source.load(int(item)) if indexed else item
                return decode(image), label, skipped
            except CorruptImageError:
                if not self.skip_corrupt:
                    raise
            item = (int(item) + 1) % len(self.source) if indexed else keys[(j + skipped + 1) % len(keys)][0]
        name = getattr(self.source, "origin", type(self.source).__name__)
        raise CorruptImageError(f"no decodable image left to replace a corrupt one in {name}")


def _as_is(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return batch  # Batches already stacked it


def _worker_init(worker_id: int) -> None:
    """Loader workers leave stop signals to the main process: a scheduler that signals the whole job (SLURM's
    scancel, Ctrl-C in a terminal) must not kill a worker while the main process finishes its step and
    checkpoint. A worker still ends with the main process: at once when that process dies (the kernel's
    parent-death signal), and on a SIGTERM sent by that process itself (how Python's multiprocessing stops
    workers still running at interpreter exit; ignoring that one is a run that never exits). One thread each:
    the cores are the workers."""
    parent = os.getppid()
    _die_with(parent)
    for sig in (signal.SIGUSR1, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    _terminate_only_from(parent)
    threading.excepthook = _quiet_hangups
    sys.excepthook = _quiet_sharer  # (the resource sharer's thread reports through sys.excepthook itself)
    torch.set_num_threads(1)


def _quiet_hangups(args: threading.ExceptHookArgs) -> None:
    """A worker's background threads (multiprocessing's resource sharer, which hands the main process its
    batches' file descriptors) see the main process hang up when a stop ends the run mid-handshake: a
    ConnectionResetError or EOFError there is the stop, not a failure, and its traceback cut into the stop's
    one line. Any other exception is printed as before."""
    if not _hangup(args.exc_type):
        threading.__excepthook__(args)


def _quiet_sharer(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
    """`_quiet_hangups` for multiprocessing's resource sharer, whose `_serve` loop hands its errors to
    sys.excepthook directly (1 stop in 3 printed its ConnectionResetError before the stop's line)."""
    if not _hangup(exc_type):
        sys.__excepthook__(exc_type, exc, tb)


def _hangup(kind: type[BaseException]) -> bool:
    """The main process hung up on this worker (a stop): what `_quiet_hangups` and `_quiet_sharer` keep quiet."""
    return issubclass(kind, (ConnectionError, EOFError))


def _die_with(parent: int) -> None:
    """Linux: this process gets SIGKILL when its parent dies (a worker busy on a huge batch never polls for it)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(0)


def _terminate_only_from(parent: int) -> None:
    """SIGTERM ends this process when `parent` sends it, and is ignored from anyone else. The signal is blocked
    and a thread reads each one with its sender (`sigwaitinfo`); elsewhere than POSIX it is simply ignored."""
    if not hasattr(signal, "sigwaitinfo"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def watch() -> None:
        while True:
            if signal.sigwaitinfo({signal.SIGTERM}).si_pid == parent:
                os._exit(0)  # status 0: the parent's worker watch takes it for an orderly exit

    threading.Thread(target=watch, name="vitx-sigterm", daemon=True).start()


def close(batches: Iterator[Any]) -> None:
    """Stop a loader iterator's workers now, not whenever garbage collection reaches it (a reference cycle, or
    `gc.disable()`, would otherwise leave them to the interpreter's exit). In-process iterators need nothing."""
    shutdown = getattr(batches, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


@contextlib.contextmanager
def iterate(loader: DataLoader) -> Iterator[Iterator[Any]]:
    """`for batch in loader` whose workers are stopped when the block ends, however it ends."""
    batches = iter(loader)
    try:
        yield batches
    finally:
        close(batches)


def make_loader(data: Batches, sampler: Iterable[list[Key]], *, workers: int, pin: bool,
                prefetch: int = 2) -> DataLoader:
    """The one DataLoader configuration every batch stream uses."""
    return DataLoader(data, batch_sampler=sampler, num_workers=workers, collate_fn=_as_is, pin_memory=pin,
                      persistent_workers=False, prefetch_factor=prefetch if workers > 0 else None,
                      worker_init_fn=_worker_init if workers > 0 else None)


def train_loader(source: Any, preprocess: Preprocess, *, global_micro_batch: int, rank: int, world: int,
                 seed: int, start_micro_step: int, workers: int, skip_corrupt: bool, pin: bool = False,
                 views: Sequence[View] = ()) -> DataLoader:
    """An endless loader of this process's share of each global micro-batch (`source`: an ImageSource, a
    TensorSplit, or a `StreamSource`); `views`: the objective's crops (expanded), else one crop per image."""
    if hasattr(source, "micro_batches"):  # a stream: its own reader yields the keys
        sampler = source.micro_batches(global_micro_batch, rank, world, seed, start_micro_step)
    else:
        sampler = StreamSampler(len(source), global_micro_batch, rank, world, seed, start_micro_step)
    side = math.sqrt(sum(v.size ** 2 for v in views)) if views else preprocess.image_size  # pixels per sample
    check_shared_memory(global_micro_batch // world, math.ceil(side), workers)
    data = Batches(source, preprocess, seed, skip_corrupt, views, photometry_on_device=pin)  # pin: a GPU run
    return make_loader(data, sampler, workers=workers, pin=pin)


def eval_loader(source: ImageSource, preprocess: Preprocess, *, batch: int, rank: int, world: int, limit: int,
                workers: int, skip_corrupt: bool, pin: bool = False, seed: int = 0,
                views: Sequence[View] = ()) -> DataLoader:
    """This process's strided share of the first `limit` samples, centre-cropped (or, with `views`, cropped as
    the objective declares, the same crops at every evaluation), in batches."""
    mine = list(range(rank, min(len(source), limit), world))
    chunks = [[(i, None) for i in mine[k:k + batch]] for k in range(0, len(mine), batch)]
    data = Batches(source, preprocess, seed, skip_corrupt, views, photometry_on_device=pin)  # pin: a GPU run
    return make_loader(data, chunks, workers=workers, pin=pin)


def first_sample_batch(source: ImageSource, preprocess: Preprocess, views: Sequence[View] = ()) -> dict[str, Any]:
    """A batch of one: the split's first sample, as evaluation sees it. A process whose share of an evaluation
    ran out forwards it (and counts it for nothing) so that every process runs the same number of forwards,
    which sharded models (FSDP) need."""
    return Batches(source, preprocess, skip_corrupt=True, views=views).__getitems__([(0, None)])


def check_shared_memory(batch: int, size: int, workers: int, prefetch: int = 2) -> None:
    """Workers hand batches over through /dev/shm: say so in one line when it cannot hold what is in flight
    (Docker's default is 64 MB; `docker run --shm-size 8g`)."""
    if workers <= 0 or not sys.platform.startswith("linux"):
        return
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return
    need = batch * 3 * size * size * prefetch * workers * 2  # uint8 batches in flight, twice for the copy
    have = stat.f_bavail * stat.f_frsize
    if have < need:
        raise VitxError(f"/dev/shm has {have / 2**20:.0f} MB free; {workers} loader workers with {batch} images of "
                        f"{size}px in flight need about {need / 2**20:.0f} MB: give the container more (docker run "
                        "--shm-size 8g) or pass fewer --workers / a smaller --batch-size")

"""Streamed sources: WebDataset tar shards and `datasets` streaming, read in order, never indexed whole.

Pre-training at ImageNet-21k scale keeps data as tar shards or streams it from the hub. A `StreamSource`
wraps a `datasets.IterableDataset` (`load_dataset(..., streaming=True)`: the "webdataset" builder for tar
shards, local or at URLs; any hub dataset or local copy of one with `--stream`). Each process reads its own
shards (`split_dataset_by_node`: disjoint when the shard count divides by the process count), optionally
through a seeded shuffle buffer, epoch after epoch (`set_epoch` reshuffles the shard order).

Only the reading happens in the main process, and it is cheap: images stay encoded (`EncodedImage`) and are
decoded and cropped in the loader workers (`loader.Batches`). A resumed run skips the records its process
already consumed (reading, not decoding them), so it continues at exactly the next sample.
"""
from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any, Iterator

from ..errors import VitxError
from .sources import Columns

BRACES = re.compile(r"\{([^{}]*)\}")


def expand_braces(pattern: str) -> list[str]:
    """WebDataset's shard notation: `train-{0000..0099}.tar`, `{a,b}` → the list of names, in order."""
    m = BRACES.search(pattern)
    if m is None:
        return [pattern]
    body, head, tail = m.group(1), pattern[:m.start()], pattern[m.end():]
    r = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if r:
        lo, hi, width = int(r.group(1)), int(r.group(2)), len(r.group(1))
        choices = [f"{i:0{width}d}" for i in range(lo, hi + 1)]
    else:
        choices = body.split(",")
    return [name for c in choices for name in expand_braces(head + c + tail)]


def is_shards(spec: str) -> bool:
    """Whether `--data` names WebDataset tar shards: a pattern or URL ending in .tar, or a folder of them."""
    if spec.endswith(".tar") or ".tar}" in spec:
        return True
    path = Path(spec).expanduser()
    return path.is_dir() and (any(path.glob("*.tar")) or any(path.glob("train/*.tar")))


def shard_files(spec: str, split: str) -> list[str] | None:
    """The tar files of `split` (None: the split has none). A folder holds `*.tar` (train only) or
    `train/*.tar` with optional `validation/` (or `val/`, `test/`) beside it; a pattern is the train split."""
    path = Path(spec).expanduser()
    if path.is_dir():
        names = {"train": ("train",), "validation": ("validation", "val", "valid", "test"), "test": ("test",)}[split]
        for name in names:
            files = sorted(str(p) for p in (path / name).glob("*.tar"))
            if files:
                return files
        if split == "train":
            files = sorted(str(p) for p in path.glob("*.tar"))
            if files:
                return files
            raise VitxError(f"{spec} holds no .tar shards (expected {spec}/*.tar or {spec}/train/*.tar)")
        return None
    if split != "train":
        return None
    files = expand_braces(spec)
    local = [f for f in files if "://" not in f]
    missing = [f for f in local if not Path(f).expanduser().exists()]
    if missing:
        raise VitxError(f"shard {missing[0]} does not exist ({len(missing)} of {len(files)} shards missing)")
    return files


def check_complete(files: list[str]) -> None:
    """Refuse a local shard cut short. Cut inside a member, a tar fails as it is read; cut at a member's
    boundary (a copy stopped half-way), it reads as a shorter valid archive and the rest of its samples are
    silently never seen. Only the missing end-of-archive marker (two zero 512-byte blocks, which every tar
    writer ends with) tells; reading a file's last 1 KiB is cheap, so every local shard is checked at open."""
    for name in files:
        if "://" in name:
            continue
        path = Path(name).expanduser()
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 1024))
            tail = f.read()
        if len(tail) < 1024 or any(tail):
            raise VitxError(f"shard {name} is cut short (it lacks a tar's end-of-archive marker, so the samples "
                            "after the cut would be silently missing): copy or write it again")


class StreamSource:
    """A streamed dataset of (image, label) records, read in order by each process."""

    def __init__(self, ds: Any, origin: str, shuffle_buffer: int = 0, class_names: list[str] | None = None) -> None:
        if ds.features is None:
            ds = ds._resolve_features()  # peeks at the first record
        self.origin, self.shuffle_buffer = origin, shuffle_buffer
        self.columns = Columns(ds.features, origin)
        self.ds = self.columns.undecoded(ds)
        self.num_classes, self.class_names = self.columns.num_classes, self.columns.class_names
        if class_names and self.num_classes is None and self.columns.label_key is not None:
            self.num_classes, self.class_names = len(class_names), class_names

    @property
    def num_shards(self) -> int:
        return int(self.ds.num_shards)

    def sharding_note(self, world: int) -> str | None:
        """Why processes will not read disjoint shards, when they will not."""
        if world > 1 and self.num_shards % world:
            return (f"{self.origin} has {self.num_shards} shards, not a multiple of {world} processes: every process "
                    f"reads every shard and keeps 1 sample in {world} (write a multiple of {world} shards)")
        return None

    def records(self, rank: int, world: int, seed: int) -> Iterator[tuple[Any, Any]]:
        """This process's records, epoch after epoch, forever."""
        from datasets.distributed import split_dataset_by_node

        ds = self.ds.shuffle(seed=seed, buffer_size=self.shuffle_buffer) if self.shuffle_buffer > 0 else self.ds
        ds = split_dataset_by_node(ds, rank=rank, world_size=world)
        for epoch in itertools.count():
            ds.set_epoch(epoch)
            count, name = 0, self.origin
            rows = iter(ds)
            while True:
                try:
                    row = next(rows)
                except StopIteration:
                    break
                except Exception as exc:  # a damaged shard (truncated tar, bad parquet): name where it happened
                    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
                    raise VitxError(f"cannot read {self.origin} after {name} (process {rank}): {first}") from None
                name = f"{row.get('__url__', self.origin)}:{row.get('__key__', count)}"
                yield self.columns.record(row, name, path_names=False)
                count += 1
            if count == 0:
                raise VitxError(f"{self.origin} gave process {rank} of {world} no samples")

    def micro_batches(self, global_micro_batch: int, rank: int, world: int, seed: int,
                      start_micro_step: int = 0) -> Iterator[list[tuple[Any, int]]]:
        """The loader's keys: (record, stream position) per sample, `global_micro_batch // world` per list,
        starting after the `start_micro_step` micro-batches this process already consumed."""
        local = global_micro_batch // world
        records = self.records(rank, world, seed)
        next(itertools.islice(records, start_micro_step * local, start_micro_step * local), None)  # skip, no decode
        for step in itertools.count(start_micro_step):
            first = step * global_micro_batch + rank * local
            yield [(next(records), first + i) for i in range(local)]

    def materialise(self, limit: int) -> "RecordList":
        """The first `limit` records as an indexable source (a validation split, opened unshuffled: the same
        images at every checkpoint)."""
        reader = self.records(0, 1, 0)
        try:
            head = list(itertools.islice(reader, limit))
        finally:
            reader.close()  # now, while the stream's readers can still close their files
        return RecordList(head, self.origin, self.num_classes, self.class_names)


class RecordList:
    """Records held in memory (encoded), indexable like any source."""

    def __init__(self, records: list[tuple[Any, Any]], origin: str, num_classes: int | None,
                 class_names: list[str] | None) -> None:
        self.records, self.origin, self.num_classes, self.class_names = records, origin, num_classes, class_names

    def __len__(self) -> int:
        return len(self.records)

    def load(self, index: int) -> tuple[Any, Any]:
        return self.records[index]


def open_stream(spec: str, split: str, shuffle_buffer: int) -> StreamSource | None:
    """`spec` (tar shards, a hub dataset or a local copy of one) as a stream; None when it lacks `split`."""
    import datasets

    if is_shards(spec):
        files = shard_files(spec, split)
        if files is None:
            return None
        check_complete(files)
        names = Path(files[0]).parent / "classnames.txt" if "://" not in files[0] else None
        classes = names.read_text().split("\n") if names is not None and names.exists() else None
        args: dict[str, Any] = {"path": "webdataset", "data_files": {split: files}}
        what = f"{len(files)} shards at {spec}"
    else:
        path = Path(spec).expanduser()
        classes = None
        args = {"path": str(path)} if path.exists() else {"path": spec[3:] if spec.startswith("hf:") else spec}
        what = spec
    try:
        dd = datasets.load_dataset(**args, streaming=True)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        hint = "" if is_shards(spec) or Path(spec).expanduser().exists() else (
            "; offline, download a copy where you have internet (hf download NAME --repo-type dataset "
            "--local-dir DIR) and pass --data DIR --stream")
        raise VitxError(f"cannot stream {what}: {first}{hint}") from None
    from .sources import SPLIT_ALIASES

    name = next((n for n in SPLIT_ALIASES[split] if n in dd), None)
    if name is None:
        if split == "train":
            raise VitxError(f"{spec} has no train split to stream (splits: {', '.join(dd)})")
        return None
    classes = [c.strip() for c in classes if c.strip()] if classes else None
    return StreamSource(dd[name], f"{spec}:{name}", shuffle_buffer if split == "train" else 0, classes)

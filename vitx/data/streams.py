"""Streamed sources (opened by `opener.py`): WebDataset tar shards and `datasets` streaming, read in order,
never indexed whole.

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

import hashlib
import itertools
import os
import re
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..errors import VitxError, first_line
from .columns import SPLITS, Columns
from .draws import balanced_counts, stratified_split

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
    """The tar files of vitx `split` (None: the split has none). A folder holds `*.tar` (the train split) or
    `<split>/*.tar` under any of the split's names (`columns.SPLITS`); a pattern or URL is the train split."""
    path = Path(spec).expanduser()
    if path.is_dir():
        folders = [path / name for name in SPLITS[split]] + ([path] if split == "train" else [])
        files = next((found for folder in folders if (found := sorted(str(p) for p in folder.glob("*.tar")))), None)
        if files is None and split == "train":
            raise VitxError(f"{spec} holds no .tar shards (expected {spec}/*.tar or {spec}/train/*.tar)")
        return files
    if split != "train":
        return None
    files = expand_braces(spec)
    missing = [f for f in files if "://" not in f and not Path(f).expanduser().exists()]
    if missing:
        raise VitxError(f"shard {missing[0]} does not exist ({len(missing)} of {len(files)} shards missing)")
    return files


BLOCK = 512  # a tar's unit: every header is one block, every member's data is padded to whole blocks
PAX_SIZE = re.compile(rb"(?:^|\n)\d+ size=(\d+)\n")  # a pax header's override of the next member's size
PAX_PATH = re.compile(rb"(?:^|\n)\d+ path=([^\n]*)\n")  # a pax header's override of the next member's name


def _header_size(block: bytes) -> int | None:
    """The member size a 512-byte tar header gives, or None when the block is no tar header (its checksum,
    unsigned or, as some old writers made it, signed, does not match): octal, or GNU's base-256 for 8 GiB and up."""
    try:
        stored = int(block[148:156].split(b"\0", 1)[0].strip() or b"-1", 8)
    except ValueError:
        return None
    blanked = block[:148] + b" " * 8 + block[156:]
    unsigned = sum(blanked)
    if stored != unsigned and stored != unsigned - 256 * sum(b > 127 for b in blanked):
        return None
    field = block[124:136]
    if field[0] & 0x80:  # base-256
        return int.from_bytes(field[1:], "big")
    try:
        return int(field.split(b"\0", 1)[0].strip() or b"0", 8)
    except ValueError:
        return None


def tar_damage(path: str | Path) -> str | None:
    """Why the tar file at `path` is incomplete, or None when it is whole: its 512-byte headers walked from the
    start (one read each, the data between them skipped), each member's size checked against the file's, and
    the two zero blocks that end every tar present after the last member. A pax header's `size` record counts
    for the member after it. A member named outside the archive's folder is refused (`_check_name`)."""
    fd = os.open(Path(path).expanduser(), os.O_RDONLY)
    try:
        total, pos, override, last, long_name = os.fstat(fd).st_size, 0, None, None, None
        while True:
            block = os.pread(fd, BLOCK, pos)
            if len(block) < BLOCK:
                after = f"after member {last}" if last else "with no member"
                return f"it ends at byte {total} {after}, without a tar's end-of-archive marker"
            if not any(block):  # the end-of-archive marker: two zero blocks
                if os.pread(fd, BLOCK, pos + BLOCK) != bytes(BLOCK):
                    return f"at byte {pos} it has one zero block where a tar ends with two"
                return None
            size = _header_size(block)
            if size is None:
                return f"at byte {pos} it holds no tar header where one should be"
            name = block[:100].split(b"\0", 1)[0].decode("utf-8", "replace")
            prefix = block[345:500].split(b"\0", 1)[0] if block[257:263] == b"ustar\0" else b""  # POSIX ustar's
            if prefix:
                name = f"{prefix.decode('utf-8', 'replace')}/{name}"
            kind = block[156:157]
            if override is not None and kind not in (b"x", b"g"):  # the member a pax header described
                size, override = override, None
            end = pos + BLOCK + size  # where its data ends
            if end > total:
                return f"member {name} needs {size:,} bytes of data, of which the file holds {total - pos - BLOCK:,}"
            if kind == b"x":  # pax extended header: may give the next member's size and name
                data = os.pread(fd, size, pos + BLOCK)
                found, named = PAX_SIZE.search(data), PAX_PATH.search(data)
                override = int(found.group(1)) if found else None
                long_name = named.group(1).decode("utf-8", "replace") if named else None
            elif kind == b"L":  # a GNU long name: the next member's
                long_name = os.pread(fd, size, pos + BLOCK).split(b"\0", 1)[0].decode("utf-8", "replace")
            elif kind not in (b"g", b"K"):  # global pax, GNU long link names: no member of their own
                last, long_name = long_name or name, None
                _check_name(path, last)
            pos = end + (-size) % BLOCK
    finally:
        os.close(fd)


def _check_name(path: str | Path, member: str) -> None:
    """Refuse a shard whose member is named by an absolute path or climbs out of its folder with `..`: vitx reads
    members by name and extracts nothing, but such names are how a tar writes over files when unpacked, and no
    WebDataset writer makes them; the refusal names the member (not a sample that then fails to decode)."""
    if member.startswith("/") or ".." in member.split("/"):
        raise VitxError(f"shard {path}: member {member!r} has an unsafe name (an absolute path, or '..' out of the "
                        "archive's folder); nothing was read from it: write the shard with relative member names "
                        "(tar without -P)")


def check_complete(files: list[str]) -> None:
    """Refuse a local shard cut short. Cut inside a member or at a member's boundary (a copy stopped half-way),
    a tar can read as a shorter valid archive, and the rest of its samples are silently never seen; its last
    bytes tell nothing when the last member's data ends in zeros (a mask, a .npy, a raw image). So the tar's
    structure is checked at open (`tar_damage`): every member's size against the file's, and the end-of-archive
    marker after the last. One small read per member, never the data."""
    for name in files:
        if "://" in name:
            continue
        try:
            why = tar_damage(name)
        except OSError as exc:  # a folder named *.tar, no permission
            raise VitxError(f"cannot read shard {name}: {exc.strerror or exc}") from None
        if why is not None:
            raise VitxError(f"shard {name} is cut short or damaged ({why}; the samples after it would be silently "
                            "missing): copy or write it again")


def record_key(row: dict[str, Any], image_key: str) -> str:
    """A record's identity, to keep held-out records out of training: WebDataset's url and key, else the
    image's path, else a digest of its bytes."""
    if "__key__" in row:
        return f"{row.get('__url__', '')}:{row['__key__']}"
    value = row.get(image_key)
    if isinstance(value, dict):
        if value.get("path"):
            return str(value["path"])
        value = value.get("bytes")
    return hashlib.sha1(bytes(value or b"")).hexdigest()


class StreamSource:
    """A streamed dataset of (image, label) records, read in order by each process."""

    def __init__(self, ds: Any, origin: str, columns: Columns, shuffle_buffer: int = 0) -> None:
        self.origin, self.shuffle_buffer, self.columns = origin, shuffle_buffer, columns
        self.ds = columns.undecoded(ds)
        self.num_classes, self.class_names = columns.num_classes, columns.class_names
        self.excluded: frozenset[str] = frozenset()  # held out for validation (`hold_out`): never trained on

    @property
    def num_shards(self) -> int:
        return int(self.ds.num_shards)

    def sharding_note(self, world: int) -> str | None:
        """Why processes will not read disjoint shards, when they will not."""
        if world > 1 and self.num_shards % world:
            return (f"{self.origin} has {self.num_shards} shards, not a multiple of {world} processes: every process "
                    f"reads every shard and keeps 1 sample in {world} (write a multiple of {world} shards)")
        return None

    def _rows(self, ds: Any, where: str) -> Iterator[tuple[dict[str, Any], str]]:
        """(row, name) of one pass over `ds`; a damaged shard is one line naming where it happened."""
        name, rows = self.origin, iter(ds)
        for count in itertools.count():
            try:
                row = next(rows)
            except StopIteration:
                return
            except Exception as exc:  # a damaged shard (truncated tar, bad parquet): name where it happened
                raise VitxError(f"cannot read {self.origin} after {name} ({where}): {first_line(exc)}") from None
            name = f"{row.get('__url__', self.origin)}:{row.get('__key__', count)}"
            yield row, name

    def records(self, rank: int, world: int, seed: int) -> Iterator[tuple[Any, Any]]:
        """This process's records, epoch after epoch, forever (held-out records skipped)."""
        from datasets.distributed import split_dataset_by_node

        ds = self.ds.shuffle(seed=seed, buffer_size=self.shuffle_buffer) if self.shuffle_buffer > 0 else self.ds
        ds = split_dataset_by_node(ds, rank=rank, world_size=world)
        for epoch in itertools.count():
            ds.set_epoch(epoch)
            count = 0
            for row, name in self._rows(ds, f"process {rank}"):
                if self.excluded and record_key(row, self.columns.image_key) in self.excluded:
                    continue
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

    def draw(self, limit: int, seed: int) -> tuple["RecordList", list[str]]:
        """The first `limit` records of a seeded shuffle (shard order and a buffer of 2 × `limit`, at least
        1,000): a sample of the whole stream, not its first files, the same at every call. Also their keys."""
        rows = self._rows(self.ds.shuffle(seed=seed, buffer_size=max(1_000, 2 * limit)), "drawing a validation sample")
        records, keys = [], []
        try:
            for row, name in itertools.islice(rows, limit):
                records.append(self.columns.record(row, name, path_names=False))
                keys.append(record_key(row, self.columns.image_key))
        finally:
            rows.close()  # now, while the stream's readers can still close their files
        return RecordList(records, self), keys

    def draw_balanced(self, total: int, seed: int) -> "RecordList":
        """A seeded, class-balanced draw of `total` labelled records: a seeded shuffle of the stream is read until
        every class has its share (`total` spread evenly); a stream that ends first gives per-class counts as
        even as it allows. Only labels are looked at; images stay encoded."""
        k = int(self.num_classes or 0)
        rng = np.random.default_rng([seed, 34])
        want = np.full(k, total // k)
        want[rng.permutation(k)[: total % k]] += 1
        kept: list[list[tuple[Any, Any]]] = [[] for _ in range(k)]
        rows = self._rows(self.ds.shuffle(seed=seed, buffer_size=max(1_000, 4 * total)), "drawing the shots")
        try:
            for read, (row, name) in enumerate(rows):
                if read >= max(10_000, 20 * total):  # a class the stream lacks: stop, share what was read
                    break
                label = self.columns.label(row, name)
                if len(kept[label]) < 2 * want[label] + 1:  # a little spare, for classes the stream runs short of
                    kept[label].append(self.columns.record(row, name, path_names=False))
                if all(len(kept[c]) >= want[c] for c in range(k)):
                    break
        finally:
            rows.close()
        have = [len(c) for c in kept]
        if sum(have) < total:
            raise VitxError(f"{self.origin} holds {sum(have)} labelled images; --shots {total} needs more")
        counts = want if all(h >= w for h, w in zip(have, want)) else balanced_counts(have, total, rng)
        return RecordList([r for c in range(k) for r in kept[c][: counts[c]]], self)

    def hold_out(self, limit: int, seed: int) -> "RecordList | None":
        """A validation sample held out of this (train) stream; training skips it from now on. Candidates are the
        first 4 × `limit` records of a seeded shuffle (`draw`); `limit` of them are held out, stratified by
        class when labelled (a stream smaller than that: a tenth of it). None when the stream is too small.
        (A single shard written class by class, larger than the shuffle buffer, still gives a sample of its
        first classes: write shards in random order.)"""
        pool, keys = self.draw(4 * limit, seed)
        n = limit if len(pool) == 4 * limit else min(limit, len(pool) // 10)
        if n == 0:
            return None
        stratify = self.num_classes and not self.columns.multilabel
        out = stratified_split(pool.labels(), n, [seed, 4244])[1] if stratify else np.arange(n)
        self.excluded = frozenset(keys[i] for i in out)
        return RecordList([pool.records[i] for i in out], self)

    def read_all(self) -> "RecordList":
        """One pass over the whole stream, records held encoded (a streamed test split)."""
        rows = self._rows(self.ds, "reading it whole")
        return RecordList([self.columns.record(row, name, path_names=False) for row, name in rows], self)


class RecordList:
    """Records of `stream` held in memory (encoded), indexable like any source."""

    def __init__(self, records: list[tuple[Any, Any]], stream: StreamSource) -> None:
        self.records, self.origin, self.columns = records, stream.origin, stream.columns
        self.num_classes, self.class_names = stream.num_classes, stream.class_names

    def __len__(self) -> int:
        return len(self.records)

    def labels(self) -> Any:
        return np.asarray([label for _, label in self.records], dtype=np.int64)

    def load(self, index: int) -> tuple[Any, Any]:
        return self.records[index]

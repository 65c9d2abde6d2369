"""A task's splits: trainN / valN / trainNvalN / test, from a local copy, the embedded generator or the hub.

Splits of an N-shot task (VTAB-1k: N = 1000): trainN = the first 4N/5 of the task's train split (VTAB's
train800 = train[:800]); valN = the first N/5 of its validation split (val200); trainNvalN = both; test =
the whole test split. For a VTAB task these are task_adaptation's, task by task (`ta_splits.py`): a copy of
the TFDS splits is cut by the task's own rule; a copy of task_adaptation's splits (the clip-benchmark hub
copies) is read as it is. A copy with no validation split cannot give val200: N/5 images are then drawn with
a fixed seed from the rest of train, and the result says that it is not task_adaptation's. The VTAB-1k folder
release (`data/release.py`) ships the lists itself, and they are used as they are.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..data.sources import HFImageSource
from ..errors import VitxError
from ..data.draws import Subset, drawn_test
from .base import Task
from .custom import custom_splits
from ..data.release import ListSource, is_release, open_release
from .hub import missing_data_message, open_hub_splits
from .ta_splits import RULES, TFDS_SIZES, Slice, definition, few_shot, holds_tfds_splits, splits as ta_splits

SPLIT_SEED = 1000  # carving val from train: fixed, so every run of a task sees the same split


@dataclass
class TaskSplits:
    """The N-shot splits of one task (ImageSources) and where the data came from."""

    task: Task
    train: Any  # trainN
    val: Any  # valN
    test: Any
    origin: str
    release_train_val: Any = None  # the folder release's own train800val200 list, when it is used whole
    record: dict[str, Any] | None = None  # how the splits were made: a data task's draw (custom.py), a VTAB
    # task's definition (`copy_splits`): recorded with every result

    @property
    def source(self) -> str:
        """Where the task's data came from, in words a results table can show (`source_kind`)."""
        return source_kind(self.task, self.origin, self.release_train_val is not None or self._release)

    @property
    def synthetic(self) -> bool:
        """A VTAB task read from vitx's procedural regeneration, not the dataset itself: kept out of VTAB means
        unless asked (`--allow-synthetic`)."""
        return self.task.name.startswith("vtab/") and self.origin == "embedded"

    @property
    def _release(self) -> bool:
        return isinstance(getattr(self.train, "base", None), ListSource)

    @property
    def train_val(self) -> Any:
        """trainN ∪ valN: what the final run trains on."""
        if self.release_train_val is not None:
            return self.release_train_val
        return Concat(self.train, self.val, self.task.num_classes)


class Concat:
    """Two sources one after the other (trainN then valN)."""

    def __init__(self, a: Subset, b: Subset, num_classes: int) -> None:
        self.a, self.b, self.num_classes = a, b, num_classes
        self.class_names = a.class_names

    def __len__(self) -> int:
        return len(self.a) + len(self.b)

    def labels(self) -> np.ndarray:
        return np.concatenate([self.a.labels(), self.b.labels()])

    def load(self, index: int):
        return self.a.load(index) if index < len(self.a) else self.b.load(index - len(self.a))


def task_folder(task: Task, data_dir: str) -> Path:
    """The task's own folder under a suite's --data-dir (`<root>/<release folder name>` or `<root>/<short name>`),
    or --data-dir itself."""
    base = Path(data_dir).expanduser()
    for name in (task.release, task.name.split("/")[-1]):
        if name and (base / name).is_dir():
            return base / name
    return base


def _suite_root(folder: Path, root: Path) -> bool:
    """`root` is a folder of other tasks' copies (a suite's --data-dir) and holds no copy of this task itself."""
    from ..data.streams import is_shards

    return folder == root and root.is_dir() and not is_release(root) and not is_shards(str(root)) \
        and not (root / "dataset_dict.json").exists()


def source_kind(task: Task, origin: str, release: bool) -> str:
    """'VTAB-1k folder release', 'hub copy (<repo or folder>)', 'embedded (synthetic regeneration)', ...."""
    if task.data is not None:
        return f"your data ({task.info['opened'].layout})"
    if release:
        return "VTAB-1k folder release"
    if origin == "embedded":
        return "embedded (synthetic regeneration)" if task.name.startswith("vtab/") else "embedded"
    return f"hub copy ({origin})"


def _pools(task: Task, data_dir: str | None, offline: bool | str | None = None) -> tuple[dict[str, Any], str]:
    """`offline` None: asked of the hub (`_offline`) only where the answer is read, never for a data task or a
    local copy."""
    if task.data is not None:  # a data task: its own splits (custom.py)
        opened = task.info["opened"]
        pools = {"train": opened.split("train"), "val": opened.split("validation"), "test": opened.split("test"),
                 "train_val": opened.split("train_val")}
        return {k: v for k, v in pools.items() if k != "train_val" or v is not None}, task.data
    if data_dir is not None:
        folder = task_folder(task, data_dir)
        if is_release(folder):
            return open_release(folder, task.num_classes), str(folder)
        if task.embedded is None or not _suite_root(folder, Path(data_dir).expanduser()):
            return open_hub_splits(task.hub or task.name, task.name, str(folder)), str(folder)
        # a suite's root that holds other tasks and not this one: an embedded task still runs (synthetic)
    if task.embedded is not None:
        embedded = {split: task.embedded(split) for split in ("train", "val", "test")}, "embedded"
        if task.hub is None or (offline if offline is not None else _offline()):  # offline: the regeneration
            return embedded  # (left out of means)
        try:  # online: the dataset itself; without a network after all, the regeneration
            return open_hub_splits(task.hub, task.name, None), task.hub
        except VitxError:
            return embedded
    if task.hub is None:
        raise VitxError(f"{task.name} has no public copy in VTAB's splits; pass --data-dir with a local copy "
                        f"(train/*.tar and test/*.tar WebDataset shards, or a save_to_disk folder) of {task.tfds}")
    offline = offline if offline is not None else _offline()
    if offline:
        raise VitxError(missing_data_message(task.name, task.hub, offline if isinstance(offline, str) else ""))
    return open_hub_splits(task.hub, task.name, None), task.hub


def _label_map(task: Task, source: Any):
    """Hub copies store some labels raw (dSprites factors); embedded sources already give the task's labels."""
    return task.hub_label if isinstance(source, HFImageSource) and source.label_key == "cls" else None


def _take(task: Task, base: Any, indices: Any) -> Subset:
    """`indices` of `base` as one of `task`'s splits, with the task's classes and labels."""
    return Subset(base, indices, task.num_classes, _label_map(task, base))


def task_class_names(splits: TaskSplits) -> list[str] | None:
    """The names of the task's classes when its data names them (a `ClassLabel` feature, the embedded
    generator's names), else None. Recorded in a transfer's config.json, so that `vitx predict` and `vitx export`
    can label its classes. Labels a task remaps (dSprites' raw factors on the hub) have no names of their own."""
    pool = getattr(splits.train, "base", splits.train)
    names = getattr(pool, "class_names", None)
    if not names or len(names) != splits.task.num_classes or _label_map(splits.task, pool) is not None:
        return None
    return [str(n) for n in names]


def _offline() -> str | None:
    """Why the hub's copies cannot be read now (offline, or the hub unreachable: `vitx.hub`), None when they can."""
    from ..hub import unreachable

    return unreachable(datasets=True)


def open_full_splits(task: Task, data_dir: str | None = None) -> tuple[Subset, Subset, str]:
    """The task's whole train and test splits, with the task's labels (few-shot evaluation draws from these)."""
    pools, origin = _pools(task, data_dir)
    named = {"train": pools["train"], "validation": pools.get("val"), "test": pools.get("test")}
    sizes = _tfds_sizes(task, named, origin) if "train_val" not in pools else None
    if sizes is not None:  # task_adaptation's train and test, cut from the TFDS splits
        parts = ta_splits(task.name.split("/")[-1], sizes)
    elif named["test"] is None:
        raise VitxError(f"{origin} has no test split for {task.name}")
    else:
        parts = {name: Slice(name, 0, len(named[name])) for name in ("train", "test")}
    train, test = (_take(task, named[p.split], np.arange(p.start, p.stop)) for p in (parts["train"], parts["test"]))
    return train, test, origin


def open_task(task: Task, shots: int, data_dir: str | None = None, offline: bool | str | None = None,
              seed: int = 0, test_samples: int = 0) -> TaskSplits:
    """The N-shot splits of `task` from `data_dir`, its embedded generator, or the hub (in that order); a data
    task's are seeded, class-balanced draws (custom.py)."""
    if shots < 2:
        raise VitxError(f"--shots must be at least 2 (train and validation images), got {shots}")
    pools, origin = _pools(task, data_dir, offline)
    if task.data is not None and "train_val" not in pools:
        train, val, test, record = custom_splits(task, shots, seed, test_samples)
        return TaskSplits(task=task, train=train, val=val, test=test, origin=origin, record=record)
    splits = _n_shot_splits(task, pools, origin, shots)
    splits.test = drawn_test(splits.test, test_samples, seed)  # --test-samples: as every command draws them
    return splits


def _n_shot_splits(task: Task, pools: dict[str, Any], origin: str, shots: int) -> TaskSplits:
    """A registered task's trainN / valN / test (the module docstring's rules)."""
    n_train, n_val = shots * 4 // 5, shots - shots * 4 // 5
    if "train_val" in pools:  # the folder release: its own lists, the first N of each for other shot counts
        train, val, test = pools["train"], pools["val"], pools["test"]
        if n_train > len(train) or n_val > len(val):
            raise VitxError(f"--shots {shots} needs {n_train} train and {n_val} validation images; the release's "
                            f"{task.name} lists hold {len(train)} and {len(val)}")
        whole = n_train == len(train) and n_val == len(val)
        return TaskSplits(task=task, train=_take(task, train, np.arange(n_train)),
                          val=_take(task, val, np.arange(n_val)), test=_take(task, test, np.arange(len(test))),
                          origin=origin, release_train_val=pools["train_val"] if whole else None,
                          record={"definition": "the VTAB-1k folder release's own lists (task_adaptation's splits)",
                                  "exact": True})
    return copy_splits(task, pools, origin, n_train, n_val)


def _tfds_sizes(task: Task, named: dict[str, Any], origin: str) -> dict[str, int] | None:
    """The split sizes of a copy of a VTAB task that holds the TFDS splits (known by their sizes), which
    task_adaptation's rule then cuts; None for any other copy."""
    short = task.name.split("/")[-1]
    if not task.name.startswith("vtab/") or short not in RULES or origin == "embedded":
        return None
    sizes = {k: len(v) for k, v in named.items() if v is not None}
    return sizes if holds_tfds_splits(short, sizes) else None


def carved_val(size: int, n_train: int, n_val: int) -> np.ndarray:
    """valN for a copy with no validation split: n_val of train[n_train:], drawn with a fixed seed."""
    rest = np.arange(n_train, size)
    return np.sort(np.random.default_rng([SPLIT_SEED, n_train]).choice(rest, n_val, replace=False))


def copy_splits(task: Task, pools: dict[str, Any], origin: str, n_train: int, n_val: int) -> TaskSplits:
    """trainN / valN / test from a copy of a task's data. A VTAB task's follow task_adaptation's definition of
    the task (`ta_splits.py`): a copy of the TFDS splits is cut by the task's rule; a copy of task_adaptation's
    own train / val / test (clip-benchmark's hub copies, vitx's regeneration) gives the first N of each. The
    record says which definition was applied and whether valN is task_adaptation's."""
    short = task.name.split("/")[-1]
    vtab = task.name.startswith("vtab/") and short in RULES
    named = {"train": pools["train"], "validation": pools.get("val"), "test": pools.get("test")}
    official = definition(short) if vtab else ""
    sizes = _tfds_sizes(task, named, origin)
    if sizes is not None:  # the TFDS splits: cut by the task's rule (never beyond a slice: Slice.head)
        cut = few_shot(short, sizes, n_train, n_val)
        parts = {name: _take(task, named[part.split], np.arange(part.start, part.stop)) for name, part in cut.items()}
        record = {"definition": f"task_adaptation's: {official}", "copy": "the TFDS splits",
                  "train": str(cut["train"]), "val": str(cut["val"]), "test": str(cut["test"]), "exact": True}
        return TaskSplits(task=task, origin=origin, record=record, **parts)
    # the task's own train / val / test (for VTAB, task_adaptation's, as the hub copies hold them): the first N
    train, val, test = named["train"], named["validation"], named["test"]
    if test is None:
        held = (f": a copy holds either the TFDS splits (sizes {TFDS_SIZES[short]}) or task_adaptation's train and "
                "test (as the hub copies do)") if vtab else ""
        raise VitxError(f"{origin} has no test split for {task.name}{held}")
    if n_train > len(train) or (val is not None and n_val > len(val)) or (val is None and n_train + n_val > len(train)):
        raise VitxError(f"--shots {n_train + n_val} needs {n_train} train and {n_val} validation images; {task.name} "
                        f"has {len(train)} train" + (f" and {len(val)} validation" if val is not None else ""))
    record = {"copy": "task_adaptation's train / val / test splits", "train": f"train[:{n_train}]",
              "test": f"test[:{len(test)}]"}
    if val is not None:
        val_idx, val_base = np.arange(n_val), val
        record.update(definition=f"task_adaptation's: {official}", val=f"validation[:{n_val}]", exact=True)
    else:
        val_idx, val_base = carved_val(len(train), n_train, n_val), train
        record.update(definition=f"train and test are task_adaptation's ({official}); val{n_val} is NOT: the copy "
                                 f"has no validation split, so {n_val} images were drawn (seed {SPLIT_SEED}) from "
                                 f"train[{n_train}:]. The VTAB-1k folder release (--data-dir) has the official lists",
                      val=f"{n_val} drawn from train[{n_train}:]", exact=False)
    return TaskSplits(task=task, origin=origin, record=record if vtab and origin != "embedded" else None,
                      train=_take(task, train, np.arange(n_train)), val=_take(task, val_base, val_idx),
                      test=_take(task, test, np.arange(len(test))))

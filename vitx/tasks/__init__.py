"""Transfer tasks, registered by name (`vtab/dtd`, ...): which data, which labels, which splits.

Splits of an N-shot task (VTAB-1k: N = 1000): trainN = the first 4N/5 of the task's train split (VTAB's
train800 = train[:800]); valN = the first N/5 of its validation split (val200), or, for copies without one
(the hub copies hold train and test only), N/5 images drawn with a fixed seed from the rest of train;
trainNvalN = both; test = the whole test split.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..data.sources import HFImageSource
from ..errors import VitxError
from ..registry import TASKS
from . import vtab  # noqa: F401  (registers the VTAB-1k tasks)
from . import embedded  # noqa: F401,E402  (then the embedded ones)
from .base import SubsetSource, Task
from .hub import missing_data_message, open_hub_splits
from .vtab import GROUPS

__all__ = ["GROUPS", "SubsetSource", "Task", "TaskSplits", "get_task", "open_full_splits", "open_task", "select_tasks"]

SPLIT_SEED = 1000  # carving val from train: fixed, so every run of a task sees the same split


def get_task(name: str) -> Task:
    """The registered task (a `Task`, or a registered function that returns one)."""
    obj = TASKS.get(name).obj
    task = obj if isinstance(obj, Task) else obj()
    if not isinstance(task, Task):
        raise VitxError(f"task '{name}' is registered as {type(task).__name__}, not a vitx.tasks.Task")
    return task


def select_tasks(spec: str) -> list[Task]:
    """A task name, `<suite>/all`, `<suite>/<group>` (natural, specialized, structured) or an fnmatch pattern."""
    suite, _, rest = spec.partition("/")
    names = TASKS.names()
    if rest == "all":
        chosen = [n for n in names if n.startswith(f"{suite}/")]
    elif rest in GROUPS:
        chosen = [n for n in names if n.startswith(f"{suite}/") and get_task(n).group == rest]
    elif any(c in spec for c in "*?["):
        chosen = TASKS.names(spec)
    else:
        return [get_task(spec)]
    if not chosen:
        raise VitxError(f"no task matches '{spec}'; see `vitx tasks`")
    return [get_task(n) for n in chosen]


@dataclass
class TaskSplits:
    """The N-shot splits of one task (ImageSources) and where the data came from."""

    task: Task
    train: Any  # trainN
    val: Any  # valN
    test: Any
    origin: str

    @property
    def train_val(self) -> SubsetSource:
        """trainN ∪ valN: what the final run trains on."""
        return _Concat(self.train, self.val, self.task.num_classes)


class _Concat(SubsetSource):
    def __init__(self, a: SubsetSource, b: SubsetSource, num_classes: int) -> None:
        self.a, self.b, self.num_classes = a, b, num_classes
        self.class_names = a.class_names

    def __len__(self) -> int:
        return len(self.a) + len(self.b)

    def labels(self) -> np.ndarray:
        return np.concatenate([self.a.labels(), self.b.labels()])

    def load(self, index: int):
        return self.a.load(index) if index < len(self.a) else self.b.load(index - len(self.a))


def _pools(task: Task, data_dir: str | None, offline: bool) -> tuple[dict[str, Any], str]:
    if data_dir is not None:
        return open_hub_splits(task.hub or task.name, task.name, data_dir), data_dir
    if task.embedded is not None:
        return {split: task.embedded(split) for split in ("train", "val", "test")}, "embedded"
    if task.hub is None:
        raise VitxError(f"{task.name} has no public copy in VTAB's splits; pass --data-dir with a local copy "
                        f"(train/*.tar and test/*.tar WebDataset shards, or a save_to_disk folder) of {task.tfds}")
    if offline:
        raise VitxError(missing_data_message(task.name, task.hub))
    return open_hub_splits(task.hub, task.name, None), task.hub


def _label_map(task: Task, source: Any):
    """Hub copies store some labels raw (dSprites factors); embedded sources already give the task's labels."""
    if isinstance(source, HFImageSource) and source.label_key == "cls":
        return task.hub_label
    return None


def _offline() -> bool:
    import os

    return any(os.environ.get(k, "") in ("1", "true", "True") for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def open_full_splits(task: Task, data_dir: str | None = None) -> tuple[SubsetSource, SubsetSource, str]:
    """The task's whole train and test splits, with the task's labels (few-shot evaluation draws from these)."""
    pools, origin = _pools(task, data_dir, _offline())
    train, test = pools["train"], pools["test"]
    k = task.num_classes
    return (SubsetSource(train, np.arange(len(train)), k, _label_map(task, train)),
            SubsetSource(test, np.arange(len(test)), k, _label_map(task, test)), origin)


def open_task(task: Task, shots: int, data_dir: str | None = None, offline: bool | None = None) -> TaskSplits:
    """The N-shot splits of `task` from `data_dir`, its embedded generator, or the hub (in that order)."""
    if offline is None:
        offline = _offline()
    if shots < 2:
        raise VitxError(f"--shots must be at least 2 (train and validation images), got {shots}")
    pools, origin = _pools(task, data_dir, offline)
    train, val, test = pools["train"], pools.get("val"), pools["test"]
    n_train = shots * 4 // 5
    n_val = shots - n_train
    if val is not None:
        if n_train > len(train) or n_val > len(val):
            raise VitxError(f"--shots {shots} needs {n_train} train and {n_val} validation images; {task.name} has "
                            f"{len(train)} and {len(val)}")
        val_idx = np.arange(n_val)
        val_base = val
    else:
        if shots > len(train):
            raise VitxError(f"--shots {shots} is more than {task.name}'s train split holds ({len(train)} images)")
        rest = np.arange(n_train, len(train))
        val_idx = np.sort(np.random.default_rng([SPLIT_SEED, n_train]).choice(rest, n_val, replace=False))
        val_base = train
    k = task.num_classes
    return TaskSplits(
        task=task,
        train=SubsetSource(train, np.arange(n_train), k, _label_map(task, train)),
        val=SubsetSource(val_base, val_idx, k, _label_map(task, val_base)),
        test=SubsetSource(test, np.arange(len(test)), k, _label_map(task, test)),
        origin=origin,
    )

"""A suite as a list of independent work items, and their partition into shards.

An item is one run of the protocol that writes only its own folder and leaves a marker when it is done: a
task's sweep point (`sweep/lr<lr>_steps<n>/point.json`), the final run of one seed (`final/final.json`,
`final-seed<s>/final.json`), or a closed-form fit (the task's result.json). The list and the partition are a
function of the settings and the tasks alone, so every process of a suite computes the same ones.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..tasks import Task
from .config import TransferConfig
from .folders import final_dir, point_dir

SWEEP, FINAL, CLOSED = "sweep", "final", "closed"
MARKERS = {SWEEP: "point.json", FINAL: "final.json", CLOSED: "result.json"}


@dataclass(frozen=True)
class Item:
    """One work item. A final run's `lr` is None (and its `steps` the longest swept, an upper bound) until the
    selection it waits for chooses them; a fixed one (--no-sweep) has its own."""

    task: str
    kind: str  # SWEEP, FINAL or CLOSED
    folder: Path  # what it writes: the sweep point's run, the final run, the task's folder (closed form)
    output: Path  # the transfer's --output-dir
    steps: int
    lr: float | None = None
    seed: int | None = None
    index: int = 0  # a sweep point's place in the grid; a final run's seed's place in --seeds (0: final/)

    @property
    def key(self) -> str:
        """Its folder under --output-dir (`vtab-dtd/sweep/lr0.01_steps500`, `vtab-dtd/final-seed1`), or the task's
        folder and `closed-form`: unique in a suite, the same in every process."""
        where = Path(os.path.relpath(self.folder, self.output)).as_posix()  # (a task folder given elsewhere: ../x)
        return f"{where}/closed-form" if self.kind == CLOSED else where

    @property
    def marker(self) -> Path:
        """The file whose presence says the item is done."""
        return self.folder / MARKERS[self.kind]

    @property
    def stage(self) -> int:
        """Sweep points first; final runs (which may wait for a selection) after."""
        return 0 if self.kind == SWEEP else 1

    def describe(self) -> str:
        if self.kind == SWEEP:
            return f"{self.task} sweep lr {self.lr:g} × {self.steps}"
        if self.kind == CLOSED:
            return f"{self.task} closed-form fit"
        point = f"lr {self.lr:g} × {self.steps}" if self.lr is not None else "the chosen lr × steps"
        return f"{self.task} final ({point}) seed {self.seed}"


def selection_mode(cfg: TransferConfig, tasks: int, closed_form: bool) -> str:
    """How the final runs get their point: `closed` (no training), `fixed` (--no-sweep: --lr × --steps), `suite`
    (one point for all, from every task's sweep: the paper's) or `task` (each task's best)."""
    if closed_form:
        return "closed"
    if not cfg.sweep:
        return "fixed"
    return "suite" if cfg.select == "suite" and tasks > 1 else "task"


def work_list(cfg: TransferConfig, tasks: list[Task], folders: dict[str, Path], mode: str) -> list[Item]:
    """Every item of the suite in the order one process runs them: each task's sweep points (in `cfg.points()`
    order), then each task's final run per seed; for a closed-form method one fit per task."""
    output = Path(cfg.output_dir)
    if mode == "closed":
        return [Item(t.name, CLOSED, folders[t.name], output, 0) for t in tasks]
    items = []
    if mode in ("suite", "task"):
        items += [Item(t.name, SWEEP, point_dir(folders[t.name], lr, steps), output, steps, lr, cfg.seed, i)
                  for t in tasks for i, (lr, steps) in enumerate(cfg.points(), 1)]
    lr, steps = (cfg.lr, cfg.steps) if mode == "fixed" else (None, max(cfg.sweep_steps))
    seeds = cfg.seeds or [cfg.seed]
    items += [Item(t.name, FINAL, final_dir(folders[t.name], i, seed), output, steps, lr, seed, i)
              for t in tasks for i, seed in enumerate(seeds)]
    return items


def partition(items: list[Item], count: int) -> list[int]:
    """Each item's shard (0 ≤ shard < `count`): in each stage (sweep points, then final runs, which wait for
    the sweep) the longest item first to the shard with the least work in the stage so far (steps; ties: the
    least in all, then the lower shard): longest-processing-time first. Deterministic: ties between items go by
    key."""
    shard, total = [0] * len(items), [0] * count
    for stage in sorted({i.stage for i in items}):
        load = [0] * count
        order = sorted((n for n, i in enumerate(items) if i.stage == stage), key=lambda n: (-items[n].steps,
                                                                                             items[n].key))
        for n in order:
            shard[n] = min(range(count), key=lambda s: (load[s], total[s], s))
            load[shard[n]] += max(items[n].steps, 1)
            total[shard[n]] += max(items[n].steps, 1)
    return shard


def shard_of(items: list[Item], index: int, count: int) -> list[Item]:
    """The items of shard `index` of `count`, in work-list order."""
    return [item for item, s in zip(items, partition(items, count)) if s == index]


__all__ = ["CLOSED", "FINAL", "Item", "SWEEP", "partition", "selection_mode", "shard_of", "work_list"]

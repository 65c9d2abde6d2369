"""A process's share of the work list, run: the first item in order that is not done, not held by another
live process and, for a final run, whose point can be chosen, is claimed and run; again until none is left.
Final runs that wait for sweep points not on disk yet end the process with SelectionPending (exit 4), which
names them, or with --wait are waited for. Items other processes hold are theirs: the process ends without
them (the last to finish writes the summary)."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
from accelerate import PartialState
from accelerate.state import AcceleratorState
from accelerate.utils import broadcast_object_list
from rich.console import Console

from ..errors import SelectionPending, VitxError
from .assemble import Assembler
from .claims import Claims
from .items import CLOSED, FINAL, Item, partition
from .suite import Suite
from .work import Worker

POLL = (1.0, 15.0)  # seconds between looks at the disk while waiting: the first, the longest (× 1.5 each look)
SHOWN = 4  # items named in one line


@dataclass
class Step:
    """What the process does next: run an item (with its final run's choice), wait, stop for a selection that
    cannot be made yet (`pending`), or stop."""

    kind: str
    item: Item | None = None
    choice: dict[str, Any] | None = None
    message: str = ""


def _launch() -> PartialState:
    """The launch's processes, with their process group up: a run's end (Accelerator.end_training) takes it
    down, and the next run's Accelerator brings it up again; between two runs, this does."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.distributed.is_initialized():
        AcceleratorState._reset_state(reset_partial_state=True)
    return PartialState(cpu=not torch.cuda.is_available())


def agree(decide: Callable[[], Step]) -> Step:
    """The main process's decision, for every process of a launch (`accelerate launch`: they run each item
    together, so they must take the same one); alone, the decision itself."""
    state = _launch()
    if state.num_processes == 1:
        return decide()
    box: list[Any] = [None]
    if state.is_main_process:
        try:
            box[0] = decide()
        except VitxError as exc:  # every process stops with the main one's line, none waits for it
            box[0] = exc
    broadcast_object_list(box, from_process=0)
    if isinstance(box[0], VitxError):
        raise box[0]
    return box[0]


def together() -> None:
    """Wait until every process of a launch is here (after the main one has written what they read next)."""
    _launch().wait_for_everyone()


def _listed(keys: list[str]) -> str:
    return ", ".join(keys[:SHOWN]) + (f", ... ({len(keys) - SHOWN} more)" if len(keys) > SHOWN else "")


class Scheduler:
    """Runs `mine` (this process's items, in work-list order). `claims` is None in the processes of a launch
    other than the main one (which claims for all); `shards`: (I, N) of --shard, to say where missing items run."""

    def __init__(self, suite: Suite, worker: Worker, assembler: Assembler, claims: Claims | None, mine: list[Item],
                 wait: bool, console: Console, shards: tuple[int, int] = (0, 1)) -> None:
        self.suite, self.worker, self.assembler, self.claims = suite, worker, assembler, claims
        self.mine, self.wait, self.console, self.shards = mine, wait, console, shards
        self.noted: set[str] = set()
        self.ran: list[Item] = []

    def say(self, line: str) -> None:
        self.console.print(line, soft_wrap=True, markup=False)

    def run(self) -> list[Item]:
        """Run until this process's items are done or held by others; the items it ran."""
        shown, pause = "", POLL[0]
        while True:
            step = agree(self.next_step)
            if step.kind == "run":
                self._run(step)
                pause = POLL[0]
            elif step.kind == "wait":
                if step.message != shown:
                    self.say(step.message)
                    shown = step.message
                time.sleep(pause)
                pause = min(pause * 1.5, POLL[1])
            elif step.kind == "pending":
                raise SelectionPending(step.message)
            else:
                if step.message:
                    self.say(step.message)
                return self.ran

    def _run(self, step: Step) -> None:
        item, points = step.item, len(self.suite.cfg.points())
        assert item is not None
        if self.claims is None:
            self.worker.run(item, step.choice, points)
        else:
            with self.claims.holding(item.key):
                self.worker.run(item, step.choice, points)
        self.ran.append(item)
        if item.kind == CLOSED:  # its result is the item's own, said as it was written
            self.assembler.said.add(item.task)
        elif item.kind == FINAL:  # the task's result as soon as its last item is on disk
            self.assembler.task_result(item.task)

    def next_step(self) -> Step:
        """The next item to run, claimed; else why there is none (main process only)."""
        suite, claims = self.suite, self.claims
        assert claims is not None
        blocked: list[Item] = []
        held: dict[str, str] = {}
        for item in (i for i in self.mine if not suite.done(i)):
            choice = None
            if item.kind == FINAL:
                choice = suite.choice(item.task, self.console)
                if choice is None:
                    blocked.append(item)
                    continue
            holder = claims.holder(item.key)
            if holder is not None or not claims.take(item.key):
                held[item.key] = str(holder or claims.holder(item.key) or "another process")
                if item.key not in self.noted:
                    self.noted.add(item.key)
                    claims.log("skipped", item.key, f"(held by {held[item.key]})")
                    self.say(f"{item.key}: running in {held[item.key]}; not here")
                continue
            if suite.done(item):  # finished by another process between our look and our claim
                claims.release(item.key, "skipped")
                continue
            return Step("run", item, choice)
        if blocked:
            return Step("wait" if self.wait else "pending", message=self._pending(blocked))
        if held:
            return Step("stop", message=f"{len(held)} item(s) of this process's share are running elsewhere: "
                                        f"{_listed([f'{k} ({h})' for k, h in held.items()])}; they finish there")
        return Step("stop")

    def _pending(self, blocked: list[Item]) -> str:
        """One line: which final runs wait for which sweep points, and where those run."""
        suite, claims = self.suite, self.claims
        assert claims is not None
        needed = list({i.key: i for b in blocked for i in suite.needs(b)}.values())
        index, count = self.shards
        shard = dict(zip((i.key for i in suite.items), partition(suite.items, count))) if count > 1 else {}
        where = []
        for item in needed:
            holder = claims.holder(item.key)
            where.append(f"{item.key} (running: {holder})" if holder else
                         f"{item.key} (shard {shard[item.key]}/{count})" if shard else item.key)
        tasks = sorted({b.task for b in blocked})
        what = "the suite's selection" if suite.mode == "suite" else "their task's best sweep point"
        head = (f"{len(blocked)} final run(s) ({_listed(tasks)}) need {what}, which waits for {len(needed)} sweep "
                f"point(s) not on disk yet: {_listed(where)}")
        if self.wait:
            return f"{head}; waiting for them"
        return f"{head}; run this again once they are done, or pass --wait to wait for them"


__all__ = ["POLL", "Scheduler", "Step", "agree", "together"]

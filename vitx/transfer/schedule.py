"""A process's share of the work list, run: the first item in order that is not done, not held by another
live process and, for a final run, whose point can be chosen, is leased and run; again until none is left.
Final runs that wait for sweep points not on disk yet end the process with SelectionPending (exit 4), which
names them, or with --wait are waited for. Items other processes hold are theirs: held by a process seen alive
on this machine, the process ends without them (the last to finish writes the summary); leased from another
machine, whose process may have died, they end it with exit 4 too, or with --wait are waited for (and taken
over once their lease is stale). A sweep point that failed in its process is not waited for."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from accelerate.utils import broadcast_object_list
from rich.console import Console

from ..console import say
from ..errors import SelectionPending, VitxError
from ..runner.launch import process_state
from ..runner.preemption import check
from .assemble import Assembler
from .leases import STALE_AFTER, LeaseLost, Leases, Holder
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


def agree(decide: Callable[[], Step]) -> Step:
    """The main process's decision, for every process of a launch (`accelerate launch`: they run each item
    together, so they must take the same one); alone, the decision itself."""
    state = process_state()  # the launch's processes, their process group up
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
    process_state().wait_for_everyone()


def _listed(keys: list[str]) -> str:
    return ", ".join(keys[:SHOWN]) + (f", ... ({len(keys) - SHOWN} more)" if len(keys) > SHOWN else "")


class Scheduler:
    """Runs `mine` (this process's items, in work-list order). `leases` is None in the processes of a launch
    other than the main one (which leases for all); `shards`: (I, N) of --shard, to say where missing items run."""

    def __init__(self, suite: Suite, worker: Worker, assembler: Assembler, leases: Leases | None, mine: list[Item],
                 wait: bool, console: Console, shards: tuple[int, int] = (0, 1)) -> None:
        self.suite, self.worker, self.assembler, self.leases = suite, worker, assembler, leases
        self.mine, self.wait, self.console, self.shards = mine, wait, console, shards
        self.noted: set[str] = set()
        self.ran: list[Item] = []

    def say(self, line: str) -> None:
        say(self.console, line)

    def run(self) -> list[Item]:
        """Run until this process's items are done or held by others; the items it ran. A lease taken and not
        run (the process stopped in between) is given back, however the process stops."""
        try:
            return self._steps()
        finally:
            if self.leases is not None:
                self.leases.release_all()

    def _steps(self) -> list[Item]:
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
        if self.leases is None:
            self.worker.run(item, step.choice, points)
        else:
            try:
                with self.leases.holding(item.key):
                    self.worker.run(item, step.choice, points, lambda: self._confirm(item))
            except LeaseLost:  # (said when it was found) its new holder finishes it
                return
        self.ran.append(item)
        if item.kind == CLOSED:  # its result is the item's own, said as it was written
            self.assembler.said.add(item.task)
        elif item.kind == FINAL:  # the task's result as soon as its last item is on disk
            self.assembler.task_result(item.task)

    def _confirm(self, item: Item) -> None:
        """Before an item's marker is written: its lease must still be this process's (a process paused past
        STALE_AFTER may have lost it to one that runs the item again in the same folder)."""
        assert self.leases is not None
        if not self.leases.still_mine(item.key):
            raise LeaseLost(f"{item.key}: this process's lease was taken over; the item is its new holder's")

    def next_step(self) -> Step:
        """The next item to run, leased; else why there is none (main process only)."""
        suite, leases = self.suite, self.leases
        assert leases is not None
        blocked: list[Item] = []
        here: dict[str, str] = {}  # items held by processes seen alive on this machine: they finish there
        away: dict[str, Holder] = {}  # ... by processes known only by their heartbeat (another machine)
        for item in (i for i in self.mine if not suite.done(i)):
            choice = None
            if item.kind == FINAL:
                choice = suite.choice(item.task, self.console)
                if choice is None:
                    blocked.append(item)
                    continue
            holder = leases.holder(item.key)
            if holder is None:
                self._stop_if_asked()
            if holder is None and leases.take(item.key):
                if suite.done(item):  # finished by another process between our look and our lease
                    leases.release(item.key, "skipped")
                    continue
                return Step("run", item, choice)
            holder = holder or leases.holder(item.key)  # (or won by another process just now)
            if holder is None or leases.alive_here(holder):
                here[item.key] = str(holder or "another process")
            else:
                away[item.key] = holder
            self._note(item.key, str(holder or "another process"))
        if away and not self.wait:  # nobody may be running them: not done, and not yet ours to take
            return Step("pending", message=self._away(away))
        if blocked:
            return self._blocked(blocked)
        if away:
            return Step("wait", message=self._away(away))
        if here:
            return Step("stop", message=f"{len(here)} item(s) of this process's share are running elsewhere: "
                                        f"{_listed([f'{k} ({h})' for k, h in here.items()])}; they finish there")
        return Step("stop")

    def _stop_if_asked(self) -> None:
        """No item is leased after a stop signal: one that came as the last item finished (at its last step,
        which just finishes) stops the process before it takes another."""
        last = f"{self.ran[-1].key} finished (it is on disk)" if self.ran else "this process began"
        check(f"came as {last}: no further item started; run the same command with --resume to continue the suite")

    def _note(self, key: str, holder: str) -> None:
        """An item of this process's share held by another: in the journal and said, once."""
        if key not in self.noted:
            assert self.leases is not None
            self.noted.add(key)
            self.leases.log("skipped", key, f"(held by {holder})")
            self.say(f"{key}: running in {holder}; not here")

    def _away(self, away: dict[str, Holder]) -> str:
        """One line: items of this share leased by processes this one cannot see (on another machine, or behind
        an unreadable lease), which may have died: taken over once their heartbeat is STALE_AFTER old."""
        def shown(key: str, holder: Holder) -> str:
            age = holder.age()
            beat = f"last heartbeat {age:.0f} s ago; " if age is not None and not self.wait else ""
            return f"{key} ({holder}, {beat}taken over after {STALE_AFTER:.0f} s)"

        head = (f"{len(away)} item(s) of this process's share are leased by processes on other machines: "
                f"{_listed([shown(k, h) for k, h in away.items()])}")
        if self.wait:
            return f"{head}; waiting for them to finish, or to take them over"
        return f"{head}; run this again once they are done or stale, or pass --wait to wait for them"

    def _blocked(self, blocked: list[Item]) -> Step:
        """Final runs whose choice waits for sweep points: wait for them (with --wait, or where all are this
        process's share, which its siblings of --jobs or other live processes are running), or stop, pending.
        A sweep point that failed in its process is not waited for: nobody runs it until its shard is rerun."""
        suite, leases = self.suite, self.leases
        assert leases is not None
        needed = list({i.key: i for b in blocked for i in suite.needs(b)}.values())
        failed = leases.failed([i.key for i in needed if leases.holder(i.key) is None])
        ours = {i.key for i in self.mine}
        wait = not failed and (self.wait or all(i.key in ours for i in needed))
        return Step("wait" if wait else "pending", message=self._pending(blocked, needed, failed, wait))

    def _pending(self, blocked: list[Item], needed: list[Item], failed: dict[str, str], wait: bool) -> str:
        """One line: which final runs wait for which sweep points, and where those run."""
        suite, leases = self.suite, self.leases
        assert leases is not None
        index, count = self.shards
        shard = dict(zip((i.key for i in suite.items), partition(suite.items, count))) if count > 1 else {}
        where = []
        for item in needed:
            holder = leases.holder(item.key)
            where.append(f"{item.key} (running: {holder})" if holder else
                         f"{item.key} (failed in {failed[item.key]})" if item.key in failed else
                         f"{item.key} (shard {shard[item.key]}/{count})" if shard else item.key)
        tasks = sorted({b.task for b in blocked})
        what = "the suite's selection" if suite.mode == "suite" else "their task's best sweep point"
        head = (f"{len(blocked)} final run(s) ({_listed(tasks)}) need {what}, which waits for {len(needed)} sweep "
                f"point(s) not on disk yet: {_listed(where)}")
        if failed:
            return (f"{head}; {len(failed)} of them failed in their process (see its log): run its shard again, "
                    "with --resume")
        if wait:
            return f"{head}; waiting for them"
        return f"{head}; run this again once they are done, or pass --wait to wait for them"


__all__ = ["POLL", "Scheduler", "Step", "agree", "together"]

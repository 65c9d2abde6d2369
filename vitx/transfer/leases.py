"""Leases on work items in a shared --output-dir, so that two processes never run the same item.

A lease is `<output>/leases/<item>.lease`, created atomically and whole (of two processes one gets it)
and holding its holder: host, process id (and the process's start time, which a reused id does not share),
the host's boot id and the process's pid namespace (two containers can share a host name and a process id),
when it began. While the item runs a heartbeat thread checks that the lease still names its holder and touches
it every HEARTBEAT seconds; it is deleted when the item ends, done or failed, and only by its holder. A lease
whose holder is gone is stale and taken over: on the same machine (host, boot and pid namespace alike), when
its process no longer exists; otherwise when its heartbeat is older than STALE_AFTER seconds. A holder that was
paused that long finds its lease taken over: it says so, and what it ran of the item is not kept. Every lease
taken, taken over, lost, finished or given up is one line of `<output>/leases.log` (time, holder, event, item).
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from ..safe_io import create_whole
from ..errors import Interrupted, Preempted, VitxError
from ..runner.preemption import Stop

HEARTBEAT = 30.0  # seconds between touches of a held lease
STALE_AFTER = 300.0  # a lease untouched for this long (from another machine, or unreadable) is its holder's, dead
FOLDER, JOURNAL = "leases", "leases.log"
FORMER_FOLDER = "claims"  # what an earlier vitx called the leases folder


class LeaseLost(VitxError):
    """This process's lease on an item was taken over (it was paused, or cut off from the disk, past STALE_AFTER):
    the item is another process's now, and what this one ran of it is not kept."""


def _proc_start(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, /proc's field 22): a reused id has another. None
    where there is no /proc or no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()[19]


def _boot_id() -> str | None:
    """This boot of the machine's kernel (Linux): containers on one host share it, two hosts never do."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def _pid_namespace() -> int | None:
    """This process's pid namespace (Linux): process ids mean the same process only inside one."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


@dataclass(frozen=True)
class Holder:
    """Who holds a lease. `pid` -1: a lease that could not be read (its `beat` None when not even its time)."""

    host: str
    pid: int
    proc_start: str | None = None
    began: str = ""
    boot: str | None = None  # the host's boot id
    pid_ns: int | None = None  # the holder's pid namespace
    beat: float | None = None  # the lease file's last touch (its mtime), when it was read

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}" if self.pid >= 0 else "an unreadable lease"

    @property
    def unknown(self) -> bool:
        return self.pid < 0

    @property
    def ident(self) -> tuple[Any, ...]:
        """What tells one holding process from every other (a lease names its holder when these match)."""
        return self.host, self.pid, self.began, self.boot, self.pid_ns

    def age(self) -> float | None:
        """Seconds since the last heartbeat; None when the lease's time could not be read."""
        return None if self.beat is None else time.time() - self.beat

    def beside(self, other: "Holder") -> bool:
        """Whether `other` runs on this machine, where its process id can be looked up: the same host, boot and
        pid namespace (each known: a container sharing the host's name is not enough)."""
        return (self.host == other.host and self.boot is not None and self.boot == other.boot
                and self.pid_ns is not None and self.pid_ns == other.pid_ns)

    @classmethod
    def me(cls) -> "Holder":
        return cls(socket.gethostname(), os.getpid(), _proc_start(os.getpid()),
                   datetime.now(timezone.utc).isoformat(timespec="seconds"), _boot_id(), _pid_namespace())

    def record(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "proc_start": self.proc_start, "began": self.began,
                "boot": self.boot, "pid_ns": self.pid_ns}


def _stopped(exc: BaseException) -> bool:
    """Whether `exc` is a stop asked for (a preemption, Ctrl-C), not a failure of the item."""
    return isinstance(exc, (Preempted, Interrupted, KeyboardInterrupt, Stop))


class Leases:
    """This process's leases in one --output-dir. `say`: where a line for people goes (the console)."""

    def __init__(self, output: Path, say: Any = print) -> None:
        self.folder, self.journal = Path(output) / FOLDER, Path(output) / JOURNAL
        self.say = say
        self.me = Holder.me()
        self.held: dict[Path, str] = {}  # lease file → item
        self.lost: set[Path] = set()  # held, then taken over by another process
        self._lock = threading.Lock()
        self._beating: threading.Event | None = None
        former = Path(output) / FORMER_FOLDER
        if any(former.glob("*.claim")) if former.is_dir() else False:
            say(f"note: {former} holds items taken by processes of an earlier vitx (its leases were called claims): "
                "this process does not see them as held, so make sure none of those processes still runs")

    def path(self, key: str) -> Path:
        return self.folder / (key.replace("/", "__") + ".lease")

    def _read(self, path: Path) -> Holder | None:
        """The holder in a lease file; None when there is none (or it vanished as it was read)."""
        try:
            beat = path.stat().st_mtime
        except FileNotFoundError:
            return None
        except OSError:  # (a moment's trouble with the disk: nothing known, not even its age)
            return Holder("?", -1)
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        except OSError:
            return Holder("?", -1)
        try:
            data = json.loads(text)
            return Holder(str(data["host"]), int(data["pid"]), data.get("proc_start"), str(data.get("began", "")),
                          data.get("boot"), data.get("pid_ns"), beat)
        except (ValueError, KeyError, TypeError):  # (O_EXCL's lease being written, or torn by a kill)
            return Holder("?", -1, beat=beat)

    def stale(self, holder: Holder) -> str | None:
        """Why `holder`'s lease is stale, or None while it may still be working."""
        age = holder.age()
        if holder.unknown:  # being written for a moment, torn by a kill long ago, or not readable just now
            return f"its lease file is torn, untouched for {age:.0f} s" if age is not None and age > STALE_AFTER \
                else None
        if self.me.beside(holder):  # its process id can be looked up here
            if holder.pid == self.me.pid:  # (a lease this process holds is never looked at)
                return "left by this process"
            if not _alive(holder.pid):
                return f"process {holder.pid} is gone"
            if holder.proc_start is not None and _proc_start(holder.pid) not in (None, holder.proc_start):
                return f"process {holder.pid} is another process now"
            return None
        return f"no heartbeat for {age:.0f} s" if age is not None and age > STALE_AFTER else None

    def alive_here(self, holder: Holder) -> bool:
        """Whether `holder` is a process seen alive on this machine (not only a fresh heartbeat from elsewhere)."""
        return self.me.beside(holder) and self.stale(holder) is None

    def holder(self, key: str) -> Holder | None:
        """The live process that holds the item (not this one), or None: unleased, stale, or ours."""
        path = self.path(key)
        found = self._read(path)
        if found is None or path in self.held or self.stale(found) is not None:
            return None
        return found

    def take(self, key: str) -> bool:
        """Lease the item: True when this process now holds it; False when a live process does (or won the
        race for it). A stale lease is taken over, and said so."""
        path = self.path(key)
        if path in self.held:
            return True
        for _ in range(2):  # twice: a lease released between our try and our look
            if self._create(path, key):
                self.log("taken", key)
                return True
            found = self._read(path)
            if found is None:
                continue
            reason = self.stale(found)
            if reason is None or not self._move_out(path, found) or not self._create(path, key):
                return False
            self.log("taken-over", key, f"from {found} ({reason})")
            self.say(f"{key}: took over the lease of {found} ({reason})")
            return True
        return False

    def still_mine(self, key: str) -> bool:
        """Whether the item's lease still names this process, read again: a process paused (or cut off from the
        disk) past STALE_AFTER finds it taken over, says so once, and must not finish the item."""
        path = self.path(key)
        with self._lock:
            if path not in self.held:
                return False
        found = self._read(path)
        if found is not None and (found.ident == self.me.ident or (found.unknown and found.beat is None)):
            return True  # ours (or not readable just now: looked at again at the next heartbeat)
        self._lose(path, key, found)
        return False

    def release(self, key: str, event: str = "done") -> None:
        """Give the lease up (`event`: done, failed, stopped or lost, for the journal). Only a lease that still names
        this process is removed: one taken over is its new holder's."""
        path = self.path(key)
        with self._lock:
            was_lost = path in self.lost
            self.lost.discard(path)
            self._drop(path)
        if was_lost:  # (its journal line was written when it was found lost)
            return
        found = self._read(path)
        if found is not None and not found.unknown and found.ident != self.me.ident:
            self._lose(path, key, found, held=False)
            return
        self._move_out(path, self.me)
        self.log(event, key)

    def release_all(self, event: str = "stopped") -> None:
        """Give up every lease still held (a process that stops between taking an item and running it)."""
        with self._lock:
            keys = list(self.held.values())
        for key in keys:
            self.release(key, event)

    @contextlib.contextmanager
    def holding(self, key: str) -> Iterator[None]:
        """Run the body with the item leased (the lease must have been taken); released however it ends."""
        event = "failed"
        try:
            yield
            event = "done"
        except BaseException as exc:
            event = "lost" if isinstance(exc, LeaseLost) else "stopped" if _stopped(exc) else event
            raise
        finally:
            self.release(key, event)

    def log(self, event: str, key: str, detail: str = "") -> None:
        """One line of the journal (appended whole: O_APPEND)."""
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        line = f"{stamp} {self.me} {event} {key}{' ' + detail if detail else ''}\n"
        with contextlib.suppress(OSError):
            fd = os.open(self.journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)

    def failed(self, keys: list[str]) -> dict[str, str]:
        """Of `keys`, those whose last event in the journal is `failed` (its holder gave it up with an error, and
        nobody has taken it since): item → who failed."""
        wanted, last = set(keys), {}
        with contextlib.suppress(OSError):
            for line in self.journal.read_text(errors="replace").splitlines():
                parts = line.split(" ", 4)
                if len(parts) >= 4 and parts[3] in wanted and parts[2] not in ("skipped", "lost"):  # (not its state)
                    last[parts[3]] = (parts[2], parts[1])
        return {key: who for key, (event, who) in last.items() if event == "failed"}

    def _create(self, path: Path, key: str) -> bool:
        """Create the lease whole (safe_io.create_whole: of processes on any hosts, one gets it)."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not create_whole(path, json.dumps(self.me.record())):
                return False
        except OSError as exc:
            raise VitxError(f"cannot lease work in {path.parent}: {exc.strerror or exc}; choose another "
                            "--output-dir") from None
        with self._lock:
            self.held[path] = key
            self.lost.discard(path)
            if self._beating is None:
                self._beating = threading.Event()
                threading.Thread(target=self._beat, args=(self._beating,), daemon=True,
                                 name="vitx-lease-heartbeat").start()
        return True

    def _drop(self, path: Path) -> None:
        """Forget a held lease (under the lock); the heartbeat stops with the last."""
        self.held.pop(path, None)
        if not self.held and self._beating is not None:
            self._beating.set()
            self._beating = None

    def _lose(self, path: Path, key: str, found: Holder | None, held: bool = True) -> None:
        """The lease names another process now (or none): said once, in the journal and to people."""
        with self._lock:
            if held and path not in self.held:
                return
            self._drop(path)
            if held:
                self.lost.add(path)
        self.log("lost", key, f"to {found or 'nobody'}")
        self.say(f"{key}: this process's lease was taken over by {found or 'another process'} (no heartbeat "
                 f"seen for {STALE_AFTER:.0f} s: paused or cut off from the disk?); it is theirs, and what ran of it "
                 "here is not kept")

    def _move_out(self, path: Path, seen: Holder) -> bool:
        """Remove the lease at `path` if it names `seen` (moved aside first: of several processes that try, one
        succeeds); a lease that changed between the look and the move (a fresh one) is put back."""
        tomb = path.with_name(f"{path.name}.gone-{self.me.host}-{self.me.pid}-{os.urandom(4).hex()}")
        try:
            os.rename(path, tomb)
        except FileNotFoundError:
            return False
        moved = self._read(tomb)
        if moved is None or moved.ident != seen.ident:
            with contextlib.suppress(OSError):
                os.link(tomb, path)  # never over a newer one
            tomb.unlink(missing_ok=True)
            return False
        tomb.unlink(missing_ok=True)
        return True

    def _beat(self, stop: threading.Event) -> None:
        """Every HEARTBEAT seconds: each held lease checked (still this process's?) and touched."""
        while not stop.wait(HEARTBEAT):
            with self._lock:
                held = list(self.held.values())
            for key in held:
                if self.still_mine(key):
                    with contextlib.suppress(OSError):
                        os.utime(self.path(key))


__all__ = ["LeaseLost", "Leases", "HEARTBEAT", "Holder", "STALE_AFTER"]

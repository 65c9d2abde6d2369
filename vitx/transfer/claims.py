"""Claims on work items in a shared --output-dir, so that two processes never run the same item.

A claim is `<output>/claims/<item>.claim`, created atomically and whole (of two processes one gets it)
and holding its holder: host, process id (and the process's start time, which a reused id does not share),
when it began. While the item runs a heartbeat thread touches it every HEARTBEAT seconds; it is deleted when
the item ends, done or failed. A claim whose holder is gone is stale and taken over: on the same host, when its
process no longer exists; from another host, when its heartbeat is older than STALE_AFTER seconds. Every claim
taken, taken over, finished or given up is one line of `<output>/claims.log` (time, holder, event, item).
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import VitxError

HEARTBEAT = 30.0  # seconds between touches of a held claim
STALE_AFTER = 300.0  # a claim from another host untouched for this long is its holder's, killed
FOLDER, JOURNAL = "claims", "claims.log"


def _proc_start(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, /proc's field 22): a reused id has another. None
    where there is no /proc or no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()[19]


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
    """Who holds a claim."""

    host: str
    pid: int
    proc_start: str | None = None
    began: str = ""
    beat: float = 0.0  # the claim file's last touch (its mtime)

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}"

    @classmethod
    def me(cls) -> "Holder":
        return cls(socket.gethostname(), os.getpid(), _proc_start(os.getpid()),
                   datetime.now(timezone.utc).isoformat(timespec="seconds"))

    def record(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "proc_start": self.proc_start, "began": self.began}


class Claims:
    """This process's claims in one --output-dir. `say`: where a line for people goes (the console)."""

    def __init__(self, output: Path, say: Any = print) -> None:
        self.folder, self.journal = Path(output) / FOLDER, Path(output) / JOURNAL
        self.say = say
        self.me = Holder.me()
        self.held: set[Path] = set()
        self._lock = threading.Lock()
        self._beating: threading.Event | None = None

    def path(self, key: str) -> Path:
        return self.folder / (key.replace("/", "__") + ".claim")

    def _read(self, path: Path) -> Holder | None:
        """The holder in a claim file; None when there is none (or it vanished as it was read)."""
        try:
            beat = path.stat().st_mtime
            text = path.read_text()
        except FileNotFoundError:
            return None
        except OSError:
            return Holder("?", -1)
        try:
            data = json.loads(text)
            return Holder(str(data["host"]), int(data["pid"]), data.get("proc_start"), str(data.get("began", "")),
                          beat)
        except (ValueError, KeyError, TypeError):  # (O_EXCL's claim being written, or torn by a kill)
            return Holder("?", -1, beat=beat)

    def stale(self, holder: Holder) -> str | None:
        """Why `holder`'s claim is stale, or None while it may still be working."""
        if holder.pid < 0:  # unreadable: being written for a moment, or torn by a kill long ago
            return "its claim file is unreadable" if time.time() - holder.beat > HEARTBEAT else None
        if holder.host == self.me.host:
            if holder.pid == self.me.pid:  # (a claim this process holds is never looked at)
                return "left by this process"
            if not _alive(holder.pid):
                return f"process {holder.pid} is gone"
            if holder.proc_start is not None and _proc_start(holder.pid) not in (None, holder.proc_start):
                return f"process {holder.pid} is another process now"
            return None
        age = time.time() - holder.beat
        return f"no heartbeat for {age:.0f} s" if age > STALE_AFTER else None

    def holder(self, key: str) -> Holder | None:
        """The live process that holds the item (not this one), or None: unclaimed, stale, or ours."""
        path = self.path(key)
        found = self._read(path)
        if found is None or path in self.held or self.stale(found) is not None:
            return None
        return found

    def take(self, key: str) -> bool:
        """Claim the item: True when this process now holds it; False when a live process does (or won the
        race for it). A stale claim is taken over, and said so."""
        path = self.path(key)
        if path in self.held:
            return True
        for _ in range(2):  # twice: a claim released between our try and our look
            if self._create(path):
                self.log("taken", key)
                return True
            found = self._read(path)
            if found is None:
                continue
            reason = self.stale(found)
            if reason is None or not self._remove_stale(path, found) or not self._create(path):
                return False
            self.log("taken-over", key, f"from {found} ({reason})")
            self.say(f"{key}: took over the claim of {found} ({reason})")
            return True
        return False

    def release(self, key: str, event: str = "done") -> None:
        """Give the claim up (`event`: done, failed or stopped, for the journal)."""
        path = self.path(key)
        with self._lock:
            self.held.discard(path)
            if not self.held and self._beating is not None:
                self._beating.set()
                self._beating = None
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self.log(event, key)

    @contextlib.contextmanager
    def holding(self, key: str):
        """Run the body with the item claimed (the claim must have been taken); released however it ends."""
        event = "failed"
        try:
            yield
            event = "done"
        except BaseException as exc:
            event = "stopped" if type(exc).__name__ in ("Preempted", "Interrupted", "KeyboardInterrupt") else event
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

    def _create(self, path: Path) -> bool:
        """Create the claim whole (written aside, then hard-linked into place: the link fails when the claim
        exists), or, on a filesystem without links, with O_CREAT | O_EXCL."""
        text = json.dumps(self.me.record())
        tmp = path.with_name(f".{path.name}.{self.me.host}-{self.me.pid}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(text)
            try:
                os.link(tmp, path)
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
                    raise
                with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "w") as fh:
                    fh.write(text)
        except FileExistsError:
            return False
        except OSError as exc:
            raise VitxError(f"cannot claim work in {path.parent}: {exc.strerror or exc}; choose another "
                            "--output-dir") from None
        finally:
            tmp.unlink(missing_ok=True)
        with self._lock:
            self.held.add(path)
            if self._beating is None:
                self._beating = threading.Event()
                threading.Thread(target=self._beat, args=(self._beating,), daemon=True,
                                 name="vitx-claim-heartbeat").start()
        return True

    def _remove_stale(self, path: Path, seen: Holder) -> bool:
        """Move a stale claim out of the way; of several processes that saw it stale, one succeeds. A claim that
        changed between the look and the move (a fresh one) is put back."""
        tomb = path.with_name(f"{path.name}.stale-{self.me.host}-{self.me.pid}")
        try:
            os.rename(path, tomb)
        except FileNotFoundError:
            return False
        moved = self._read(tomb)
        if moved is not None and (moved.host, moved.pid, moved.began) != (seen.host, seen.pid, seen.began):
            with contextlib.suppress(OSError):
                os.link(tomb, path)  # never over a newer one
            tomb.unlink(missing_ok=True)
            return False
        tomb.unlink(missing_ok=True)
        return True

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(HEARTBEAT):
            with self._lock:
                held = list(self.held)
            for path in held:
                with contextlib.suppress(OSError):
                    os.utime(path)


__all__ = ["Claims", "HEARTBEAT", "Holder", "STALE_AFTER"]

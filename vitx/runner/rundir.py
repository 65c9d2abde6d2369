"""The run directory: numbered checkpoints that appear only when complete, and the latest one on top.

    run/config.json  model.safetensors  heads.safetensors  metrics.jsonl  curves.png
    run/checkpoints/step_00000100/{config.json, model.safetensors, heads.safetensors, trainer_state.json,
                                  curves.png (metrics.jsonl up to this step, when --curves),
                                  accelerate/ (optimizer, scheduler, RNG: Accelerate's own state)}

A checkpoint is written under a hidden temporary name and renamed into place when everything is on disk,
so a kill during a save leaves the previous checkpoints intact; leftovers are removed on the next start, which
also points the top-level files at the newest checkpoint if a kill came between the two. trainer_state.json
marks a checkpoint complete: written last, removed first. Only names that are exactly step_<digits> are ours."""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Iterator

from ..checkpoint import atomic_write_text, cannot_write, fsync_path, fsync_tree
from ..errors import VitxError

PREFIX = "step_"
NAME = re.compile(rf"{PREFIX}(\d+)")  # exactly step_<digits>: a user's step_old or step_00000020.bak is not ours
TEACHER = "teacher.safetensors"  # an objective's teacher backbone (self-distillation), laid out as model.safetensors
WEIGHTS = ("model.safetensors", "heads.safetensors", "ema.safetensors", "ema_heads.safetensors", TEACHER)
TOP = (*WEIGHTS, "config.json", "curves.png")  # the latest checkpoint's, on top
MARKER = "trainer_state.json"  # written last, removed first: a checkpoint is complete exactly while it exists


def step_number(path: Path) -> int | None:
    """The step a checkpoint folder is named for; None for anything else in checkpoints/."""
    found = NAME.fullmatch(path.name)
    return int(found.group(1)) if found else None


class RunDir:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.checkpoints = self.path / "checkpoints"

    def steps(self) -> list[Path]:
        """The checkpoint folders (complete or not), oldest first."""
        if not self.checkpoints.is_dir():
            return []
        return sorted((p for p in self.checkpoints.iterdir() if step_number(p) is not None), key=step_number)

    def latest(self, before: int | None = None) -> Path | None:
        """The newest complete checkpoint (with `before`: of a step before it), or None."""
        done = [p for p in self.steps() if (p / MARKER).exists() and (before is None or step_number(p) < before)]
        return done[-1] if done else None

    def check_writable(self) -> None:
        """Refuse now, before minutes of setup, a folder that cannot be written: a file in the way, a read-only
        disk, no permission. Creates nothing (a run refused later for another reason leaves no empty folder)."""
        found = self.path
        while not found.exists() and found != found.parent:
            found = found.parent
        if not found.is_dir():
            reason = "a file of that name is in the way" if found == self.path else f"{found} is a file, not a folder"
        elif not os.access(found, os.W_OK):
            reason = "the filesystem is read-only" if os.statvfs(found).f_flag & os.ST_RDONLY else "permission denied"
        else:
            return
        raise VitxError(f"cannot write {self.path}: {reason}; choose another --output-dir")

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[bool]:
        """Hold the directory's lock (`.lock`) while writing to it; yields False, holding nothing, when another
        process holds it: two runs must never interleave checkpoints in one directory. A POSIX record lock: it
        belongs to this process alone (forked loader workers do not inherit it) and goes with it, so a killed
        run never leaves a stale one."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fh = open(self.path / ".lock", "a+")
        except OSError as exc:
            raise VitxError(f"{cannot_write(self.path, exc)}; choose another --output-dir") from None
        with fh:
            try:
                fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # EACCES or EAGAIN: held by another process
                yield False
                return
            fh.seek(0)
            fh.truncate()
            fh.write(f"{os.getpid()}\n")
            fh.flush()
            try:
                yield True
            finally:
                fcntl.lockf(fh, fcntl.LOCK_UN)

    def holder(self) -> str:
        """The pid written by the process that holds (or last held) the lock. Only for a process that does not
        hold it: closing any descriptor of the file releases a POSIX lock held by the process that closes it."""
        try:
            return (self.path / ".lock").read_text().strip() or "?"
        except OSError:
            return "?"

    def clean_partial(self) -> None:
        """Remove checkpoints that a killed save left half-written, or a killed prune half-removed."""
        hidden = [p for p in self.checkpoints.iterdir() if p.name.startswith(".")] if self.checkpoints.is_dir() else []
        for p in hidden + [p for p in self.steps() if not (p / MARKER).exists()]:
            shutil.rmtree(p, ignore_errors=True)

    def staging(self, step: int) -> Path:
        tmp = self.checkpoints / f".{PREFIX}{step:08d}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        return tmp

    def publish(self, staged: Path, step: int, config: dict[str, Any], keep: int) -> Path:
        """Make a staged checkpoint visible, point the run's top-level files at it, prune old ones."""
        atomic_write_text(staged / "config.json", json.dumps(config, indent=2))
        atomic_write_text(staged / MARKER, json.dumps({"step": step}))
        final = self.checkpoints / f"{PREFIX}{step:08d}"
        if final.exists():
            self._remove(final)
        fsync_tree(staged)  # everything on disk before the name says the checkpoint is complete
        os.replace(staged, final)
        fsync_path(self.checkpoints)
        self.mirror(final)  # a kill before this line: the next start (or --resume) repairs the top level
        for old in self.steps()[:-keep]:
            self._remove(old)
        return final

    def mirror(self, checkpoint: Path) -> None:
        """Make the top-level files the checkpoint's (hard links: no copy). For the process holding the lock."""
        stale = self._stale(checkpoint)
        for name in stale:
            src, top = checkpoint / name, self.path / name
            if src.exists():
                link = self.path / f".{name}.link"
                link.unlink(missing_ok=True)
                os.link(src, link)
                os.replace(link, top)
            else:  # the top level mirrors the latest checkpoint: an older step's file must not pass for its own
                top.unlink()
        if stale:
            fsync_path(self.path)

    def repair(self) -> None:
        """Point the top level at the newest complete checkpoint when a kill left it at an older one (between a
        checkpoint's rename and its top-level files). For a process that does not hold the lock: takes it, and
        writes nothing when the top level is right already (a finished run on a read-only disk stays readable)."""
        latest = self.latest()
        if latest is None or not self._stale(latest):
            return
        with self.exclusive() as owned:
            latest = self.latest()
            if owned and latest is not None:
                self.mirror(latest)

    def _stale(self, checkpoint: Path) -> list[str]:
        """The top-level names that are not the checkpoint's own file, or that linger where it has none."""
        return [name for name in TOP if (checkpoint / name).exists() != (self.path / name).exists()
                or (self.path / name).exists() and not os.path.samefile(checkpoint / name, self.path / name)]

    @staticmethod
    def _remove(checkpoint: Path) -> None:
        """Delete a checkpoint, its completeness marker first: a kill half-way leaves one that no longer
        passes for complete (and that the next start removes), never a marker over missing weights."""
        (checkpoint / MARKER).unlink(missing_ok=True)
        fsync_path(checkpoint)
        shutil.rmtree(checkpoint, ignore_errors=True)

    @staticmethod
    def step_of(checkpoint: Path) -> int:
        return int(json.loads((checkpoint / MARKER).read_text())["step"])

"""The run directory: numbered checkpoints that appear only when complete, and the latest one on top.

    run/config.json  model.safetensors  heads.safetensors  metrics.jsonl  curves.png
    run/checkpoints/step_00000100/{config.json, model.safetensors, heads.safetensors, trainer_state.json,
                                  curves.png (metrics.jsonl up to this step, when --curves),
                                  accelerate/ (optimizer, scheduler, RNG: Accelerate's own state)}

A checkpoint is written under a hidden temporary name and renamed into place when everything is on disk,
so a kill during a save leaves the previous checkpoints intact; leftovers are removed on the next start.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterator

from ..checkpoint import atomic_write_text, fsync_path, fsync_tree

PREFIX = "step_"


class RunDir:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.checkpoints = self.path / "checkpoints"

    def latest(self) -> Path | None:
        """The newest complete checkpoint, or None."""
        if not self.checkpoints.is_dir():
            return None
        done = [p for p in self.checkpoints.iterdir()
                if p.name.startswith(PREFIX) and (p / "trainer_state.json").exists()]
        return max(done, key=lambda p: int(p.name[len(PREFIX):]), default=None)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[bool]:
        """Hold the directory's lock (`.lock`) while writing to it; yields False, holding nothing, when another
        process holds it: two runs must never interleave checkpoints in one directory. A POSIX record lock: it
        belongs to this process alone (forked loader workers do not inherit it) and goes with it, so a killed
        run never leaves a stale one."""
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.path / ".lock", "a+") as fh:
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
        """Remove checkpoints that a killed save left half-written."""
        if self.checkpoints.is_dir():
            for p in self.checkpoints.iterdir():
                if p.name.startswith("."):
                    shutil.rmtree(p, ignore_errors=True)

    def staging(self, step: int) -> Path:
        tmp = self.checkpoints / f".{PREFIX}{step:08d}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        return tmp

    def publish(self, staged: Path, step: int, config: dict[str, Any], keep: int) -> Path:
        """Make a staged checkpoint visible, point the run's top-level files at it, prune old ones."""
        atomic_write_text(staged / "config.json", json.dumps(config, indent=2))
        atomic_write_text(staged / "trainer_state.json", json.dumps({"step": step}))
        final = self.checkpoints / f"{PREFIX}{step:08d}"
        if final.exists():
            shutil.rmtree(final)
        fsync_tree(staged)  # everything on disk before the name says the checkpoint is complete
        os.replace(staged, final)
        fsync_path(self.checkpoints)
        for name in ("model.safetensors", "heads.safetensors", "config.json", "curves.png"):
            src = final / name
            if src.exists():
                link = self.path / f".{name}.link"
                link.unlink(missing_ok=True)
                os.link(src, link)  # no copy: the top-level file shares the checkpoint's data
                os.replace(link, self.path / name)
            else:  # the top level mirrors the latest checkpoint: an older step's file must not pass for its own
                (self.path / name).unlink(missing_ok=True)
        fsync_path(self.path)
        steps = sorted((p for p in self.checkpoints.iterdir() if p.name.startswith(PREFIX)),
                       key=lambda p: int(p.name[len(PREFIX):]))
        for old in steps[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    @staticmethod
    def step_of(checkpoint: Path) -> int:
        return int(json.loads((checkpoint / "trainer_state.json").read_text())["step"])

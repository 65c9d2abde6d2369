"""The run directory's format, in one place for the runner that writes it and every reader (runs/folder.py,
export, predict): numbered checkpoints that appear only when complete, and the latest one on top.

    run/config.json  model.safetensors  heads.safetensors  metrics.jsonl  curves.png  .vitx-run  .lock
        [ema.safetensors  ema_heads.safetensors: --ema-decay; teacher.safetensors: an objective's teacher]
    run/checkpoints/step_00000100/{config.json, model.safetensors, heads.safetensors, [ema*, teacher],
                                  trainer_state.json, curves.png (metrics.jsonl up to this step, when --curves),
                                  accelerate/ (optimizer, scheduler, RNG: Accelerate's own state, and the
                                  EMA as it is)}

model.safetensors is the backbone (keys without `backbone.`), heads.safetensors the objective's other modules;
each file's metadata says the step (`write_weights`).

A checkpoint is written under a hidden temporary name and renamed into place when everything is on disk,
so a kill during a save leaves the previous checkpoints intact; leftovers are removed on the next start, which
also points the top-level files at the newest checkpoint if a kill came between the two. trainer_state.json
marks a checkpoint complete: written last, removed first.

vitx removes only what it made: a staged checkpoint carries `.vitx-checkpoint`, written into it first (so a
half-written one is still recognisably vitx's) and removed last; start-up cleanup and pruning touch nothing else
in checkpoints/ (a user's .git/, .ipynb_checkpoints/, step_5/mine.txt). A checkpoint written before that marker
existed (it has trainer_state.json) is still read and resumed, never removed. The run folder itself carries
`.vitx-run` from the first time a run takes it (ownership.py: vitx writes only into its own folders)."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Iterator

from safetensors import SafetensorError, safe_open

from ..safe_io import atomic_write_text, fsync_path, fsync_tree, read_json, save_weights
from ..errors import VitxError, cannot_write, in_the_way
from ..settings.paths import RUN_MARK, writable_folder

PREFIX = "step_"
NAME = re.compile(rf"{PREFIX}(\d+)")  # exactly step_<digits>: a user's step_old or step_00000020.bak is not ours
MODEL, HEADS = "model.safetensors", "heads.safetensors"  # the backbone; the objective's other modules (heads)
EMA, EMA_HEADS = "ema.safetensors", "ema_heads.safetensors"  # --ema-decay's moving average, laid out as those
TEACHER = "teacher.safetensors"  # an objective's teacher backbone (self-distillation), laid out as model.safetensors
WEIGHTS = (MODEL, HEADS, EMA, EMA_HEADS, TEACHER)
TOP = (*WEIGHTS, "config.json", "curves.png")  # the latest checkpoint's, on top
MARKER = "trainer_state.json"  # written last, removed first: a checkpoint is complete exactly while it exists
OWNED = ".vitx-checkpoint"  # written first into a staged checkpoint, removed last: the folders vitx may remove
STAGED = re.compile(rf"\.{PREFIX}\d{{8}}\.partial")  # a checkpoint being written (with OWNED: vitx's own)
STAGED_FILES = {*WEIGHTS, "config.json", MARKER, "curves.png", "accelerate"}  # what a save writes into one
RUN_NOTE = "This folder is a vitx run: vitx writes its files here (config.json, model.safetensors, checkpoints/).\n"


def weights_file(run_dir: str | Path, ema: bool = False, heads: bool = False, teacher: bool = False) -> Path:
    """A run's (or checkpoint's) live weights, or with `ema` the moving average saved beside them, or with
    `teacher` the objective's teacher backbone."""
    name = TEACHER if teacher else (EMA_HEADS if heads else EMA) if ema else (HEADS if heads else MODEL)
    return Path(run_dir) / name


def write_weights(folder: Path, step: int, state: dict[str, Any], ema: dict[str, Any] | None = None,
                  teacher: dict[str, Any] | None = None) -> None:
    """A checkpoint's weight files from the objective's full state (`backbone.*` and its heads), the EMA's state
    laid out the same way, and a teacher backbone's state: safetensors, each saying its step."""
    meta = {"vitx_step": str(step)}
    for (back_name, heads_name), full in (((MODEL, HEADS), state), ((EMA, EMA_HEADS), ema)):
        if full is None:
            continue
        save_weights({k[len("backbone."):]: v for k, v in full.items() if k.startswith("backbone.")},
                     folder / back_name, meta)
        heads = {k: v for k, v in full.items() if not k.startswith("backbone.")}
        if heads:
            save_weights(heads, folder / heads_name, meta)
    if teacher is not None:
        save_weights(teacher, folder / TEACHER, meta)


def check_weights(path: Path, run: Path) -> None:
    """Refuse, in one line, a weight file that is not whole: its safetensors header unreadable, or its tensors'
    sizes (dtype x shape) not covering the file exactly, as safetensors checks on opening (a truncated copy, a
    disk that filled). Reads the header only."""
    try:
        with safe_open(str(path), framework="pt") as found:
            found.keys()
    except (SafetensorError, OSError) as exc:
        said = str(exc).removeprefix("Error while deserializing header: ")
        raise VitxError(f"{path} is damaged ({said}); the top-level files were left as they are: delete "
                        f"{path.parent.relative_to(run) if path.is_relative_to(run) else path.parent} to continue "
                        "from the checkpoint before it") from None


def step_number(path: Path) -> int | None:
    """The step a checkpoint folder is named for; None for anything else in checkpoints/."""
    found = NAME.fullmatch(path.name)
    return int(found.group(1)) if found else None


def is_ours(folder: Path) -> bool:
    """Whether vitx staged this checkpoint folder: it carries OWNED, or it is a staged name holding nothing but
    what an older vitx (before OWNED) wrote into one, a save it was killed in. A symbolic link never counts."""
    if not folder.is_dir() or folder.is_symlink():
        return False
    if (folder / OWNED).is_file():
        return True
    return STAGED.fullmatch(folder.name) is not None and all(p.name in STAGED_FILES for p in folder.iterdir())


def mark_run(folder: Path) -> None:
    """Say that `folder` is a vitx run (RUN_MARK), unless it says so already: the first thing vitx writes there."""
    path = folder / RUN_MARK
    if not path.is_file():
        path.write_text(RUN_NOTE)


def drop_if_unused(folder: Path) -> None:
    """Remove a folder a failed command made, when nothing but RUN_MARK (and the lock) went into it: a refusal
    leaves no empty folder that passes for a vitx run."""
    try:
        if {p.name for p in folder.iterdir()} <= {RUN_MARK, ".lock"}:
            for name in (RUN_MARK, ".lock"):
                (folder / name).unlink(missing_ok=True)
            folder.rmdir()
    except OSError:
        pass


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

    def kept(self) -> str:
        """What a failed write left behind and how to go on, true to what is on disk: the earlier checkpoints
        when there are some, else that there is none to continue from."""
        latest = self.latest()
        if latest is None:
            return "no checkpoint had been written yet: fix that, then run the command again"
        return f"the earlier checkpoints are intact (the newest: {latest.name}): fix that, then continue with --resume"

    def check_writable(self) -> None:
        """Refuse now, before minutes of setup, a folder that cannot be written: a file in the way, a read-only
        disk, no permission. Creates nothing (a run refused later for another reason leaves no empty folder)."""
        writable_folder(self.path, "; choose another --output-dir")

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[bool]:
        """Hold the directory's lock (`.lock`) while writing to it; yields False, holding nothing, when another
        process holds it: two runs must never interleave checkpoints in one directory. A POSIX record lock: it
        belongs to this process alone (forked loader workers do not inherit it) and goes with it, so a killed
        run never leaves a stale one."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            mark_run(self.path)
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
        """Remove checkpoints that a killed save left half-written, or a killed prune half-removed: only vitx's
        own (staged names and step_<n> folders that carry OWNED); anything else in checkpoints/ is the user's."""
        if not self.checkpoints.is_dir():
            return
        for p in self.checkpoints.iterdir():
            unfinished = STAGED.fullmatch(p.name) or step_number(p) is not None and not (p / MARKER).exists()
            if unfinished and is_ours(p):
                self._clear(p)

    def staging(self, step: int) -> Path:
        """A new folder to write step `step`'s checkpoint into, OWNED written first. A folder of that name that
        vitx did not make is in the way: refused (an OSError, as a full disk is), never removed."""
        tmp = self.checkpoints / f".{PREFIX}{step:08d}.partial"
        self.discard(tmp)
        if tmp.exists() or tmp.is_symlink():
            raise FileExistsError(errno.EEXIST, f"{tmp} is in the way and is not vitx's (it has no {OWNED}); "
                                  "move it out of checkpoints/", str(tmp))
        tmp.mkdir(parents=True)
        (tmp / OWNED).write_text("vitx is writing this checkpoint; a folder without trainer_state.json beside "
                                 "this file is unfinished and is removed at the next start\n")
        return tmp

    def discard(self, folder: Path) -> None:
        """Remove a checkpoint folder (staged or not) if vitx made it; leave anything else as it is."""
        if is_ours(folder):
            self._clear(folder)

    def publish(self, staged: Path, step: int, config: dict[str, Any], keep: int) -> Path:
        """Make a staged checkpoint visible, point the run's top-level files at it, prune old ones."""
        atomic_write_text(staged / "config.json", json.dumps(config, indent=2))
        atomic_write_text(staged / MARKER, json.dumps({"step": step}))
        final = self.checkpoints / f"{PREFIX}{step:08d}"
        if final.exists() or final.is_symlink():
            if not is_ours(final):
                raise FileExistsError(errno.EEXIST, f"{final} is in the way and is not a checkpoint vitx wrote (it "
                                      f"has no {OWNED}); move it out of checkpoints/", str(final))
            self._remove(final)
        fsync_tree(staged)  # everything on disk before the name says the checkpoint is complete
        os.replace(staged, final)
        fsync_path(self.checkpoints)
        self.mirror(final)  # a kill before this line: the next start (or --resume) repairs the top level
        for old in [p for p in self.steps() if is_ours(p)][:-keep]:  # (an older vitx's checkpoints are kept)
            self._remove(old)
        return final

    def mirror(self, checkpoint: Path) -> None:
        """Make the top-level files the checkpoint's (hard links: no copy). For the process holding the lock.
        Each weight file is checked first (`check_weights`): a damaged one is refused before anything is linked,
        so a truncated checkpoint never replaces the good files on top."""
        stale = self._stale(checkpoint)
        for name in stale:
            if name in WEIGHTS and (checkpoint / name).exists():
                check_weights(checkpoint / name, self.path)
        for name in stale:
            src, top = checkpoint / name, self.path / name
            try:
                if src.exists():
                    link = self.path / f".{name}.link"
                    link.unlink(missing_ok=True)
                    os.link(src, link)
                    try:
                        os.replace(link, top)
                    finally:
                        link.unlink(missing_ok=True)
                else:  # the top level mirrors the latest checkpoint: an older step's file must not pass for its own
                    top.unlink()
            except OSError as exc:  # a folder of that name in the way, an immutable file (a full disk: the loop's)
                raise in_the_way(top, exc) from None
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
        RunDir._clear(checkpoint)

    @staticmethod
    def _clear(folder: Path) -> None:
        """Delete a folder of vitx's, OWNED last: a kill half-way leaves one that is still recognisably vitx's
        (and that the next start removes). Best effort, as pruning has always been."""
        try:
            for p in sorted(folder.iterdir(), key=lambda p: p.is_dir() and not p.is_symlink()):  # files first
                if p.name == OWNED:
                    continue
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
            if any(p.name != OWNED for p in folder.iterdir()):  # something would not go: keep the marker
                return
            (folder / OWNED).unlink(missing_ok=True)
            folder.rmdir()
        except OSError:
            pass

    @staticmethod
    def step_of(checkpoint: Path) -> int:
        """The step a complete checkpoint was saved at, as its trainer_state.json records it, checked as a flag
        is: a damaged or edited file is one line, never a resume at a step that does not exist."""
        state = read_json(checkpoint / MARKER)
        value = state.get("step") if isinstance(state, dict) else None
        named = step_number(checkpoint)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0 or named is not None and value != named:
            shown = json.dumps(value)[:40] if isinstance(state, dict) and "step" in state else "none"
            raise VitxError(f"{checkpoint / MARKER} is damaged (step {shown}, in the folder {checkpoint.name}); "
                            "delete that checkpoint to resume from the one before it")
        return value

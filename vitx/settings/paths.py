"""Output paths a setting names, checked before any work: a command that measures or evaluates for minutes must
not fail at its last line because its file cannot be written. Torch-free: options' validation reads it."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from ..errors import VitxError

NAME_MAX = 255  # a name's bytes on common filesystems
RUN_MARK = ".vitx-run"  # in a run folder, from the first time a run takes it: the folder is vitx's (runs/rundir.py)


def writable_file(path: str | Path, flag: str, force: bool = False, example: str = "results.json",
                  ours: Callable[[Path], bool] | None = None, what: str = "") -> None:
    """Refuse, before any work, a file path that cannot be written: an existing folder, a file where one of
    its folders should be, a folder that cannot be written into (the file is written last, after minutes of
    feature extraction or measuring), or a file already there that the command may not replace (`replaceable`).
    `example`: the file name the refusal of a folder suggests."""
    target = Path(path).expanduser()
    if target.is_dir() or not target.name:  # (`-o .`, `-o /`: no file name either)
        raise VitxError(f"{flag} {path} is a folder; give a file to write, e.g. {flag} {target / example}")
    extra = _temporary_bytes()
    if len(target.name.encode()) > NAME_MAX - extra:  # (written under a longer temporary name first)
        raise VitxError(f"{flag} {path}: the file name is longer than the {NAME_MAX - extra} bytes vitx can write "
                        f"here (it writes under a temporary name of {extra} more bytes first, then renames)")
    replaceable(target, flag, force, ours, what)
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise VitxError(f"{flag} {path}: {parent} is a file, not a folder")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise VitxError(f"{flag} {path}: cannot write into {parent} (permission denied)")
            break


# a run's or a transfer's own files, by name (besides its *.safetensors and its checkpoints' contents): never
# replaced by another command's output, --force or not (report.html is a page any `vitx report` may rewrite)
RUN_FILES = frozenset({"config.json", "metrics.jsonl", "trainer_state.json", RUN_MARK, ".lock", "curves.png",
                       "transfer.json", "result.json", "point.json", "final.json", "selection.json", "suite.json",
                       "summary.json", "leases.log", "sweep.png", "plan.json", "results.json", "REPORT.md"})


def replaceable(target: Path, flag: str, force: bool = False, ours: Callable[[Path], bool] | None = None,
                what: str = "") -> None:
    """Refuse to write over a file that is not one this kind of command writes (`ours`: e.g. a vitx page or
    figure, which rerunning the command replaces): a user's file only with `force`, and a vitx run's or
    transfer's own file (its weights, records, marker, checkpoints) never, --force or not: a run is not lost to
    a mistyped --output. A device or a pipe (/dev/stdout) is written into: nothing is replaced. `what`: the
    kind `ours` accepts, for the refusal (none: nothing there is ever replaced unasked)."""
    if not (target.is_file() or (target.is_symlink() and not target.exists())):
        return
    run = _run_holding(target)
    if run is not None:
        raise VitxError(f"{flag} {target} is one of the vitx run's own files in {run}; write elsewhere (--force "
                        "never replaces a run's own files)")
    if ours is not None and target.is_file() and ours(target):
        return
    if not force:
        raise VitxError(f"{flag} {target} exists" + (f" and is not {what}" if what else "")
                        + "; give a new file, or --force to replace it")


def _temporary_bytes() -> int:
    """What the longer of vitx's temporary names adds to a file's: safe_io's `.{name}.tmp-{host}-{pid}-{8 hex}`,
    a figure's `.{name}.tmp-{16 hex}` (plots/canvas.py)."""
    import socket

    return max(16 + len(socket.gethostname().encode()) + len(str(os.getpid())), 22)


def _run_holding(target: Path) -> Path | None:
    """The vitx run or transfer whose own file `target` is: one of RUN_FILES or its weights in a folder marked as
    a run's (RUN_MARK) or a transfer task's, or a file of one of its checkpoints (checkpoints/step_N/ and its
    accelerate/ state). Other files there (a user's, a command's own output such as inspect/) are not."""
    target = Path(os.path.abspath(target))  # (`-o curves.png` from inside a run: its folder's name matters)
    folder = target.parent
    if (target.name in RUN_FILES or target.suffix == ".safetensors") and \
            ((folder / RUN_MARK).is_file() or (folder / "transfer.json").is_file()):
        return folder
    parts = target.parts
    for i in range(len(parts) - 2):
        if parts[i] == "checkpoints" and parts[i + 1].startswith("step_") and \
                (len(parts) == i + 3 or parts[i + 2] == "accelerate") and (Path(*parts[:i]) / RUN_MARK).is_file():
            return Path(*parts[:i])
    return None


def writable_folder(path: str | Path, hint: str = "") -> None:
    """Refuse, before any work and without creating anything (a command refused later for another reason leaves
    no empty folder), a folder path that cannot be written: a file in the way, a read-only disk, no permission.
    `hint`: what to do, after the reason."""
    target = found = Path(path).expanduser()
    while not found.exists() and found != found.parent:
        found = found.parent
    if not found.is_dir():
        reason = "a file of that name is in the way" if found == target else f"{found} is a file, not a folder"
    elif not os.access(found, os.W_OK):
        reason = "the filesystem is read-only" if os.statvfs(found).f_flag & os.ST_RDONLY else "permission denied"
    else:
        return
    raise VitxError(f"cannot write {path}: {reason}{hint}")


__all__ = ["RUN_FILES", "RUN_MARK", "replaceable", "writable_file", "writable_folder"]

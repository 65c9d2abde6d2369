"""Whose folder it is: `vitx pretrain` and `vitx transfer` write only into an --output-dir that is new, empty or
vitx's own, so nothing a user keeps there is replaced (config.json, model.safetensors, metrics.jsonl, curves.png,
summary.json are common names). `vitx export --to` refuses a non-empty folder in the same way.

A folder is vitx's when it carries `.vitx-run` (rundir.RUN_MARK), written the first time a run takes it or a
transfer records a task there. A folder written before that marker existed is known by what only vitx leaves: a
`.lock` holding a process id (every run takes one before it writes), a complete checkpoint
(checkpoints/step_<n>/trainer_state.json), or a transfer's task folder (<task>/transfer.json)."""
from __future__ import annotations

import re
from pathlib import Path

from ..errors import VitxError
from .rundir import MARKER, RUN_MARK, step_number

LOCK_TEXT = re.compile(r"\d*\s*")  # what RunDir.exclusive writes into .lock: its pid (or nothing yet)


def _legacy_lock(folder: Path) -> bool:
    lock = folder / ".lock"
    try:
        return lock.is_file() and lock.stat().st_size < 32 and LOCK_TEXT.fullmatch(lock.read_text()) is not None
    except (OSError, UnicodeDecodeError):
        return False


def _children(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


def is_vitx_folder(folder: Path) -> bool:
    """Whether `folder` is a vitx run, or a transfer's output, that vitx may go on writing into."""
    if (folder / RUN_MARK).is_file() or _legacy_lock(folder):
        return True
    if any(step_number(p) is not None and (p / MARKER).is_file() for p in _children(folder / "checkpoints")):
        return True
    return any((p / "transfer.json").is_file() for p in _children(folder))


def held(folder: Path, flag: str) -> list[str]:
    """The names in an existing output folder, sorted; one line when it cannot be read."""
    try:
        return sorted(p.name for p in folder.iterdir())
    except OSError as exc:
        raise VitxError(f"{flag} {folder}: cannot read it ({exc.strerror or exc})") from None


def shown(names: list[str]) -> str:
    """The first three names of a folder, for a refusal."""
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


PRETRAINING, TRANSFER = "a pre-training run", "a transfer"  # what a vitx folder holds (`holds`)
REPRODUCTION = "a reproduction"  # what `vitx reproduce` writes (a folder `holds` knows as none of the others)
ITEM = "a transfer's work item (a sweep point or final run: `vitx transfer --resume` continues it)"


def _transfer_item(folder: Path) -> bool:
    """Whether `folder` is a transfer's sweep point or final run (its config.json has a `transfer` record)."""
    from ..safe_io import read_json_object  # (a damaged config.json reads as None: not known as an item)

    return isinstance((read_json_object(folder / "config.json") or {}).get("transfer"), dict)


def holds(folder: Path) -> str | None:
    """What the vitx folder `folder` holds: a transfer's work item (ITEM: its config.json has a transfer record),
    a pre-training run (its checkpoints or weights at the top), a transfer (suite.json, or a task's folder with
    its transfer.json), or None (neither yet)."""
    if _transfer_item(folder):  # (a finished sweep point has neither weights nor checkpoints left)
        return ITEM
    if (folder / "checkpoints").is_dir() or (folder / "model.safetensors").is_file():
        return PRETRAINING
    if (folder / "suite.json").is_file() or any((p / "transfer.json").is_file() for p in _children(folder)):
        return TRANSFER
    return None


def check_output_dir(folder: str | Path, flag: str = "--output-dir", writes: str | None = None) -> None:
    """Refuse, before any work, an output folder that holds files and is not vitx's: a run would write its own
    files over the user's. New, empty and vitx's own folders pass (resuming, or a transfer adding tasks), unless
    `writes` (PRETRAINING or TRANSFER) says the command would write another kind of folder into one: a transfer
    into the pre-training run it starts from would write its report.html and task folders among the run's."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():  # new (a file in the way: RunDir.check_writable says so)
        return
    names = held(folder, flag)
    found = holds(folder) if names and writes is not None else None
    if found not in (None, writes):
        raise VitxError(f"{flag} {folder} holds {found}; {writes} goes into a folder of its own: give a new one")
    if not names or is_vitx_folder(folder):
        return
    raise VitxError(f"{flag} {folder} is not empty and holds no vitx run (it holds {shown(names)}); vitx would write "
                    "over files there: give a new or empty folder")


__all__ = ["PRETRAINING", "REPRODUCTION", "TRANSFER", "check_output_dir", "held", "holds", "is_vitx_folder", "shown"]

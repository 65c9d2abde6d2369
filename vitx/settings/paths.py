"""Output paths a setting names, checked before any work: a command that measures or evaluates for minutes must
not fail at its last line because its file cannot be written. Torch-free: options' validation reads it."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import VitxError


def writable_file(path: str, flag: str, force: bool = False, example: str = "results.json") -> None:
    """Refuse, before any work, a file path that cannot be written: an existing folder, a file where one of
    its folders should be, a folder that cannot be written into (the file is written last, after minutes of
    feature extraction or measuring), or, without `force`, a file already there (an earlier result is never
    replaced unasked). `example`: the file name the refusal of a folder suggests."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise VitxError(f"{flag} {path} is a folder; give a file to write, e.g. {flag} {target / example}")
    if (target.is_file() or (target.is_symlink() and not target.exists())) and not force:  # (a device or a pipe,
        # /dev/stdout say, is written to: nothing there is replaced)
        raise VitxError(f"{flag} {path} exists; give a new file, or pass --force to replace it")
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise VitxError(f"{flag} {path}: {parent} is a file, not a folder")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise VitxError(f"{flag} {path}: cannot write into {parent} (permission denied)")
            break


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


__all__ = ["writable_file", "writable_folder"]

"""Errors a user can cause. The CLI prints these as one line and exits non-zero; anything else is a bug."""
from __future__ import annotations

import errno
import os
import re
from pathlib import Path

# OS errors that are the disk's state, not a bug: whatever writes, they are one line for the user
DISK_STATE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


class VitxError(Exception):
    """A problem with the user's input (names, paths, sizes, files) rather than a bug in vitx."""

    exit_code = 2  # what the CLI exits with
    label = "error"  # how the CLI's line starts

    def user_message(self) -> str:
        """One line for the terminal: an error raised in a DataLoader worker comes back wrapped with the worker's
        traceback in its message, of which only the original one-line message is kept."""
        text = worker_said(str(self))
        return text.strip().splitlines()[0] if text.strip() else type(self).__name__


def worker_said(text: str) -> str:
    """An error's text, or, for one a DataLoader worker raised (torch re-raises it with the worker's traceback in
    its text), the worker's own message: the last line's, after the exception's name."""
    if "Original Traceback" not in text:
        return text
    return [line for line in text.strip().splitlines() if line.strip()][-1].split(": ", 1)[-1]


def is_out_of_memory(exc: BaseException) -> bool:
    """torch's OutOfMemoryError (CUDA and the other accelerators), or its CPU allocator's refusal (a RuntimeError
    "DefaultCPUAllocator: can't allocate memory"): a size the user chose did not fit."""
    return type(exc).__name__ == "OutOfMemoryError" or (isinstance(exc, RuntimeError)
                                                        and "can't allocate memory" in str(exc))


TRAINING = ("pretrain", "transfer", "bench")  # the commands with --batch-size, --grad-accum and --precision


def out_of_memory(exc: BaseException, command: str = "") -> str:
    """The line for running out of memory (`is_out_of_memory`): where, what torch says it tried and had, then
    what `command` can change. torch's own advice (allocator settings, environment variables) and a DataLoader
    worker's traceback are left out."""
    said = " ".join(worker_said(str(exc)).split())
    said = re.sub(r"^\[enforce fail at [^]]*\] \. ", "", said)  # (the CPU allocator's source line)
    kept = ". ".join(part for part in said.split(". ")[:3]
                     if not part.startswith(("Including", "Of the", "If ", "Use ")) and "PYTORCH_" not in part)
    where = "the accelerator" if type(exc).__name__ == "OutOfMemoryError" else "this machine"
    if command in TRAINING:
        advice = ("lower --batch-size (--grad-accum K keeps the batch each optimiser step sees)"
                  + (", or use --precision bf16" if where == "the accelerator" else ""))
    elif command == "predict":
        advice = "lower --batch-size"
    elif command == "reproduce":
        advice = "lower the plan's batches (--set batch_size=N --set transfer_batch=N)"
    elif command == "eval":
        advice = "use a smaller --image-size or model, or a device with more memory"
    else:
        advice = "use a smaller model or input, or a device with more memory"
    kept_line = "; a checkpoint already written is kept" if command in ("pretrain", "transfer") else ""
    return f"{where} ran out of memory ({kept.rstrip('.') or type(exc).__name__}): {advice}{kept_line}"


# why a write failed, in a few plain words, by the OS error
_REASONS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is used up",
            errno.EROFS: "the filesystem is read-only", errno.EACCES: "permission denied",
            errno.EPERM: "permission denied", errno.ENOTDIR: "part of the path is a file, not a folder",
            errno.EEXIST: "a file of that name is in the way", errno.EISDIR: "a folder of that name is in the way"}


def write_reason(exc: Exception) -> str:
    """Why a write failed, in a few plain words ("no space left on the device"): an OSError's, or the OS error a
    library reports only in its text (safetensors: "os error 28")."""
    code = exc.errno if isinstance(exc, OSError) else None
    if code is None:
        found = re.search(r"os error (\d+)", str(exc))
        code = int(found.group(1)) if found else None
    return _REASONS.get(code) or (os.strerror(code).lower() if code else "an input/output error")


def in_the_way(path: Path | str, exc: OSError) -> VitxError:
    """A run's own file that cannot be written where it goes (a folder of that name, an immutable file): one
    line asking to move it aside. A full or read-only disk is raised as it is, for the loop's line, which says
    what is kept."""
    if exc.errno in DISK_STATE_ERRNOS:
        raise exc
    return VitxError(f"{cannot_write(path, exc)}; move it aside and run the same command again")


def cannot_write(path: Path | str, exc: Exception) -> VitxError:
    """A failed write (full disk, read-only folder, a file where a folder should be) as one plain line: these are
    the machine's state, not a bug, and the user can fix them. A file in the way of one of the folders above
    `path` (mkdir's EEXIST names that folder) is said as such."""
    reason = write_reason(exc)
    found = getattr(exc, "filename", None)
    if getattr(exc, "errno", None) == errno.EEXIST and found and Path(found) != Path(path):
        reason = _REASONS[errno.ENOTDIR]
    return VitxError(f"cannot write {path}: {reason}")


def first_line(exc: BaseException, limit: int = 300) -> str:
    """An exception from a library in one line for our own message: its first line (or its type's name), and
    the line after when the first only announces it ("Error(s) in loading state_dict for VisionTransformer:")."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()] or [type(exc).__name__]
    said = f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]
    return said[:limit]


class UnknownNameError(VitxError, KeyError):
    """A registry lookup for a name that is not registered."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class Preempted(VitxError):
    """The run was asked to stop (SIGTERM, SIGUSR1: a scheduler's preemption) and saved a checkpoint first.
    Exit status 75 (EX_TEMPFAIL, "try again"): a requeue script can tell it from a failure."""

    exit_code = 75
    label = "stopped"


class Interrupted(VitxError):
    """Ctrl-C. Raised in place of KeyboardInterrupt, which typer turns into a silent exit 130."""

    exit_code = 130
    label = "interrupted"


class Collapsed(VitxError):
    """--stop-on-collapse: the collapse watch saw the representation collapse, and the run stopped with a
    checkpoint. Exit status 3: a script can tell it from a bad input (2) and from a preemption (75)."""

    exit_code = 3
    label = "stopped"


class SelectionPending(VitxError):
    """A transfer's final runs need the suite's selection (or their task's), whose sweep points are not all on disk
    yet (other shards are running them, or have not run). Exit status 4: a job array or script can tell "run me
    again later" (or pass --wait) from a failure (2), a collapse (3) and a preemption (75)."""

    exit_code = 4
    label = "waiting"


class CorruptImageError(VitxError):
    """An image file that cannot be decoded."""

"""Safe file I/O for every command: files written atomically (whole or not at all, fsynced), safetensors
weights and config.json, read without unpickling (run folders, checkpoints, exports, suite records).

A run directory holds `config.json` (everything needed to rebuild the model and its preprocessing),
`model.safetensors` (the backbone, timm key names: `timm.create_model(config["backbone"]["timm_arch"],
**config["backbone"]["timm_kwargs"])` loads it strictly) and `heads.safetensors` (the objective's heads)."""
from __future__ import annotations

import errno
import json
import os
import secrets
import socket
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .errors import VitxError


def fsync_path(path: Path) -> None:
    """Flush a file, or a directory's entries, to disk: a rename is only durable once both are (a power cut
    after an un-synced rename can leave a checkpoint whose name exists and whose data does not)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under `root` (files Accelerate wrote for the training state included)."""
    for folder, _, files in os.walk(root, topdown=False):
        for name in files:
            fsync_path(Path(folder) / name)
        fsync_path(Path(folder))


def aside(path: Path) -> Path:
    """A temporary name beside `path`, unique on a shared filesystem: processes on different hosts (pods) can
    have the same process id (often 1), so the host and a random part go into it too."""
    return path.with_name(f".{path.name}.tmp-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}")


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a kill leaves the old file or the new one, never half. A device
    or a pipe the user names (/dev/stdout, /dev/null) is written to, never replaced by the rename."""
    if path.exists() and not path.is_file() and not path.is_dir():
        with open(path, "w", encoding="utf-8") as stream:
            stream.write(text)
        return
    tmp = aside(path)
    try:
        tmp.write_text(text)
        fsync_path(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # (gone once renamed; left by a failed write otherwise)
    fsync_path(path.parent)


def create_whole(path: Path, text: str) -> bool:
    """Create `path` holding `text` only if no file is there, atomically and whole: of processes that try at once
    (on one host or several sharing the filesystem) exactly one gets True. Written aside, then hard-linked into
    place (the link fails when the file exists); on a filesystem without links, O_CREAT | O_EXCL (whole but for
    the moment it is being written). Other OS errors are raised for the caller to put in its own words."""
    tmp = aside(path)
    try:
        tmp.write_text(text)
        try:
            os.link(tmp, path)
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):  # (a filesystem without links)
                raise
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "w") as fh:
                fh.write(text)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


# how torch.save says a write was cut short (it gives no OS error: a full disk reads "[enforce fail at
# inline_container.cc:672] . unexpected pos ...", or "PytorchStreamWriter failed writing file ...")
TORCH_WRITE_FAILED = ("inline_container.cc", "PytorchStreamWriter failed", "unexpected pos", "file write failed")
LOW_SPACE = 64 * 2 ** 20  # bytes: less than this left beside a failed write is a full disk


def torch_write_failure(exc: BaseException, path: Path | str) -> OSError | None:
    """torch.save's failure to write `path` as the OS error it stands for: no space when the disk under it is
    (nearly) full, else an input/output error; None for any other exception (a bug keeps its traceback)."""
    if not isinstance(exc, RuntimeError) or not any(text in str(exc) for text in TORCH_WRITE_FAILED):
        return None
    where = Path(path)
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        found = os.statvfs(where)
        full = found.f_bavail * found.f_frsize < LOW_SPACE
    except OSError:
        full = False
    code = errno.ENOSPC if full else errno.EIO
    return OSError(code, os.strerror(code), str(path))


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path`; None when it is absent, unreadable, torn by a kill or not an object (the
    caller redoes or skips what it recorded)."""
    try:
        found = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):  # (JSONDecodeError is a ValueError)
        return None
    return found if isinstance(found, dict) else None


def save_weights(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str] | None = None) -> None:
    """safetensors, written under a temporary name, synced, then renamed into place."""
    tmp = aside(path)
    save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(tmp),
              metadata={"format": "pt", **(metadata or {})})
    fsync_path(tmp)
    os.replace(tmp, path)
    fsync_path(path.parent)


def export_state(model: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The weights to publish, with every module's `vitx_export(state, prefix)` applied in place: a module that
    trains extra weights beside a standard layer (LoRA's low-rank factors, say) folds them into the layer's own
    keys, so model.safetensors stays a plain backbone that loads anywhere (the training state keeps them apart)."""
    wrappers = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod")  # not in state-dict keys
    for name, module in model.named_modules():
        fold = getattr(module, "vitx_export", None)
        if callable(fold):
            parts = [p for p in name.split(".") if p and p not in wrappers]
            fold(state, "".join(f"{p}." for p in parts))
    return state


def nonfinite(state: dict[str, torch.Tensor]) -> list[str]:
    """The names of the floating-point tensors of `state` that hold NaN or infinite values (weights no run
    publishes, or starts from)."""
    return [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """Load a safetensors file; a missing or damaged file is a user error, not a traceback."""
    if not path.exists():
        raise VitxError(f"no weights at {path}")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise VitxError(f"{path} is not a readable safetensors file ({exc})") from None


def read_record(path: Path) -> dict[str, Any] | None:
    """A JSON object vitx wrote (atomically: never torn), None when the file is absent; a damaged one (not JSON,
    not an object) is one line naming it, never a page or a result that misreads it."""
    if not Path(path).exists():
        return None
    found = read_json(path)
    if not isinstance(found, dict):
        raise VitxError(f"{path} is damaged: not the JSON object vitx writes")
    return found


def read_json(path: Path) -> Any:
    """A JSON file vitx wrote, read as untrusted input: unreadable, not JSON or nested beyond what Python parses
    (a damaged or hostile file) is one line, never a traceback."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise VitxError(f"cannot read {path} ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise VitxError(f"{path} is not valid JSON (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise VitxError(f"{path} is not valid JSON ({exc})") from None
    except RecursionError:
        raise VitxError(f"{path} is not valid JSON (nested too deeply to read: damaged or not vitx's)") from None


def read_config(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / "config.json"
    if not path.exists():
        raise VitxError(f"{run_dir} is not a vitx checkpoint (no config.json)")
    return read_json(path)

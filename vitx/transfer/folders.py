"""Where a transfer writes (the layout is in protocol.py's docstring), and the checks that keep two different
transfers out of one folder: each task's transfer.json, the suite's suite.json."""
from __future__ import annotations

import contextlib
import hashlib
import json
import re
from pathlib import Path
from typing import Any, Iterable

from ..safe_io import atomic_write_text, create_whole, read_json_object
from ..errors import VitxError, cannot_write
from ..runs.rundir import mark_run
from ..settings import current_values, flags
from ..tasks import Task
from .config import TransferConfig, result_settings

SUITE = "suite.json"  # the suite's result settings and tasks: every process that joins the folder must match them


def _folder_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name.replace("/", "-")).strip("-")


def task_dir(cfg: TransferConfig, task: Task) -> Path:
    """`<output>/vtab-dtd`; a data task's folder is named after its data (`--task ~/data/photos` → `data-photos`)."""
    name = task.name if task.data is None else "data-" + Path(task.name.rstrip("/")).name
    return Path(cfg.output_dir) / _folder_name(name)


def task_dirs(cfg: TransferConfig, tasks: list[Task]) -> dict[str, Path]:
    """Each task's folder, by task name: `task_dir`'s, unless data tasks of one transfer share it (`--task
    a/photos,b/photos`): then each is named after as much of its path as tells them apart (data-a-photos,
    data-b-photos), or, where no part does, its path's hash. Deterministic: a resumed transfer finds its own."""
    named = {t.name: task_dir(cfg, t) for t in tasks}
    for folder in sorted({f for f in named.values() if list(named.values()).count(f) > 1}):  # (not hash order)
        group = [t for t in tasks if named[t.name] == folder and t.data is not None]
        parts = {t.name: Path(t.name.rstrip("/")).parts for t in group}
        taken = {f.name for n, f in named.items() if n not in parts}
        for depth in range(2, max((len(p) for p in parts.values()), default=0) + 1):
            names = {n: "data-" + _folder_name("-".join(p[-depth:])) for n, p in parts.items()}
            if len(set(names.values())) == len(names) and not taken & set(names.values()):
                break
        else:
            names = {n: f"{folder.name}-{hashlib.sha256(n.encode()).hexdigest()[:8]}" for n in parts}
        named.update({n: Path(cfg.output_dir) / name for n, name in names.items()})
    return named


def point_dir(root: Path, lr: float, steps: int) -> Path:
    """A sweep point's run: `<task>/sweep/lr0.01_steps500`."""
    return root / "sweep" / f"lr{lr:g}_steps{steps}"


def final_dir(root: Path, index: int, seed: int) -> Path:
    """The final run of the `index`-th seed: `<task>/final` for the first, `<task>/final-seed<s>` for the others."""
    return root / ("final" if index == 0 else f"final-seed{seed}")


def write_json(path: Path, data: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(data, indent=2))
    except OSError as exc:  # a read-only or full disk, a file where a folder goes: one line
        raise VitxError(f"{cannot_write(path.parent, exc)}; choose another --output-dir") from None


def started(root: Path) -> bool:
    """Whether a task's transfer has trained or fitted anything there: a sweep point, a final run, a result. A
    record (transfer.json) without any is no transfer: a run that failed or was killed before training."""
    return (root / "result.json").exists() or (root / "sweep").exists() or any(root.glob("final*"))


def _other_task(recorded: Any, name: str) -> bool:
    """Whether a task folder's recorded task is surely not `name`: two local paths that are different folders,
    or two names that are not paths here (registered tasks, hf:NAME). A path spelt another way, or from another
    directory, is given the benefit of the doubt, as before tasks were recorded."""
    if not isinstance(recorded, str) or recorded.rstrip("/") == name.rstrip("/"):
        return False
    a, b = Path(recorded).expanduser(), Path(name).expanduser()
    if a.exists() and b.exists():
        return a.resolve() != b.resolve()
    return not a.exists() and not b.exists()


def forget_task(root: Path) -> None:
    """Take back the record of a task that trained nothing (its setup failed), so that the corrected command runs
    as new, without --resume: transfer.json goes, and the folder when that leaves it empty."""
    if started(root):
        return
    (root / "transfer.json").unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        root.rmdir()


# Settings added since transfers were first recorded, as the transfers made before them ran
BEFORE_RECORDED = {"drop_path_mode": "mask"}


def _changed(saved: dict[str, Any], settings: dict[str, Any]) -> list[str]:
    """The settings whose recorded value differs (a setting newer than the record counts as what the recorded
    transfer ran with: BEFORE_RECORDED's value, else the same)."""
    return [k for k, v in settings.items() if saved.get(k, BEFORE_RECORDED.get(k, v)) != v]


def _shown(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def _differences(saved: dict[str, Any], settings: dict[str, Any]) -> str:
    """`--lrs 0.01,0.1 there, 0.01,0.3 here; --seed 0 there, 1 here`."""
    named = flags(TransferConfig)
    return "; ".join(f"{named.get(k, k)} {_shown(saved.get(k, BEFORE_RECORDED.get(k)))} there, {_shown(settings[k])} here"
                     for k in _changed(saved, settings))


def check_task(cfg: TransferConfig, task: Task, resume: bool, root: Path) -> None:
    """Refuse to mix two different transfers in one task folder: another task's, or this task's with other
    settings; without `resume`, any that has trained something."""
    saved = read_json_object(root / "transfer.json")
    if saved is None or not started(root):  # (a record that trained nothing blocks nothing: it is replaced)
        return
    saved = current_values(TransferConfig, saved)  # (a setting's former value names)
    if _other_task(saved.get("task"), task.name):
        raise VitxError(f"{root} holds a transfer of {saved['task']}, not {task.name}; choose another --output-dir")
    if not resume:
        raise VitxError(f"{root} already holds a transfer of {task.name}; pass --resume to continue it, or choose "
                        "another --output-dir")
    settings = result_settings(cfg)
    if _changed(saved, settings):
        raise VitxError(f"{root} holds a transfer with different settings ({_differences(saved, settings)}); "
                        f"continue it with the settings of {root / 'transfer.json'}, or choose another --output-dir")


def record_task(cfg: TransferConfig, task: Task, resume: bool, root: Path) -> dict[str, Any] | None:
    """Write the task's transfer.json (its settings), after `check_task`; its finished result (None until there
    is one)."""
    check_task(cfg, task, resume, root)
    own(Path(cfg.output_dir))
    write_json(root / "transfer.json", {"task": task.name, **result_settings(cfg)})
    return read_json_object(root / "result.json")


def own(output: Path) -> None:
    """Mark the transfer's --output-dir as vitx's (runs/ownership.py) before the first file is written there."""
    try:
        output.mkdir(parents=True, exist_ok=True)
        mark_run(output)
    except OSError as exc:
        raise VitxError(f"{cannot_write(output, exc)}; choose another --output-dir") from None


def check_suite(cfg: TransferConfig, tasks: list[str], joining: bool, begun: bool, write: bool = True,
                folders: Iterable[Path] = ()) -> bool:
    """The suite's settings (`result_settings`) and tasks, recorded once in `<output>/suite.json`: every process
    that joins the folder (a shard, a job, a --resume) must have the same ones, or is refused in one line naming
    what differs. `joining`: this process expects others' work there; `begun`: some task has trained something.
    A record that nothing was trained under binds only processes that join (shards started together); a lone
    new transfer replaces it (its predecessor failed before training). A task trained there that `tasks` leaves
    out is refused (the summary would lose it; `folders`, this call's task folders, say their own refusals).
    `write`: False only checks. Returns whether this call wrote it."""
    from ..runs.trained import start_step

    output = Path(cfg.output_dir)
    path = output / SUITE
    step = start_step(cfg.start)
    record = {"tasks": tasks, "settings": result_settings(cfg), **({"start_step": step} if step is not None else {})}
    others = _others_done(output, tasks, {Path(f).resolve() for f in folders}) if output.is_dir() else []
    if others:  # a transfer of other tasks here would leave these out of the folder's summary and page
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise VitxError(f"{output} holds a transfer of {shown} too: name every task of the folder in --task (with "
                        "--resume) to add tasks to it, or choose another --output-dir")
    if write:
        own(output)
        if _create(path, record):
            return True
    saved = read_json_object(path)
    if saved is None or not (joining or begun):
        if write:
            write_json(path, record)
        return write
    began = saved.get("start_step")
    if isinstance(began, int) and step is not None and began != step:  # --from trained on since the suite began
        raise VitxError(f"{output} holds a transfer from {cfg.start} at step {began}, which is at step {step} now: "
                        "its items left would start from another model than those done; transfer it into another "
                        "--output-dir")
    if saved.get("tasks") != tasks:
        if cfg.shard:  # the shards of one suite must partition the same work list
            raise VitxError(f"{output} holds a suite of other tasks ({', '.join((saved.get('tasks') or [])[:3])}, "
                            "...); a shard must run the suite's --task")
        if write:  # a resumed transfer may add tasks (each task folder checks its own settings)
            write_json(path, record)
        return write
    before = current_values(TransferConfig, saved.get("settings") or {})
    if _changed(before, record["settings"]):
        raise VitxError(f"{output} holds a transfer with different settings ({_differences(before, record['settings'])}"
                        f"); run it with the settings of {path}, or choose another --output-dir")
    return False


def _others_done(output: Path, tasks: list[str], own: set[Path]) -> list[str]:
    """The tasks other than `tasks` that a transfer into `output` has trained something of (in folders other than
    `own`)."""
    try:
        folders = [p for p in output.iterdir() if p.is_dir() and (p / "transfer.json").is_file()
                   and p.resolve() not in own]
    except OSError:
        return []
    named = [((read_json_object(p / "transfer.json") or {}).get("task") or p.name, p) for p in folders]
    return sorted(str(name) for name, p in named if all(_other_task(name, t) for t in tasks) and started(p))


def _create(path: Path, record: dict[str, Any]) -> bool:
    """Write `path` only if no file is there (atomically: of processes started together, one writes it)."""
    try:
        return create_whole(path, json.dumps(record, indent=2))  # the first writer's record stands
    except OSError as exc:
        raise VitxError(f"{cannot_write(path.parent, exc)}; choose another --output-dir") from None


def drop_suite(cfg: TransferConfig) -> None:
    """Take back a suite.json this process wrote when it failed before any task trained (as `forget_task`)."""
    (Path(cfg.output_dir) / SUITE).unlink(missing_ok=True)

"""Transfer tasks, registered by name (`vtab/dtd`, ...): which data, which labels, which splits.

`base.py` says what a task is, `vtab.py` and `embedded.py` register them, `splits.py` opens a task's splits
from a local copy (`hub.py`: the hub's WebDataset layout; `data/release.py`: the VTAB-1k folder release),
the embedded generator or the hub.
"""
from __future__ import annotations

from pathlib import Path

from ..data.opener import DataOptions, looks_like_data
from ..errors import VitxError, first_line
from ..registry import TASKS
from ..spec import split_specs
from . import vtab  # noqa: F401  (registers the VTAB-1k tasks)
from . import embedded  # noqa: F401,E402  (then the embedded ones)
from .base import Task
from .custom import data_task
from .splits import TaskSplits, open_full_splits, open_task
from .vtab import GROUPS

__all__ = ["GROUPS", "Task", "TaskSplits", "get_task", "open_full_splits", "open_task", "select_tasks"]


def get_task(name: str) -> Task:
    """The registered task (a `Task`, or a registered function that returns one)."""
    entry = TASKS.get(name)
    if isinstance(entry.obj, Task):
        return entry.obj
    if not callable(entry.obj):
        raise VitxError(f"task '{name}' ({entry.source}) is registered as {type(entry.obj).__name__}, not a "
                        "vitx.tasks.Task (or a function returning one)")
    try:
        task = entry.obj()
    except Exception as exc:  # noqa: BLE001 - a plugin's task function: one line naming it, never a traceback
        raise VitxError(f"task '{name}' ({entry.source}) failed to build: {type(exc).__name__}: {first_line(exc)}")
    if not isinstance(task, Task):
        raise VitxError(f"task '{name}' ({entry.source}) is registered as {type(task).__name__}, not a vitx.tasks.Task")
    return task


def _identity(task: Task) -> str:
    """What makes two tasks one: a data task's folder however it is spelled (`d`, `./d/`, a link), else its name."""
    path = Path(task.data).expanduser() if task.data else None
    return str(path.resolve()) if path is not None and path.exists() else task.name


def select_tasks(spec: str, data: DataOptions | None = None) -> list[Task]:
    """A task name, `<suite>/all`, `<suite>/<group>` (natural, specialized, structured), an fnmatch pattern, or
    labelled data (a path, hf:NAME, shards: `custom.py`), read with `data`'s keys; or several of these,
    comma-separated (`vtab/dtd,vtab/pets`: a suite of two), each task once, in the order given."""
    items = split_specs(spec) if "," in spec and not Path(spec).expanduser().exists() else [spec]
    if len(items) > 1:
        chosen: dict[str, Task] = {}
        for item in items:
            for task in select_tasks(item, data):
                chosen.setdefault(_identity(task), task)
        return list(chosen.values())
    suite, _, rest = spec.partition("/")
    names = TASKS.names()
    if spec not in names and looks_like_data(spec):
        return [data_task(spec, data or DataOptions())]
    if rest == "all":
        chosen = [n for n in names if n.startswith(f"{suite}/")]
    elif rest in GROUPS:
        chosen = [n for n in names if n.startswith(f"{suite}/") and get_task(n).group == rest]
    elif any(c in spec for c in "*?["):
        chosen = TASKS.names(spec)
    else:
        if spec not in names and suite not in {n.split("/")[0] for n in names}:
            raise VitxError(f"unknown task '{spec}': not a registered task (see `vitx tasks`), and no data at that "
                            "path (a folder, a data file, tar shards or hf:NAME)")
        return [get_task(spec)]
    if not chosen:
        raise VitxError(f"no task matches '{spec}'; see `vitx tasks`")
    return [get_task(n) for n in chosen]

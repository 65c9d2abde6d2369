"""Transfer tasks, registered by name (`vtab/dtd`, ...): which data, which labels, which splits.

`base.py` says what a task is, `vtab.py` and `embedded.py` register them, `splits.py` opens a task's splits
from a local copy (`hub.py`: the hub's WebDataset layout; `folder_release.py`: the VTAB-1k folder release),
the embedded generator or the hub.
"""
from __future__ import annotations

from ..errors import VitxError
from ..registry import TASKS
from . import vtab  # noqa: F401  (registers the VTAB-1k tasks)
from . import embedded  # noqa: F401,E402  (then the embedded ones)
from .base import SubsetSource, Task
from .splits import TaskSplits, open_full_splits, open_task
from .vtab import GROUPS

__all__ = ["GROUPS", "SubsetSource", "Task", "TaskSplits", "get_task", "open_full_splits", "open_task", "select_tasks"]


def get_task(name: str) -> Task:
    """The registered task (a `Task`, or a registered function that returns one)."""
    obj = TASKS.get(name).obj
    task = obj if isinstance(obj, Task) else obj()
    if not isinstance(task, Task):
        raise VitxError(f"task '{name}' is registered as {type(task).__name__}, not a vitx.tasks.Task")
    return task


def select_tasks(spec: str) -> list[Task]:
    """A task name, `<suite>/all`, `<suite>/<group>` (natural, specialized, structured) or an fnmatch pattern."""
    suite, _, rest = spec.partition("/")
    names = TASKS.names()
    if rest == "all":
        chosen = [n for n in names if n.startswith(f"{suite}/")]
    elif rest in GROUPS:
        chosen = [n for n in names if n.startswith(f"{suite}/") and get_task(n).group == rest]
    elif any(c in spec for c in "*?["):
        chosen = TASKS.names(spec)
    else:
        return [get_task(spec)]
    if not chosen:
        raise VitxError(f"no task matches '{spec}'; see `vitx tasks`")
    return [get_task(n) for n in chosen]

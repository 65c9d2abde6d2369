"""vitx: pre-train Vision Transformers and transfer them to new tasks (Dosovitskiy et al., 2021).

`import vitx` is cheap: the registry and errors load at once; what needs torch or timm (building a backbone,
an objective, loading a checkpoint) is imported on first use."""
from .runner.preemption import starting as _starting

_starting()  # `vitx ...`, `python -m vitx ...`: a stop signal or Ctrl-C is one line from vitx's first moment on

from importlib.metadata import PackageNotFoundError, version  # noqa: E402
from typing import TYPE_CHECKING

try:
    __version__ = version("vitx")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+source"

from .errors import VitxError  # noqa: E402
from .lazy import lazy_exports  # noqa: E402
from .registry import (ADAPTERS, BACKBONES, EVALUATORS, OBJECTIVES, TASKS, Registry, register_adapter,  # noqa: E402
                       register_backbone, register_evaluator, register_objective, register_task, temporary)
from . import discovery as _discovery  # noqa: E402,F401  (installs plugin discovery in the registry)

if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from .backbones import create_backbone
    from .runs import load_backbone
    from .objectives import Objective, create_objective
    from .objectives.options import option
    from .data.views import View

__all__ = ["__version__", "ADAPTERS", "BACKBONES", "EVALUATORS", "OBJECTIVES", "TASKS", "register_adapter",
           "register_evaluator", "register_task",
           "temporary", "Objective", "Registry", "View", "VitxError", "create_backbone",
           "create_objective", "load_backbone", "option", "register_backbone", "register_objective"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "create_backbone": ".backbones", "load_backbone": ".runs", "Objective": ".objectives",
    "create_objective": ".objectives", "option": ".objectives.options", "View": ".data.views"})

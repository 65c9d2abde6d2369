"""vitx: pre-train Vision Transformers and transfer them to new tasks (Dosovitskiy et al., 2021)."""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("vitx")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+source"

from .backbones import create_backbone  # noqa: E402
from .checkpoint import load_backbone  # noqa: E402
from .errors import VitxError  # noqa: E402
from .objectives import Objective, create_objective  # noqa: E402
from .registry import (ADAPTERS, BACKBONES, OBJECTIVES, TASKS, Registry, register_adapter,  # noqa: E402
                       register_backbone, register_objective, register_task, temporary)

__all__ = ["__version__", "ADAPTERS", "BACKBONES", "OBJECTIVES", "TASKS", "register_adapter", "register_task",
           "temporary", "Objective", "Registry", "VitxError", "create_backbone",
           "create_objective", "load_backbone", "register_backbone", "register_objective"]

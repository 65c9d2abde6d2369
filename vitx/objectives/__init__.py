"""Pre-training objectives, registered by name; `create_objective` builds one around a backbone."""
from __future__ import annotations

from typing import Any

import torch.nn as nn

from ..errors import VitxError
from ..registry import OBJECTIVES
from . import mpp, supervised  # noqa: F401  (registers "mpp" and "supervised")
from .base import Objective
from .options import Fitted, option

__all__ = ["Fitted", "Objective", "create_objective", "fit_to_data", "option"]


def create_objective(name: str, backbone: nn.Module, num_classes: int | None, /, **options: Any) -> Objective:
    """Build objective `name` on `backbone`; `num_classes` comes from the data (None when unlabeled)."""
    cls = OBJECTIVES.get(name).obj
    if getattr(cls, "needs_labels", False):
        if not num_classes:
            raise VitxError(f"objective '{name}' needs labelled data; this dataset has no labels")
        if num_classes < 2:
            raise VitxError(f"objective '{name}' trains a classifier, which needs two or more classes; this dataset "
                            "has one")
        given = options.pop("num_classes", num_classes)
        if given != num_classes:
            raise VitxError(f"objective '{name}' takes its classes from the data, which has {num_classes}; drop "
                            f"num_classes={given} (to use other labels, name them with --label-key)")
        options["num_classes"] = num_classes
    try:
        return cls(backbone, **options)
    except TypeError as exc:
        raise VitxError(f"bad options for objective '{name}': {exc}") from None


def fit_to_data(name: str, options: dict[str, Any], images: int | None, steps: int) -> Fitted | None:
    """What objective `name` chooses from the number of training `images` (and the run's `steps`) among the
    options the user left unset
    (`Objective.fit_to_data`), after the given `options` are checked against its declaration; None for a stream
    (`images` None: its size is unknown) or when it fits nothing."""
    cls = OBJECTIVES.get(name).obj
    if images is None or not hasattr(cls, "fit_to_data"):
        return None
    given = {k: v for k, v in options.items() if k != "num_classes"}  # (the data's, never fitted)
    cls.checked(given)
    return cls.fit_to_data(given, images, steps)

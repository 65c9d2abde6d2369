"""The adapter contract: how a pre-trained backbone becomes a classifier for a new task.

A transfer model is a classification objective (`backbone` + `head`, see `objectives.supervised`). Adapters
change it in place, one per role, applied in role order:

  input   what the backbone sees (position embeddings resized to the fine-tuning resolution)
  head    what replaces the pre-training head (the paper's zero-initialised linear layer)
  method  what is trained: every weight, only the head, added low-rank weights, ... or nothing at all when
          the method solves for the head in closed form (`closed_form = True`, e.g. few-shot least squares)

`vitx transfer` fills each role with its default unless `--adapter` names another adapter of that role.
"""
from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, ClassVar

import torch.nn as nn

ROLES = ("input", "head", "method")

# The transfer settings (vitx/transfer/config.py) that only a trained run reads: a method that solves for its head
# in closed form has no use for any of them (`Adapter.ignores`)
TRAINING = ("protocol", "sweep", "select", "lrs", "sweep_steps", "lr", "steps", "seeds", "augment", "crop_scale",
            "hflip", "randaugment", "random_erasing", "mixup", "cutmix", "label_smoothing", "optimizer",
            "weight_decay", "layer_decay", "drop_path", "drop_path_mode", "ema_decay", "batch_size", "grad_accum", "warmup",
            "grad_clip", "precision", "compile", "log_with")


@dataclass(frozen=True)
class AdaptContext:
    """What an adapter may need to know about the transfer it is part of."""

    image_size: int  # fine-tuning resolution
    num_classes: int


class Adapter:
    """Base class: subclasses set `role` and implement `apply`; options arrive as keyword arguments."""

    role: ClassVar[str] = "method"
    closed_form: ClassVar[bool] = False  # the head is solved for, not trained by the runner
    # Transfer settings this method never reads, and why (one clause): `vitx transfer` refuses any of them set
    # to other than its default, so that a result never records a setting that did nothing
    ignores: ClassVar[tuple[str, ...]] = ()
    ignores_because: ClassVar[str] = ""
    # The settings the setup behind this method's published rows trains with, beyond what the parameter-efficient
    # papers share (LoRA: NOAH's script's lr and drop-path), and where they are written (file:line and values):
    # `--protocol peft` takes them wherever the command line leaves them unset, and the header and result.json say
    # each came from `reference_source` (vitx/transfer/config.py, protocol_preset). {}: the shared preset alone
    reference: ClassVar[dict[str, Any]] = {}
    reference_source: ClassVar[str] = ""
    name: str = "adapter"  # set by `create_adapter` to the name it was registered under

    def __init__(self, **options: Any) -> None:
        self.options = dict(options)

    def apply(self, model: nn.Module, ctx: AdaptContext) -> None:
        """Change `model` (with `.backbone` and `.head`) in place."""
        raise NotImplementedError

    def describe(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"{self.name}({opts})" if opts else self.name


def freeze(module: nn.Module) -> None:
    """No gradients, and eval mode for good: a frozen backbone's drop-path and dropout stay off while the rest of
    the model trains (a linear probe reads the features evaluation reads)."""
    module.requires_grad_(False)
    module.eval()
    module.train = types.MethodType(lambda self, mode=True: self, module)  # model.train() leaves it in eval


def trainable_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)

"""A moving average of the weights (`--ema-decay`): timm's `ModelEmaV3` of the whole objective (backbone and
heads), updated after every optimiser step with timm's warm-up (decay ≤ 1 − (1 + step)^(−2/3): early steps
follow the live weights closely), evaluated and monitored beside them, and saved with every checkpoint.

A checkpoint holds it twice: `accelerate/ema.safetensors`, the average as it is (what `--resume` loads, so a
resumed run continues it bit for bit), and `ema.safetensors` / `ema_heads.safetensors`, laid out as
`model.safetensors` / `heads.safetensors` (adapters merged), which `--use-ema` reads in place of the live
weights. The warm-up depends on the step alone, so nothing else needs saving."""
from __future__ import annotations

from pathlib import Path

import torch
from accelerate.utils import DistributedType

from ..safe_io import read_weights
from ..errors import VitxError

RAW = "ema.safetensors"  # inside the checkpoint's accelerate/ folder: the average as it is, for --resume


def make_ema(objective: torch.nn.Module, decay: float, distributed: DistributedType) -> torch.nn.Module | None:
    """The average of `objective` (the unwrapped module, on its device), or None when `decay` is 0."""
    if decay <= 0:
        return None
    if distributed in (DistributedType.FSDP, DistributedType.DEEPSPEED):
        raise VitxError(f"--ema-decay keeps a whole copy of the model on every process, which {distributed.value} "
                        "shards; use DDP (or one process) for a run with an EMA")
    if getattr(objective, "teacher_backbone", lambda: None)() is not None:
        raise VitxError("this objective keeps its own moving average of the weights (its teacher: teacher.safetensors, "
                        "`vitx export --export-teacher`); drop --ema-decay")
    from timm.utils import ModelEmaV3

    return ModelEmaV3(objective, decay=decay, use_warmup=True)


def load_ema(ema: torch.nn.Module, checkpoint: Path) -> None:
    """Continue the average saved in `checkpoint` (strictly: a checkpoint written without one is refused)."""
    path = checkpoint / "accelerate" / RAW
    if not path.is_file():
        raise VitxError(f"{checkpoint} holds no EMA of the weights (the run was started without --ema-decay); "
                        "resume it without --ema-decay, or start a new run")
    state = read_weights(path)
    missing, unexpected = ema.module.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise VitxError(f"{path} does not match this run's model (missing {len(missing)}, unexpected "
                        f"{len(unexpected)} keys); delete that checkpoint to resume from the one before it")


__all__ = ["RAW", "load_ema", "make_ema"]

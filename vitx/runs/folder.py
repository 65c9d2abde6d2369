"""A vitx run or checkpoint folder's model: its backbone rebuilt from config.json's record and loaded from
model.safetensors (strictly), and the pre-training head's representation layer from heads.safetensors.
Safetensors only: nothing is unpickled."""
from __future__ import annotations

from pathlib import Path

import torch.nn as nn

from ..adapters.vpt import restore_prompts
from ..safe_io import read_config, read_weights
from ..errors import VitxError
from ..evaluation.representation import LAYER_KEY, tanh_layer
from .rundir import RUN_MARK, weights_file


def require_teacher(run_dir: str | Path) -> None:
    """One line when a run's objective kept no teacher (`--export-teacher` of a run without one)."""
    if not weights_file(run_dir, teacher=True).is_file():
        raise VitxError(f"{run_dir} has no teacher (teacher.safetensors: its objective keeps none, as DINO's "
                        "does); drop --export-teacher")


def require_ema(run_dir: str | Path, named: str | None = None) -> None:
    """One line when a run saved no moving average of its weights (`--use-ema` without `--ema-decay`); `named`:
    how the run was given (`--from DIR`), default its path."""
    if not weights_file(run_dir, ema=True).is_file():
        raise VitxError(f"{named or run_dir} has no moving average of its weights (ema.safetensors: it was trained "
                        "without --ema-decay); drop --use-ema")


def load_backbone(run_dir: str | Path, ema: bool = False) -> nn.Module:
    """Rebuild the backbone saved in a vitx run or checkpoint directory and load its weights (strictly), the
    moving average of them with `ema`."""
    from ..backbones import create_backbone
    from ..backbones.spec import check_saved_backbone

    run_dir = Path(run_dir)
    if not (run_dir / "config.json").exists() and (run_dir / RUN_MARK).is_file():
        raise VitxError(f"{run_dir} is a vitx run that has no checkpoint yet (it stopped before its first; --resume "
                        "in it starts it again)")
    config = read_config(run_dir)
    if ema:
        require_ema(run_dir)
    path = weights_file(run_dir, ema)
    if isinstance(config, dict) and path.is_file():  # checked as export and predict check it, before any build
        check_saved_backbone(config.get("backbone"), path, f"{run_dir}/config.json")
    record = config.get("backbone") if isinstance(config, dict) else None
    if not isinstance(record, dict):  # (a config.json that is a list, say: damaged or not vitx's)
        raise VitxError(f"{run_dir}/config.json has no backbone record; not a vitx checkpoint")
    try:
        model = create_backbone(record["name"], **record["overrides"])
    except KeyError as exc:
        raise VitxError(f"{run_dir}/config.json lacks {exc}; not a vitx checkpoint") from None
    if isinstance(record.get("prompts"), dict):  # VPT's prompt tokens are backbone weights: rebuilt, then loaded
        restore_prompts(model, record["prompts"])
    state = read_weights(path)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise VitxError(f"{path} does not match {record['name']} "
                        f"(missing {len(missing)}, unexpected {len(unexpected)} keys)")
    return model


def saved_layer(run_dir: str | Path, ema: bool = False) -> nn.Sequential | None:
    """The representation layer saved with a vitx run or checkpoint (its heads.safetensors, or the moving
    average's ema_heads.safetensors), or None."""
    path = weights_file(run_dir, ema, heads=True)
    heads = read_weights(path) if path.exists() else {}
    if f"{LAYER_KEY}.weight" not in heads:
        return None
    return tanh_layer(heads[f"{LAYER_KEY}.weight"], heads[f"{LAYER_KEY}.bias"])


__all__ = ["load_backbone", "require_ema", "require_teacher", "saved_layer", "weights_file"]

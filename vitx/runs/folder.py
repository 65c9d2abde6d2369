"""A vitx run or checkpoint folder's model: its backbone rebuilt from config.json's record and loaded from
model.safetensors (strictly), and the pre-training head's representation layer from heads.safetensors.
Safetensors only: nothing is unpickled."""
from __future__ import annotations

from pathlib import Path

import torch.nn as nn

from ..checkpoint import read_config, read_weights
from ..errors import VitxError
from ..evaluation.representation import LAYER_KEY, tanh_layer


def load_backbone(run_dir: str | Path) -> nn.Module:
    """Rebuild the backbone saved in a vitx run or checkpoint directory and load its weights (strictly)."""
    from ..backbones import create_backbone

    run_dir = Path(run_dir)
    config = read_config(run_dir)
    try:
        record = config["backbone"]
        model = create_backbone(record["name"], **record["overrides"])
    except KeyError as exc:
        raise VitxError(f"{run_dir}/config.json lacks {exc}; not a vitx checkpoint") from None
    state = read_weights(run_dir / "model.safetensors")
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise VitxError(f"{run_dir}/model.safetensors does not match {record['name']} "
                        f"(missing {len(missing)}, unexpected {len(unexpected)} keys)")
    return model


def saved_layer(run_dir: str | Path) -> nn.Sequential | None:
    """The representation layer saved with a vitx run or checkpoint (its heads.safetensors), or None."""
    path = Path(run_dir) / "heads.safetensors"
    heads = read_weights(path) if path.exists() else {}
    if f"{LAYER_KEY}.weight" not in heads:
        return None
    return tanh_layer(heads[f"{LAYER_KEY}.weight"], heads[f"{LAYER_KEY}.bias"])


__all__ = ["load_backbone", "saved_layer"]

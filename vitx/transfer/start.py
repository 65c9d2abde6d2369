"""Where a transfer starts: a vitx run or checkpoint directory, a timm ViT (`timm:<name>`, its pretrained
weights: online users), or `scratch` (a randomly initialised `--model`, the paper's "from scratch" baseline).

Weights are read from safetensors only; nothing a user points at is ever unpickled.
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from ..backbones import create_backbone
from ..checkpoint import load_backbone
from ..errors import VitxError
from ..spec import parse_spec

SCRATCH = "scratch"


def load_start(start: str, model: str | None = None, seed: int = 0) -> nn.Module:
    """The backbone a transfer starts from, at its own resolution (interpolation comes later, as an adapter).

    `scratch` is initialised from `seed` alone (the caller's generators are left as they were), so a
    from-scratch baseline is the same network every time it is asked for."""
    if model and start != SCRATCH:
        raise VitxError(f"--model is for --from scratch; --from {start} brings its own backbone (drop --model)")
    if start == SCRATCH:
        if not model:
            raise VitxError("--from scratch needs --model (e.g. --model vit-nano/4)")
        name, options = parse_spec(model)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            backbone = create_backbone(name, **options)
    elif start.startswith("timm:"):
        name, options = parse_spec(start)
        options.setdefault("pretrained", True)
        backbone = create_backbone(name, **options)
        # the weights travel in model.safetensors: rebuilding the saved model must not fetch them again (offline)
        backbone.vitx_record["overrides"].pop("pretrained", None)
    else:
        path = Path(start).expanduser()
        if not path.exists():
            first = " (run `vitx pretrain` first)" if start == "runs/pretrain" else ""
            raise VitxError(f"--from {start}: no such checkpoint directory{first}; give a vitx run or checkpoint "
                            "directory, timm:<name>, or scratch")
        if path.is_file():
            raise VitxError(f"--from {start} is a file; give the vitx run or checkpoint directory that holds "
                            "config.json and model.safetensors")
        backbone = load_backbone(path)
    if not hasattr(backbone, "pos_embed") or not hasattr(backbone, "patch_embed") or \
            not hasattr(backbone, "embed_dim"):
        raise VitxError(f"--from {start} is not a Vision Transformer (no patch_embed / pos_embed)")
    return backbone

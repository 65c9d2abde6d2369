"""Stochastic depth (drop-path) set on a built backbone: for a start whose weights are loaded, at transfer and
for `--from`, as timm's `drop_path_rate` sets it at construction."""
from __future__ import annotations

import torch.nn as nn

from ..errors import VitxError


def set_drop_path(backbone: nn.Module, rate: float) -> None:
    """Block i of L drops its residual branches with probability rate · i / (L − 1) (timm's linear rule, as its
    `drop_path_rate` gives): block 0 never, the last block at `rate`. 0 removes drop-path."""
    from timm.layers import DropPath

    blocks = list(getattr(backbone, "blocks", ()))
    if not blocks or not all(hasattr(b, "drop_path1") and hasattr(b, "drop_path2") for b in blocks):
        if rate > 0:
            raise VitxError("--drop-path needs a ViT backbone whose blocks have drop_path1/drop_path2 (timm's Block)")
        return
    for i, block in enumerate(blocks):
        p = rate * i / max(1, len(blocks) - 1)
        block.drop_path1 = DropPath(p) if p > 0 else nn.Identity()
        block.drop_path2 = DropPath(p) if p > 0 else nn.Identity()

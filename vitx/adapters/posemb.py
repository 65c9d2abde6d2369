"""Position-embedding interpolation for fine-tuning at another resolution (paper §3.2, Appendix B.1.1).

The patch size stays fixed, so a higher resolution means a longer sequence (224 → 384 px at patch 16:
14×14 → 24×24 patches). The [class] (prefix) embeddings are kept; the patch embeddings are laid out on their
2D grid and resized like an image. Non-square grids work: each side is resized independently.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import VitxError
from ..registry import register_adapter
from .base import AdaptContext, Adapter

MODES = ("bicubic", "bilinear")


def resample_pos_embed(pos_embed: torch.Tensor, new_grid: tuple[int, int], old_grid: tuple[int, int],
                       num_prefix_tokens: int = 1, mode: str = "bicubic", antialias: bool = True) -> torch.Tensor:
    """(1, P + h·w, D) → (1, P + H·W, D): prefix rows unchanged, the h×w grid resized to H×W."""
    if mode not in MODES:
        raise VitxError(f"position-embedding interpolation must be one of {', '.join(MODES)}, got '{mode}'")
    prefix, grid = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]  # (1, P, D), (1, h·w, D)
    (h, w), (nh, nw) = old_grid, new_grid
    if grid.shape[1] != h * w:
        raise VitxError(f"position embedding has {grid.shape[1]} patch positions, not the {h}×{w} grid expected")
    if (h, w) == (nh, nw):
        return pos_embed
    dim = grid.shape[-1]
    image = grid.reshape(1, h, w, dim).permute(0, 3, 1, 2).float()  # (1, D, h, w)
    image = F.interpolate(image, size=(nh, nw), mode=mode, antialias=antialias, align_corners=False)
    grid = image.permute(0, 2, 3, 1).reshape(1, nh * nw, dim).to(pos_embed.dtype)  # (1, H·W, D)
    return torch.cat([prefix, grid], dim=1)


def grid_of(backbone: nn.Module) -> tuple[int, int]:
    """A ViT's (rows, cols) of patches: the grid its position embeddings are laid out on."""
    return tuple(int(g) for g in backbone.patch_embed.grid_size)  # type: ignore[return-value]


def resize_backbone(backbone: nn.Module, image_size: int | tuple[int, int], mode: str = "bicubic") -> nn.Module:
    """A copy of `backbone` built for `image_size`, with every weight carried over and the position embeddings
    interpolated. Returns `backbone` itself when the size already matches."""
    from ..backbones import create_backbone

    size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    if tuple(backbone.patch_embed.img_size) == size:
        return backbone
    if not hasattr(backbone, "pos_embed") or backbone.pos_embed is None:
        raise VitxError("this backbone has no learned position embeddings to interpolate")
    record = getattr(backbone, "vitx_record", None)
    if record is None:
        raise VitxError("cannot rebuild this backbone at another size (it was not made by vitx.create_backbone)")
    overrides: dict[str, Any] = {k: v for k, v in record["overrides"].items() if k != "pretrained"}
    overrides["img_size"] = size[0] if size[0] == size[1] else size
    resized = create_backbone(record["name"], **overrides)
    if record.get("prompts"):  # a VPT-prompted backbone keeps its prompts
        from .vpt import restore_prompts

        restore_prompts(resized, record["prompts"])
    state = backbone.state_dict()
    old = grid_of(backbone)
    prefix = state["pos_embed"].shape[1] - old[0] * old[1]  # embedded prefix tokens (prompts have none)
    state["pos_embed"] = resample_pos_embed(state["pos_embed"], grid_of(resized), old, prefix, mode)
    try:
        resized.load_state_dict(state, strict=True)
    except RuntimeError as exc:  # a record that does not rebuild the same layout (say, with a classifier)
        said = [line.strip() for line in str(exc).strip().splitlines() if line.strip()][-1][:200]
        raise VitxError(f"cannot rebuild {record['name']} at {size[0]}×{size[1]}px with its own weights ({said})") \
            from None
    return resized


@register_adapter("resize-posemb",
                  description="2D-interpolate the patch position embeddings to the fine-tuning resolution "
                              "([class] kept); mode=bicubic|bilinear")
class ResizePosEmb(Adapter):
    role = "input"

    def __init__(self, mode: str = "bicubic") -> None:
        if mode not in MODES:
            raise VitxError(f"resize-posemb mode must be one of {', '.join(MODES)}, got '{mode}'")
        super().__init__(mode=mode)
        self.mode = mode

    def apply(self, model: nn.Module, ctx: AdaptContext) -> None:
        model.backbone = resize_backbone(model.backbone, ctx.image_size, self.mode)

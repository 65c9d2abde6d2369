"""A ViT's forward in its stages, public: patch embedding → [class] (and register) tokens and position embeddings
at any grid → blocks → final norm. Objectives that act between stages (MPP corrupts the patch embeddings, iBOT
masks them, DINO's local crops need positions at a smaller grid) call these instead of reaching into timm's
private `_pos_embed`; with nothing in between, `forward_tokens` is timm's `forward_features`, to the bit.

The stages are those of timm's `VisionTransformer` (the backbone contract, `backbones/__init__.py`); for another
layout (Eva's rotary positions, a user's model) `forward_tokens` runs the backbone's own `forward_features` and
applies `patches` through a hook on `patch_embed`, at the backbone's own grid only."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from ..errors import VitxError

# (pos_embed (1, prefix + G·G, D), grid (h, w), prefix) → the patches' positions at `grid`, (1, h·w, D)
Resample = Callable[[torch.Tensor, tuple[int, int], int], torch.Tensor]
# patch embeddings (B, N, D) → (B, N, D), before positions are added
Patches = Callable[[torch.Tensor], torch.Tensor]


def staged(backbone: nn.Module) -> bool:
    """Whether `backbone` runs timm's VisionTransformer stages (its `forward_features` is timm's own)."""
    from timm.models.vision_transformer import VisionTransformer

    return isinstance(backbone, VisionTransformer) and \
        type(backbone).forward_features is VisionTransformer.forward_features


def timm_resample(pos_embed: torch.Tensor, grid: tuple[int, int], prefix: int) -> torch.Tensor:
    """timm's resampling (`resample_abs_pos_embed`: bicubic, antialiased), as its `dynamic_img_size` does it."""
    from timm.layers import resample_abs_pos_embed

    side = int(round((pos_embed.shape[1] - prefix) ** 0.5))
    return resample_abs_pos_embed(pos_embed, list(grid), [side, side], num_prefix_tokens=prefix)[:, prefix:]


def embed_patches(backbone: nn.Module, images: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
    """(B, 3, H, W) → the patch embeddings (B, N, D) and their grid (H / p, W / p)."""
    x = backbone.patch_embed(images)  # (B, N, D), or (B, h, w, D) under timm's dynamic_img_size
    if x.ndim == 4:
        return x.reshape(x.shape[0], -1, x.shape[-1]), (int(x.shape[1]), int(x.shape[2]))
    patch = backbone.patch_embed.patch_size
    return x, (images.shape[-2] // int(patch[0]), images.shape[-1] // int(patch[1]))


def add_positions(backbone: nn.Module, x: torch.Tensor, grid: tuple[int, int],
                  resample: Resample = timm_resample) -> torch.Tensor:
    """Patch embeddings (B, N, D) on `grid` → (B, prefix + N, D): [class] and register tokens and the position
    embeddings, as timm's `_pos_embed` adds them (summed before the tokens are prepended when the position table
    has no [class] entry, `no_embed_class`; after otherwise), then its position dropout. At a grid other than the
    backbone's own the patches' positions are `resample`d ([class] position kept as it is)."""
    tokens = [t.expand(x.shape[0], -1, -1) for t in (backbone.cls_token, backbone.reg_token) if t is not None]
    if backbone.pos_embed is None:
        return torch.cat(tokens + [x], dim=1)
    pos = backbone.pos_embed  # (1, prefix + G·G, D), prefix 0 under no_embed_class
    if tuple(grid) != tuple(backbone.patch_embed.grid_size):
        prefix = 0 if backbone.no_embed_class else int(backbone.num_prefix_tokens)
        pos = torch.cat([pos[:, :prefix], resample(pos, tuple(grid), prefix)], dim=1)  # (1, prefix + h·w, D)
    if backbone.no_embed_class:
        x = torch.cat(tokens + [x + pos], dim=1) if tokens else x + pos
    else:
        x = (torch.cat(tokens + [x], dim=1) if tokens else x) + pos
    return backbone.pos_drop(x)


def run_blocks(backbone: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """(B, prefix + N, D) → (B, prefix + N, D) through patch dropout, the pre-norm and the blocks (checkpointed
    block by block under `set_grad_checkpointing`, as timm does), before the final norm."""
    x = backbone.norm_pre(backbone.patch_drop(x))
    if getattr(backbone, "grad_checkpointing", False) and not torch.jit.is_scripting():
        from timm.models import checkpoint_seq

        return checkpoint_seq(backbone.blocks, x)
    return backbone.blocks(x)


def forward_tokens(backbone: nn.Module, images: torch.Tensor, patches: Patches | None = None,
                   resample: Resample = timm_resample) -> torch.Tensor:
    """(B, 3, H, W), any multiple of the patch → tokens (B, prefix + N, D) after the final norm. `patches` acts on
    the patch embeddings before positions are added; `resample` gives positions at a grid other than the
    backbone's own."""
    if not staged(backbone):
        return _hooked(backbone, images, patches)
    x, grid = embed_patches(backbone, images)  # (B, N, D)
    if patches is not None:
        x = patches(x)
    return backbone.norm(run_blocks(backbone, add_positions(backbone, x, grid, resample)))


def _hooked(backbone: nn.Module, images: torch.Tensor, patches: Patches | None) -> torch.Tensor:
    """Another layout's own `forward_features`, `patches` applied by a hook on `patch_embed` (one graph break)."""
    own = tuple(getattr(backbone.patch_embed, "img_size", None) or images.shape[-2:])
    if tuple(images.shape[-2:]) != own:
        raise VitxError(f"{type(backbone).__name__} is not timm's VisionTransformer: vitx cannot resample its "
                        f"positions to {tuple(images.shape[-2:])} (it takes {own})")
    if patches is None:
        return backbone.forward_features(images)
    hook = backbone.patch_embed.register_forward_hook(lambda module, args, out: patches(out))
    try:
        return backbone.forward_features(images)
    finally:
        hook.remove()


__all__ = ["Patches", "Resample", "add_positions", "embed_patches", "forward_tokens", "run_blocks", "staged",
           "timm_resample"]

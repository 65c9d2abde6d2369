"""Attention as the paper's Section 4.5 reads it: the probabilities of every head, how far each head looks
(mean attention distance, Appendix D.7) and attention rollout (Abnar & Zuidema 2020, Appendix D.8).

The probabilities are recomputed from each block's own query/key projections during one forward pass, so the
model keeps its fused (scaled_dot_product_attention) kernel: nothing about normal training changes or slows.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch
import torch.nn as nn

from ..errors import VitxError


def _probabilities(attn: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T · scale) of a timm `Attention` for input x (B, N, C) -> (B, heads, N, N)."""
    b, n, _ = x.shape
    qkv = attn.qkv(x).reshape(b, n, 3, attn.num_heads, -1).permute(2, 0, 3, 1, 4)  # (3, B, H, N, hd)
    q, k = attn.q_norm(qkv[0]), attn.k_norm(qkv[1])
    return ((q * attn.scale) @ k.transpose(-2, -1)).float().softmax(dim=-1)


NEEDED = ("qkv", "num_heads", "scale", "q_norm", "k_norm")


@contextmanager
def recording(backbone: nn.Module, reduce: Callable[[torch.Tensor], Any] | None = None) -> Iterator[list[Any]]:
    """Within the context, every forward of `backbone` appends each block's attention (B, H, N, N), in depth
    order, to the yielded list; or `reduce(attention)` when given, so that large models need not keep every
    layer's full maps."""
    blocks = getattr(backbone, "blocks", None)
    if blocks is None or not all(hasattr(b, "attn") and all(hasattr(b.attn, a) for a in NEEDED) for b in blocks):
        raise VitxError(f"{type(backbone).__name__} has no timm-style blocks[i].attn (with {', '.join(NEEDED)}); "
                        "cannot read its attention")
    maps: list[Any] = []

    def hook(mod: nn.Module, args: tuple) -> None:
        attn = _probabilities(mod, args[0]).detach()
        maps.append(reduce(attn) if reduce else attn)

    hooks = [b.attn.register_forward_pre_hook(hook) for b in blocks]
    try:
        yield maps
    finally:
        for h in hooks:
            h.remove()


@torch.no_grad()
def attention_maps(backbone: nn.Module, images: torch.Tensor) -> list[torch.Tensor]:
    """Per layer, the attention probabilities (B, H, N, N) for `images` (B, 3, H, W)."""
    with recording(backbone) as maps:
        backbone(images)
    return list(maps)


def patch_distances(grid: tuple[int, int], patch_size: int) -> torch.Tensor:
    """Pixel distance between the centres of every pair of patches on a (rows, cols) grid: (N, N)."""
    rows, cols = torch.meshgrid(torch.arange(grid[0]), torch.arange(grid[1]), indexing="ij")
    centres = torch.stack([rows.flatten(), cols.flatten()], dim=1).float() * patch_size  # (N, 2)
    return torch.cdist(centres, centres)


def uniform_distance(grid: tuple[int, int], patch_size: int) -> float:
    """The mean attention distance of a head that attends to every patch equally: the mean pixel distance
    between two patches of the grid (self-pairs included). The scale for calling a head global."""
    return float(patch_distances(grid, patch_size).mean())


def mean_attention_distance(attn: torch.Tensor, grid: tuple[int, int], patch_size: int,
                            prefix: int = 1) -> torch.Tensor:
    """Per head, the attention-weighted pixel distance between query and key patches, averaged over queries and
    images: attn (B, H, N_all, N_all) -> (H,). Prefix tokens ([class]) are dropped and each query's attention
    over the patches is renormalised to sum to 1."""
    patches = attn[:, :, prefix:, prefix:]  # (B, H, N, N)
    patches = patches / patches.sum(dim=-1, keepdim=True).clamp_min(1e-12)
    dist = patch_distances(grid, patch_size).to(patches)  # (N, N)
    return (patches * dist).sum(dim=-1).mean(dim=(0, 2))  # (H,)


def rollout(maps: list[torch.Tensor]) -> torch.Tensor:
    """Attention rollout: per layer, average the heads, add the identity (the residual), renormalise the rows;
    multiply the layers from the first to the last. maps: L × (B, H, N, N) -> (B, N, N); row 0 is [class]."""
    result = None
    for attn in maps:
        a = attn.mean(dim=1)  # (B, N, N)
        a = a + torch.eye(a.shape[-1], device=a.device, dtype=a.dtype)
        a = a / a.sum(dim=-1, keepdim=True)
        result = a if result is None else a @ result
    if result is None:
        raise VitxError("attention rollout needs at least one layer")
    return result


__all__ = ["attention_maps", "mean_attention_distance", "patch_distances", "recording", "rollout", "uniform_distance"]

"""Stochastic depth (drop-path) set on a built backbone: for a start whose weights are loaded, at transfer and
for `--from`, as timm's `drop_path_rate` sets it at construction; and how a dropped branch is dropped.

Two ways, one distribution of kept branches each, the same expectation:
- mask (timm's DropPath, as DINO, MAE and DeiT train): every sample's branch is computed, then a dropped
  sample's is multiplied by 0 and a kept one's by 1 / (1 − p); the compute is the whole batch's.
- skip (DINOv2's Block, `dinov2/layers/block.py`, `drop_add_residual_stochastic_depth`): a random subset of
  max(⌊B(1 − p)⌋, 1) samples computes the branch, added back scaled by B / subset; the others' branch is never
  computed, so a block at rate p costs about (1 − p) of its compute. Exactly that many samples are kept (not a
  Bernoulli count), and, as DINOv2, only above rate 0.1: at or below it the gather's overhead costs more than the
  saved compute, so those blocks mask."""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn as nn

from ..errors import VitxError
from ..settings.groups import DROP_PATH_MODES
SKIP_ABOVE = 0.1  # DINOv2's Block: "the overhead is compensated only for a drop path rate larger than 0.1"


def set_drop_path(backbone: nn.Module, rate: float, mode: str = "mask") -> None:
    """Block i of L drops its residual branches with probability rate · i / (L − 1) (timm's linear rule, as its
    `drop_path_rate` gives): block 0 never, the last block at `rate`. 0 removes drop-path. `mode`: as the module
    says (`set_drop_path_mode`)."""
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
    set_drop_path_mode(backbone, mode)


def drop_rate(module: nn.Module | None) -> float:
    """A branch's drop probability (timm's DropPath's `drop_prob`; 0 for nn.Identity or none)."""
    return float(getattr(module, "drop_prob", 0.0) or 0.0) if module is not None else 0.0


def set_drop_path_mode(backbone: nn.Module, mode: str) -> None:
    """Drop the backbone's dropped branches as `mode` says, at the rates its blocks already have (a --model spec's
    drop_path_rate, or --drop-path's). skip: each timm Block with a rate above 0.1 becomes a `SkippingBlock`
    (the same parameters and state-dict keys; only its training forward differs); mask: back to timm's Block."""
    from timm.models.vision_transformer import Block

    if mode not in DROP_PATH_MODES:
        raise VitxError(f"unknown drop-path mode '{mode}': choose {' or '.join(DROP_PATH_MODES)}")
    for block in getattr(backbone, "blocks", ()):
        if mode == "mask" and type(block) is SkippingBlock:
            block.__class__ = Block
        elif mode == "skip" and type(block) is Block and max(drop_rate(block.drop_path1),
                                                                drop_rate(block.drop_path2)) > SKIP_ABOVE:
            block.__class__ = SkippingBlock
        elif mode == "skip" and type(block) not in (Block, SkippingBlock) and drop_rate(
                getattr(block, "drop_path1", None)) > SKIP_ABOVE:
            raise VitxError(f"--drop-path-mode skip needs timm's Block; {type(block).__name__} has its own forward "
                            "(use --drop-path-mode mask)")


def skip_dropped(x: torch.Tensor, branch: Callable[[torch.Tensor], torch.Tensor], rate: float,
                 keep: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x + the residual `branch`, computed on a random subset of x's samples only (DINOv2's
    `drop_add_residual_stochastic_depth`). x: (B, ...); keep: the subset's sample indices (drawn when None: the
    first max(⌊B(1 − rate)⌋, 1) of a random permutation, on x's device, no wait for the host)."""
    b = x.shape[0]
    if keep is None:
        size = max(int(b * (1 - rate)), 1)
        keep = torch.randperm(b, device=x.device)[:size]  # (S,)
    residual = branch(x[keep])  # (S, ...): the dropped samples' branch never computed
    added = torch.index_add(x.flatten(1), 0, keep, residual.flatten(1).to(x.dtype), alpha=b / keep.shape[0])
    return added.view_as(x)  # (B, ...)


def _block_type() -> type:
    from timm.models.vision_transformer import Block

    return Block


class SkippingBlock(_block_type()):  # type: ignore[misc]
    """timm's Block whose training forward skips its dropped samples (`skip_dropped`) on branches above rate 0.1;
    evaluation, and branches at or below 0.1, run as timm's Block does."""

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
                is_causal: bool = False) -> torch.Tensor:
        if not self.training:
            return super().forward(x, attn_mask=attn_mask, is_causal=is_causal)
        if attn_mask is not None and attn_mask.ndim > 2:
            raise VitxError("--drop-path-mode skip takes one attention mask shared by every sample (packed crops "
                            "hold several samples in a row: use --drop-path-mode mask)")

        def attention(t: torch.Tensor) -> torch.Tensor:  # (S, N, D) → (S, N, D)
            return self.ls1(self.attn(self.norm1(t), attn_mask=attn_mask, is_causal=is_causal))

        def mlp(t: torch.Tensor) -> torch.Tensor:
            return self.ls2(self.mlp(self.norm2(t)))

        for branch, drop in ((attention, self.drop_path1), (mlp, self.drop_path2)):
            rate = drop_rate(drop)
            x = skip_dropped(x, branch, rate) if rate > SKIP_ABOVE else x + drop(branch(x))
        return x


__all__ = ["DROP_PATH_MODES", "SKIP_ABOVE", "SkippingBlock", "drop_rate", "set_drop_path", "set_drop_path_mode",
           "skip_dropped"]

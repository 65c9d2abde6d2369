"""Crops of several sizes through a ViT as one sequence per image (DINOv2 §5: "global and local crops packed into one
sequence", with a block-diagonal attention mask), instead of one forward per crop size.

Image b's crops (say its 8 local crops of 37 tokens, or its 2 global and 8 local crops) are laid side by side in
row b of one batch (B, L, D), L the sum of their token counts; each crop is patch-embedded and given its position
embeddings at its own grid first (the public stages, `stages.py`), and attends only to its own tokens (a boolean
(L, L) mask given to timm's blocks, which hand it to torch's `scaled_dot_product_attention`). Everything else a
block does is token by token, so the packed forward computes what the separate forwards compute: the same
tokens to float rounding (tests/test_packing.py). What changes is the kernels' shapes: fewer, larger launches,
against attention over L × L of which only the crops' blocks count (a dense mask: the masked pairs are computed
and thrown away). Whether that pays is the device's answer (BENCHMARKS.md).

Stochastic depth stays per crop, as in the separate forwards: a dropped residual branch is dropped for one crop
of one image (its tokens in the row), not for the whole row, which timm's DropPath would do."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn

from ..errors import VitxError
from .stages import Patches, Resample, add_positions, embed_patches, staged, timm_resample


def block_mask(lengths: Sequence[int], device: torch.device) -> torch.Tensor:
    """(L, L) bool, L = Σ lengths: True where query and key are tokens of the same crop (attention's "take part")."""
    # (L,) the crop of each token, made on the device: a host list copied there would make the host wait for it
    crop = torch.cat([torch.full((t,), i, dtype=torch.int64, device=device) for i, t in enumerate(lengths)])
    return crop[:, None] == crop[None, :]


def forward_packed(backbone: nn.Module, groups: Sequence[torch.Tensor], batch: int,
                   patches: Sequence[Patches | None] | None = None,
                   resample: Resample = timm_resample) -> list[torch.Tensor]:
    """Groups of same-sized crops of `batch` images → their tokens after the final norm, as `forward_tokens` gives
    each group, computed as one packed sequence per image.

    groups[i]: (n_i·B, 3, S_i, S_i), n_i crops of each of the B images, crop-major (crop j of image b at row
    j·B + b: how objectives concatenate their views). patches[i]: acts on group i's patch embeddings before their
    positions are added (iBOT's [mask] token), or None. Returns [(n_i·B, prefix + N_i, D)] in the same layout."""
    if not staged(backbone):
        raise VitxError(f"packed crops need timm's VisionTransformer stages; {type(backbone).__name__} has another "
                        "forward (run its crops unpacked)")
    rows, lengths, shapes = [], [], []
    for i, images in enumerate(groups):
        x, grid = embed_patches(backbone, images)  # (n·B, N, D)
        if patches is not None and patches[i] is not None:
            x = patches[i](x)
        x = add_positions(backbone, x, grid, resample)  # (n·B, T, D), T = prefix + N
        n, t, d = x.shape[0] // batch, x.shape[1], x.shape[2]
        rows.append(x.reshape(n, batch, t, d).transpose(0, 1).reshape(batch, n * t, d))  # (B, n·T, D): image b's crops
        lengths += [t] * n
        shapes.append((n, t))
    x = backbone.norm(run_packed_blocks(backbone, torch.cat(rows, dim=1), lengths))  # (B, L, D)
    out, start = [], 0
    for n, t in shapes:
        part = x[:, start:start + n * t]  # (B, n·T, D)
        out.append(part.reshape(batch, n, t, -1).transpose(0, 1).reshape(n * batch, t, -1))  # (n·B, T, D)
        start += n * t
    return out


def run_packed_blocks(backbone: nn.Module, x: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
    """(B, L, D) rows of crops of `lengths` tokens → (B, L, D) through the pre-norm and the blocks, each crop
    attending to itself (checkpointed block by block under `set_grad_checkpointing`, as timm does)."""
    if backbone.training and not isinstance(backbone.patch_drop, nn.Identity):
        raise VitxError("packed crops cannot take patch dropout (it would drop tokens across the crops of a row); "
                        "run them unpacked")
    x = backbone.norm_pre(x)
    mask = block_mask(lengths, x.device)  # (L, L)
    checkpointed = getattr(backbone, "grad_checkpointing", False) and torch.is_grad_enabled()
    for block in backbone.blocks:
        if checkpointed:
            from torch.utils.checkpoint import checkpoint

            x = checkpoint(packed_block, block, x, mask, lengths, use_reentrant=False)
        else:
            x = packed_block(block, x, mask, lengths)
    return x


def packed_block(block: nn.Module, x: torch.Tensor, mask: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
    """One block over packed rows (B, L, D) with the (L, L) mask. With stochastic depth active, timm's Block is
    run branch by branch so that a dropped branch is dropped per crop (`_per_crop`); other blocks, only without."""
    from timm.models.vision_transformer import Block

    from .droppath import SkippingBlock

    if not (block.training and any(_drops(getattr(block, n, None)) for n in ("drop_path1", "drop_path2"))):
        return block(x, attn_mask=mask)
    if isinstance(block, SkippingBlock):
        raise VitxError("packed crops cannot skip dropped samples (a row holds all of an image's crops): use "
                        "--drop-path-mode mask, or run the crops unpacked")
    if type(block).forward is not Block.forward:
        raise VitxError(f"packed crops with stochastic depth need timm's Block; {type(block).__name__} drops paths "
                        "its own way (set drop_path 0, or run the crops unpacked)")
    x = x + _per_crop(block.ls1(block.attn(block.norm1(x), attn_mask=mask)), block.drop_path1, lengths)
    return x + _per_crop(block.ls2(block.mlp(block.norm2(x))), block.drop_path2, lengths)


def _drops(module: nn.Module | None) -> bool:
    return module is not None and float(getattr(module, "drop_prob", 0.0) or 0.0) > 0


def _per_crop(branch: torch.Tensor, drop_path: nn.Module, lengths: Sequence[int]) -> torch.Tensor:
    """timm's DropPath on a packed branch (B, L, D), drawn per crop of each image instead of per row: each crop's
    branch kept with probability 1 − p (and scaled by 1 / (1 − p) where timm scales), as its own sample would be."""
    if not _drops(drop_path):
        return drop_path(branch)
    keep = 1.0 - float(drop_path.drop_prob)
    kept = branch.new_empty(branch.shape[0], len(lengths)).bernoulli_(keep)  # (B, crops)
    if getattr(drop_path, "scale_by_keep", True):
        kept.div_(keep)
    scale = torch.cat([kept[:, i:i + 1].expand(-1, t) for i, t in enumerate(lengths)], dim=1)  # (B, L), no wait
    return branch * scale[..., None]


__all__ = ["block_mask", "forward_packed", "packed_block", "run_packed_blocks"]

"""Stochastic depth (drop-path) set on a built backbone (--drop-path: a new model, a start whose weights are
loaded at transfer and for `--from`), as timm's `drop_path_rate` sets it at construction; and how a dropped branch
is dropped (--drop-path-mode).

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
from timm.models.vision_transformer import Block

from ..errors import VitxError
from ..settings.groups import DROP_PATH_MODES

SKIP_ABOVE = 0.1  # DINOv2's Block: "the overhead is compensated only for a drop path rate larger than 0.1"


def skips(rate: float) -> bool:
    """Whether a branch at `rate` skips: above 0.1, a rate within float32 rounding of it counting as 0.1 (the last
    block of --drop-path 0.1 gets 0.1 · 3 / 3 = 0.10000000000000002; timm's float32 rates of a --model spec's
    drop_path_rate 0.3 over 4 blocks give 0.10000000149 for the second)."""
    return rate > SKIP_ABOVE * (1 + 1e-6)


def kept(batch: int, rate: float) -> int:
    """How many of a forward's `batch` samples compute a skipping branch at `rate` (DINOv2: at least one)."""
    return max(int(batch * (1 - rate)), 1)


MODE = "vitx_drop_path_mode"  # the backbone's attribute that keeps its mode (kept by deepcopy, not a weight)


def set_drop_path(backbone: nn.Module, rate: float, mode: str | None = None) -> None:
    """Block i of L drops its residual branches with probability rate · i / (L − 1) (timm's linear rule, as its
    `drop_path_rate` gives): block 0 never, the last block at `rate`. 0 removes drop-path. `mode`: as the module
    says (`set_drop_path_mode`); None keeps the backbone's (a copy keeps its original's)."""
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
    set_drop_path_mode(backbone, mode or getattr(backbone, MODE, "mask"))


def configure(backbone: nn.Module, rate: float, mode: str) -> None:
    """--drop-path and --drop-path-mode on a built backbone: `rate` set when given (> 0; else a --model spec's
    drop_path_rate stays), its branches dropped as `mode` says, and skip refused where it would do nothing."""
    if rate > 0:
        set_drop_path(backbone, rate, mode)
    else:
        set_drop_path_mode(backbone, mode)
    check_skip(backbone, mode)


def drop_rate(module: nn.Module | None) -> float:
    """A branch's drop probability (timm's DropPath's `drop_prob`; 0 for nn.Identity or none)."""
    return float(getattr(module, "drop_prob", 0.0) or 0.0) if module is not None else 0.0


def block_rates(backbone: nn.Module) -> list[float]:
    """Each block's drop probability (the larger of its two branches'), in order."""
    return [max(drop_rate(getattr(b, "drop_path1", None)), drop_rate(getattr(b, "drop_path2", None)))
            for b in getattr(backbone, "blocks", ())]


def set_drop_path_mode(backbone: nn.Module, mode: str) -> list[int]:
    """Drop the backbone's dropped branches as `mode` says, at the rates its blocks have (a --model spec's
    drop_path_rate, or --drop-path's); kept on the backbone for a later `set_drop_path`. skip: each timm Block
    whose rate is above 0.1 becomes a `SkippingBlock` (the same parameters and state-dict keys; only its training
    forward differs), the others are timm's Block. Returns the skipping blocks' indices."""
    if mode not in DROP_PATH_MODES:
        raise VitxError(f"unknown drop-path mode '{mode}': choose {' or '.join(DROP_PATH_MODES)}")
    setattr(backbone, MODE, mode)
    skipping = []
    for i, (block, rate) in enumerate(zip(getattr(backbone, "blocks", ()), block_rates(backbone))):
        skipped = mode == "skip" and skips(rate)
        if type(block) in (Block, SkippingBlock):
            block.__class__ = SkippingBlock if skipped else Block
        elif skipped:
            raise VitxError(f"--drop-path-mode skip needs timm's Block; {type(block).__name__} has its own forward "
                            "(use --drop-path-mode mask)")
        skipping += [i] if skipped else []
    return skipping


def check_skip(backbone: nn.Module, mode: str) -> None:
    """Refuse --drop-path-mode skip on a model without stochastic depth (it would be recorded and do nothing), or
    whose blocks are not timm's Block (their drop rates are not where skipping reads them)."""
    if mode != "skip" or any(block_rates(backbone)):
        return
    other = next((type(b).__name__ for b in getattr(backbone, "blocks", ()) if type(b) not in (Block, SkippingBlock)),
                 None)
    if other is not None:
        raise VitxError(f"--drop-path-mode skip needs timm's Block; {other} has its own forward (use --drop-path-mode "
                        "mask)")
    raise VitxError("--drop-path-mode skip: the model drops no path (no --drop-path, nor a drop_path_rate in "
                    "--model); give --drop-path above 0.1, or leave --drop-path-mode out")


def describe(backbone: nn.Module, micro: int | None = None) -> str | None:
    """The header's line on stochastic depth (None without it): the rates and how a dropped branch is dropped; with
    `micro` (the samples of each forward: a micro-batch's images, for an objective that runs them once), how many of
    them the most dropped block computes when skipping."""
    rates = block_rates(backbone)
    if not any(rates):
        return None
    mode = getattr(backbone, MODE, "mask")
    line = f"stochastic depth: rates {min(rates):.3g} → {max(rates):.3g} over {len(rates)} blocks, "
    skipping = [i for i, b in enumerate(getattr(backbone, "blocks", ())) if isinstance(b, SkippingBlock)]
    if mode == "mask":
        return line + "timm's mask (every branch computed, the dropped ones zeroed)"
    if not skipping:
        return line + "skip asked, but no block is above 0.1: all masked, as DINOv2's Block does"
    where = f"block {skipping[0]}" if len(skipping) == 1 else f"blocks {skipping[0]}-{skipping[-1]}"
    line += f"the dropped samples skipped on {where} (above 0.1: DINOv2's Block), masked below"
    if micro is not None:
        most = kept(micro, max(rates))
        line += f"; a forward of {micro} samples computes {most} of them at rate {max(rates):.3g}" + (
            " (nothing dropped: DINOv2 keeps at least one; a larger micro-batch, or --drop-path-mode mask)"
            if most == micro else "")
    return line


def skip_dropped(x: torch.Tensor, branch: Callable[[torch.Tensor], torch.Tensor], rate: float,
                 keep: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x + the residual `branch`, computed on a random subset of x's samples only (DINOv2's
    `drop_add_residual_stochastic_depth`). x: (B, ...); keep: the subset's sample indices (drawn when None: the
    first max(⌊B(1 − rate)⌋, 1) of a random permutation, on x's device, no wait for the host)."""
    b = x.shape[0]
    if keep is None:
        keep = torch.randperm(b, device=x.device)[:kept(b, rate)]  # (S,)
    residual = branch(x[keep])  # (S, ...): the dropped samples' branch never computed
    added = torch.index_add(x.flatten(1), 0, keep, residual.flatten(1).to(x.dtype), alpha=b / keep.shape[0])
    return added.view_as(x)  # (B, ...)


class SkippingBlock(Block):
    """timm's Block whose training forward skips its dropped samples (`skip_dropped`) on branches above rate 0.1;
    evaluation, and branches at or below 0.1, run as timm's Block does."""

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
                is_causal: bool = False) -> torch.Tensor:
        # the attention's keywords only when given: timm before 1.0.26 takes no is_causal (before 1.0.16 neither)
        given = {**({"attn_mask": attn_mask} if attn_mask is not None else {}),
                 **({"is_causal": True} if is_causal else {})}
        if not self.training:
            return super().forward(x, **given)
        if attn_mask is not None and attn_mask.ndim > 2:
            raise VitxError("--drop-path-mode skip takes one attention mask shared by every sample (packed crops "
                            "hold several samples in a row: use --drop-path-mode mask)")

        def attention(t: torch.Tensor) -> torch.Tensor:  # (S, N, D) → (S, N, D)
            return self.ls1(self.attn(self.norm1(t), **given))

        def mlp(t: torch.Tensor) -> torch.Tensor:
            return self.ls2(self.mlp(self.norm2(t)))

        for branch, drop in ((attention, self.drop_path1), (mlp, self.drop_path2)):
            rate = drop_rate(drop)
            x = skip_dropped(x, branch, rate) if skips(rate) else x + drop(branch(x))
        return x


__all__ = ["SKIP_ABOVE", "SkippingBlock", "block_rates", "check_skip", "configure", "describe", "drop_rate", "kept",
           "set_drop_path", "set_drop_path_mode", "skip_dropped", "skips"]

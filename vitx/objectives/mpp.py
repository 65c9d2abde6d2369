"""Masked patch prediction (MPP): the ViT paper's self-supervised objective (§4.6, Appendix B.1.2).

Corrupt 50% of each image's patch embeddings (of those: 80% → a learnable [mask] embedding, 10% → the embedding
of a random other patch, 10% kept), run the whole sequence through the encoder, and predict from each corrupted
patch's output token the 3-bit mean colour of that patch (512 classes) with a linear head; cross-entropy over the
corrupted patches only.

Where the corruption acts. The paper says "we corrupt 50% of patch embeddings", i.e. the outputs of the linear
projection E (§3.1: x_p E); position embeddings are then added as for any input (z0 = [x_class; x_p E] + E_pos),
so a [mask] token still knows where it sits, as in BERT, where the [MASK] token embedding is summed with its
position embedding. vitx therefore corrupts the output of `backbone.patch_embed` and lets the backbone add
[class] and position embeddings afterwards.

Targets are computed from the un-normalised image (0-255): mean of each RGB channel over the patch, quantised to
its top `bits` bits (floor(m / 32) for 3 bits), class = r·64 + g·8 + b. The paper's alternatives are options:
`target="downsized"` (4x4 downsized patch, 16 predictions of 512 colours) and `target="pixels"` (L2 regression on
the full normalised patch)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..backbones.stages import forward_tokens
from ..data.transforms import Preprocess
from ..errors import VitxError
from ..registry import register_objective
from .base import Objective
from .options import option

TARGETS = ("mean", "downsized", "pixels")


@dataclass
class Corruption:
    """Which patches are corrupted and how. All (B, k): k = round(corrupt_rate · N) per image."""

    index: torch.Tensor  # patch index in [0, N)
    mode: torch.Tensor  # 0 → [mask] token, 1 → random other patch, 2 → kept
    source: torch.Tensor  # for mode 1: flat index (b·N + n) of the replacing patch, never the patch itself


@dataclass
class MPPOptions:
    corrupt_rate: float = option(0.5, "Share of each image's patch embeddings corrupted (the paper's 50%; 15% was "
                                 "slightly worse).", above=0, max=1)
    mask_rate: float = option(0.8, "Of the corrupted: share replaced by the learnable [mask] embedding.", min=0, max=1)
    random_rate: float = option(0.1, "Of the corrupted: share replaced by another patch's embedding.", min=0, max=1)
    keep_rate: float = option(0.1, "Of the corrupted: share kept as it is (the three rates sum to 1).", min=0, max=1)
    target: str = option("mean", "What each corrupted patch predicts: its mean colour (the paper's), the colours of "
                         "its 4x4 downsized version, or its normalised pixels (L2).", choices=TARGETS)
    bits: int = option(3, "Bits per colour channel of the colour classes (the paper's 3: 512 classes); the head "
                       "has 2^(3·bits) outputs per prediction, so at most 5.", min=1, max=5)


@register_objective("mpp", description="masked patch prediction (ViT paper): 3-bit mean colour of corrupted patches")
class MaskedPatchPrediction(Objective):
    """The paper's MPP on any timm-style ViT backbone."""

    features = "patch-mean"  # it trains the patch tokens; the [class] token is never a target
    Options = MPPOptions
    # the ViT paper's MPP run (Appendix B.1.2; docs/recipes.md): Adam, a linear warm-up from 0 (big_vision), cosine
    # decay to 0
    recipe = {"optimizer": "adamw", "betas": [0.9, 0.999], "warmup_start": "zero", "schedule": "cosine",
              "min_lr": 0.0}

    def __init__(self, backbone: nn.Module, **options: Any) -> None:
        super().__init__(backbone, **options)
        o = self.settings
        corrupt_rate, mask_rate, random_rate, target, bits = o.corrupt_rate, o.mask_rate, o.random_rate, o.target, o.bits
        if abs(mask_rate + random_rate + o.keep_rate - 1.0) > 1e-6:
            raise VitxError("mpp mask_rate + random_rate + keep_rate must be 1, got "
                            f"{mask_rate} + {random_rate} + {o.keep_rate}")
        self.corrupt_rate, self.mask_rate, self.random_rate = corrupt_rate, mask_rate, random_rate
        self.target, self.bits = target, bits
        pe = backbone.patch_embed
        self.grid = tuple(int(g) for g in pe.grid_size)  # (gh, gw) tokens
        self.patch_px = (int(pe.img_size[0]) // self.grid[0], int(pe.img_size[1]) // self.grid[1])  # pixels
        self.num_patches = self.grid[0] * self.grid[1]
        if target == "downsized" and (self.patch_px[0] % 4 or self.patch_px[1] % 4):
            raise VitxError(f"mpp target 'downsized' needs a patch size divisible by 4, got {self.patch_px}")
        self.colours = colours = 2 ** (3 * bits)  # classes per colour prediction
        out = {"mean": colours, "downsized": 16 * colours, "pixels": 3 * self.patch_px[0] * self.patch_px[1]}[target]
        dim = backbone.embed_dim
        self.mask_token = nn.Parameter(torch.empty(dim))  # (D,) the learnable [mask] embedding
        nn.init.trunc_normal_(self.mask_token, std=0.02)
        self.head = nn.Linear(dim, out)  # linear prediction from the patch's output token
        self.register_buffer("pixel_mean", torch.full((3,), 0.5), persistent=False)
        self.register_buffer("pixel_std", torch.full((3,), 0.5), persistent=False)

    def init_parts(self) -> dict[str, tuple[str, ...]]:
        """`--from` of an MPP run continues its colour-prediction head and its learned [mask] embedding with the
        encoder (new ones would undo what the encoder learned to feed them)."""
        return {"head": ("head.",), "mask token": ("mask_token",)}

    def configure_preprocess(self, preprocess: Preprocess) -> Preprocess:
        self.pixel_mean.copy_(torch.tensor(preprocess.mean))
        self.pixel_std.copy_(torch.tensor(preprocess.std))
        return preprocess

    # ---- corruption ----------------------------------------------------------------------------------------
    def sample_corruption(self, batch: int, device: torch.device) -> Corruption:
        n = self.num_patches
        k = max(1, round(self.corrupt_rate * n))
        index = torch.rand(batch, n, device=device).argsort(dim=1)[:, :k]  # (B, k) a uniform k-subset
        u = torch.rand(batch, k, device=device)
        mode = (u >= self.mask_rate).long() + (u >= self.mask_rate + self.random_rate).long()  # (B, k)
        own = torch.arange(batch, device=device)[:, None] * n + index  # (B, k) flat index of the patch itself
        source = torch.randint(0, batch * n - 1, (batch, k), device=device)
        source = source + (source >= own).long()  # skip over itself: uniform over the other B·N − 1 patches
        return Corruption(index, mode, source)

    def corrupt(self, tokens: torch.Tensor, plan: Corruption) -> torch.Tensor:
        """Apply `plan` to patch embeddings (B, N, D), before position embeddings are added."""
        b, n, d = tokens.shape
        rows = torch.arange(b, device=tokens.device)[:, None]  # (B, 1)
        current = tokens[rows, plan.index]  # (B, k, D)
        replacement = tokens.reshape(b * n, d)[plan.source]  # (B, k, D) clean embeddings of other patches
        mode = plan.mode[..., None]
        new = torch.where(mode == 0, self.mask_token.to(tokens.dtype), torch.where(mode == 1, replacement, current))
        out = tokens.clone()
        out[rows, plan.index] = new
        return out

    # ---- targets -------------------------------------------------------------------------------------------
    def _patches(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) → (B, N, 3, ph, pw), in raster order of the token grid."""
        b = images.shape[0]
        (gh, gw), (ph, pw) = self.grid, self.patch_px
        x = images.reshape(b, 3, gh, ph, gw, pw).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(b, gh * gw, 3, ph, pw)

    def quantise(self, values: torch.Tensor) -> torch.Tensor:
        """(..., 3) channel values in 0..255 → colour class r·L² + g·L + b with L = 2^bits levels."""
        levels = 2 ** self.bits
        q = torch.floor(values / (256 / levels) + 1e-3).clamp_(0, levels - 1).long()  # 1e-3: undo float error
        return (q[..., 0] * levels + q[..., 1]) * levels + q[..., 2]

    def targets(self, images: torch.Tensor) -> torch.Tensor:
        """Per-patch targets: (B, N) classes (mean), (B, N, 16) classes (downsized) or (B, N, 3·ph·pw) values."""
        if self.target == "pixels":
            return self._patches(images.float()).flatten(2)
        pixels = (images.float() * self.pixel_std.view(1, 3, 1, 1) + self.pixel_mean.view(1, 3, 1, 1)) * 255.0
        patches = self._patches(pixels)  # (B, N, 3, ph, pw) in 0..255
        if self.target == "mean":
            return self.quantise(patches.mean(dim=(-1, -2)))  # (B, N)
        b, n, c, ph, pw = patches.shape
        cells = patches.reshape(b, n, c, 4, ph // 4, 4, pw // 4).mean(dim=(-1, -3))  # (B, N, 3, 4, 4)
        return self.quantise(cells.permute(0, 1, 3, 4, 2)).reshape(b, n, 16)  # (B, N, 16)

    # ---- the objective -------------------------------------------------------------------------------------
    def encode(self, images: torch.Tensor, plan: Corruption) -> torch.Tensor:
        """Backbone tokens (B, prefix + N, D) with `plan` applied to the patch embeddings, between the backbone's
        patch and position embeddings (its staged forward, `backbones/stages.py`: one whole graph for
        `torch.compile`)."""
        return forward_tokens(self.backbone, images, patches=lambda x: self.corrupt(x, plan))

    def loss(self, pred: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
        """Loss and metrics from predictions and targets of the corrupted patches only ((B, k, ...))."""
        if self.target == "pixels":
            return {"loss": F.mse_loss(pred, target)}
        logits, labels = pred.reshape(-1, self.colours), target.reshape(-1)  # (B·k·cells, C), (B·k·cells,)
        accuracy = (logits.argmax(-1) == labels).float().mean()
        ones = torch.ones_like(labels, dtype=torch.float)
        counts = torch.zeros(self.colours, device=labels.device).index_add_(0, labels, ones)  # (C,)
        baseline = counts.max() / labels.numel()  # the most frequent colour's share (fixed shapes: no host sync)
        return {"loss": F.cross_entropy(logits, labels), "colour_acc": accuracy.detach(), "baseline_acc": baseline}

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        images = batch["image"]  # (B, 3, H, W), normalised
        plan = self.sample_corruption(images.shape[0], images.device)
        tokens = self.encode(images, plan)[:, self.backbone.num_prefix_tokens:]  # (B, N, D)
        rows = torch.arange(images.shape[0], device=images.device)[:, None]
        pred = self.head(tokens[rows, plan.index]).float()  # (B, k, out)
        target = self.targets(images)[rows, plan.index]  # (B, k) / (B, k, 16) / (B, k, 3·ph·pw)
        return self.loss(pred, target)

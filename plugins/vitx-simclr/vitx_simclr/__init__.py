"""SimCLR as a vitx objective (Chen et al. 2020), in one file: the model for writing a self-supervised objective.

Two augmented views of every image go through the backbone and lightly's `SimCLRProjectionHead`; lightly's
`NTXentLoss` pulls each image's two views together and pushes the other 2B - 2 apart (gathered over all
processes under Accelerate). No labels are needed.

The runner hands every objective the same batch of normalised images, here whole (the recipe's `--crop-scale 1`:
SimCLR crops each view from the whole image); the views are made here, on the batch's device, as batched tensor
ops (random resized crop and flip through one affine grid per image, then colour jitter and grayscale), so
augmentation runs on the GPU and the data pipeline stays shared. Blur is left out, as SimCLR does for small
(CIFAR-sized) images.

The defaults are SimCLR's CIFAR-10 run (google-research/simclr README.md:79-84; docs/recipes.md gives each line):
temperature 0.5, colour jitter strength 0.5 (brightness, contrast and saturation 0.4; its hue 0.1 is not made
here), no blur, crops of 0.08–1 of the area. Not its: vitx trains with AdamW, where SimCLR's ResNets use LARS
(`--optimizer lars --blr 1.0 --weight-decay 1e-4` gives its optimiser).

    vitx pretrain --objective 'simclr(temperature=0.2)' --data embedded:shapes
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from vitx import Objective, option, register_objective


@dataclass
class SimCLROptions:
    temperature: float = option(0.5, "NT-Xent temperature (SimCLR's CIFAR-10 run's 0.5; its ImageNet run at batch "
                                "4096 takes 0.1; at least 1e-8, lightly's bound).", min=1e-8)
    proj_dim: int = option(128, "Output width of the projection head (SimCLR's 128).", min=1, max=65536)
    proj_layers: int = option(2, "Linear layers of the projection head, each but the last followed by BatchNorm and "
                              "ReLU, the last by BatchNorm (the SimCLR paper's head, one hidden layer; its v2 code, "
                              "run.py:207, defaults to 3).", min=2, max=8)
    crop_scale: float = option(0.08, "Smallest share of the image a view's random resized crop keeps (SimCLR's "
                               "area_range 0.08–1).", above=0, max=1)
    jitter: float = option(0.4, "Colour jitter strength: brightness, contrast and saturation factors in "
                           "[1 - jitter, 1 + jitter], with probability 0.8 (0: off).", min=0, below=1)
    gray: float = option(0.2, "Probability of turning a view gray.", min=0, max=1)


@register_objective("simclr", description="SimCLR (lightly): two augmented views, projection head, NT-Xent loss")
class SimCLR(Objective):
    Options = SimCLROptions  # each option with its type, bounds and help: vitx checks them before __init__ runs
    min_batch = 2  # each image's other view is its positive, the batch's other images its negatives
    # SimCLR's schedule (google-research/simclr model_util.py; docs/recipes.md): a linear warm-up from 0, cosine to 0;
    # no gradient clipping (run.py, model_util.py clip nothing); each view cropped from the whole image
    # (data_util.py:469-472): the runner's crop keeps it whole (scale 1), the views crop it (`crop_scale=`).
    # Not its: AdamW where its ResNets take LARS (the module's docstring)
    recipe = {"warmup_start": "zero", "schedule": "cosine", "min_lr": 0.0, "grad_clip": 0.0, "crop_scale": 1.0}

    def __init__(self, backbone: torch.nn.Module, **options: Any) -> None:
        super().__init__(backbone, **options)
        o = self.settings  # a SimCLROptions, every option filled
        temperature, proj_dim, crop_scale, jitter, gray = o.temperature, o.proj_dim, o.crop_scale, o.jitter, o.gray
        proj_layers = o.proj_layers
        # lightly (and torchvision through it) takes seconds to import: only when a SimCLR is built
        from lightly.loss import NTXentLoss
        from lightly.models.modules import SimCLRProjectionHead

        dim = backbone.embed_dim
        self.head = SimCLRProjectionHead(input_dim=dim, hidden_dim=dim, output_dim=proj_dim, num_layers=proj_layers)
        self.criterion = NTXentLoss(temperature=temperature, gather_distributed=True)
        self.crop_scale, self.jitter, self.gray = crop_scale, jitter, gray
        # colour constants live on the device with the module: built from Python lists at every step they
        # would be host-to-device copies that wait for the device
        self.register_buffer("pixel_mean", torch.full((1, 3, 1, 1), 0.5), persistent=False)
        self.register_buffer("pixel_std", torch.full((1, 3, 1, 1), 0.5), persistent=False)
        self.register_buffer("luma", torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1), persistent=False)

    def init_parts(self) -> dict[str, tuple[str, ...]]:
        """`--from` of a SimCLR run continues its projection head with the backbone (the header says
        `head: runs/simclr step N`); from anything else it starts new, said."""
        return {"head": ("head.",)}

    def configure_preprocess(self, preprocess: Any) -> Any:
        self.pixel_mean.copy_(torch.tensor(preprocess.mean).view(1, 3, 1, 1))  # to jitter colours in pixel space
        self.pixel_std.copy_(torch.tensor(preprocess.std).view(1, 3, 1, 1))
        return preprocess

    def augment(self, images: torch.Tensor, gen: torch.Generator | None = None) -> torch.Tensor:
        """One random view of each image: (B, 3, H, W) normalised -> (B, 3, H, W) normalised."""
        b, dev = images.shape[0], images.device

        def uniform(lo: float, hi: float) -> torch.Tensor:  # (B,)
            return lo + (hi - lo) * torch.rand(b, generator=gen, device=dev)

        # random resized crop + flip: the crop box, in [-1, 1] coordinates, as an affine map of the output grid
        area = uniform(self.crop_scale, 1.0)
        ratio = torch.exp(uniform(math.log(3 / 4), math.log(4 / 3)))
        w, h = (area * ratio).sqrt(), (area / ratio).sqrt()  # fractions of the side
        fits = (w <= 1) & (h <= 1)  # a box that does not fit falls back to the whole image, as torchvision's does
        w, h = torch.where(fits, w, 1.0), torch.where(fits, h, 1.0)
        cx, cy = uniform(-1, 1) * (1 - w), uniform(-1, 1) * (1 - h)
        flip = torch.where(torch.rand(b, generator=gen, device=dev) < 0.5, -1.0, 1.0)
        theta = torch.zeros(b, 2, 3, device=dev)
        theta[:, 0, 0], theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = w * flip, cx, h, cy
        grid = F.affine_grid(theta, list(images.shape), align_corners=False)  # (B, H, W, 2)
        x = F.grid_sample(images.float(), grid, mode="bilinear", padding_mode="reflection", align_corners=False)

        # colour jitter (brightness, contrast, saturation; with probability 0.8) and grayscale, in [0, 1] pixels
        mean, std, luma = self.pixel_mean, self.pixel_std, self.luma  # (1, 3, 1, 1) each
        x = x * std + mean
        if self.jitter > 0:
            on = (torch.rand(b, generator=gen, device=dev) < 0.8).view(b, 1, 1, 1)
            factor = [uniform(1 - self.jitter, 1 + self.jitter).view(b, 1, 1, 1) for _ in range(3)]
            y = x * factor[0]
            gray_mean = (y * luma).sum(1, keepdim=True).mean((2, 3), keepdim=True)  # (B, 1, 1, 1)
            y = (y - gray_mean) * factor[1] + gray_mean
            gray_px = (y * luma).sum(1, keepdim=True)  # (B, 1, H, W)
            y = (y - gray_px) * factor[2] + gray_px
            x = torch.where(on, y.clamp(0, 1), x)
        if self.gray > 0:
            to_gray = (torch.rand(b, generator=gen, device=dev) < self.gray).view(b, 1, 1, 1)
            x = torch.where(to_gray, (x * luma).sum(1, keepdim=True).expand_as(x), x)
        return ((x - mean) / std).to(images.dtype)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        images = batch["image"]  # (B, 3, H, W)
        gen = None
        if not self.training:  # the same views at every evaluation, so validation loss is comparable over time
            gen = torch.Generator(device=images.device).manual_seed(0)
        z0 = self.head(self.backbone(self.augment(images, gen)))  # (B, proj_dim)
        z1 = self.head(self.backbone(self.augment(images, gen)))  # (B, proj_dim)
        loss = self.criterion(z0, z1)
        with torch.no_grad():  # how often a view's nearest other view (cosine) is its own pair
            sim = F.normalize(z0.float(), dim=1) @ F.normalize(z1.float(), dim=1).T  # (B, B)
            pair_top1 = (sim.argmax(1) == torch.arange(len(sim), device=sim.device)).float().mean()
        return {"loss": loss, "pair_top1": pair_top1}


__all__ = ["SimCLR"]

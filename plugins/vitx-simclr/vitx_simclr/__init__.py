"""SimCLR as a vitx objective (Chen et al. 2020), in one file: the model for writing a self-supervised objective.

Two augmented views of every image go through the backbone and lightly's `SimCLRProjectionHead`; lightly's
`NTXentLoss` pulls each image's two views together and pushes the other 2B - 2 apart (gathered over all
processes under Accelerate). No labels are needed.

The views are declared (`views()`) and made in the loader's workers as SimCLR's input pipeline makes them
(google-research/simclr data_util.py:469-472, `preprocess_for_train`): each cropped from the whole decoded image
(random resized crop, 0.08–1 of the area), resized, flipped, colour-jittered with probability 0.8 (brightness,
contrast, saturation and hue, in a random order) and turned gray with probability 0.2; drawn per image and view
from the run's seed, so a resumed run sees the same views. Blur is left out, as SimCLR does for small
(CIFAR-sized) images.

The defaults are SimCLR's CIFAR-10 run (google-research/simclr README.md:79-84; docs/recipes.md gives each line):
temperature 0.5, colour jitter strength 0.5 (brightness, contrast and saturation 0.4, hue 0.1), no blur, crops of
0.08–1 of the area, no gradient clipping. Not its: vitx trains with AdamW, where SimCLR's ResNets use LARS
(`--optimizer lars --blr 1.0 --weight-decay 1e-4` gives its optimiser), and the paper's projection head (one hidden
layer) where its v2 code has two (`proj_layers=3`).

    vitx pretrain --objective 'simclr(temperature=0.2)' --data embedded:shapes
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from vitx import Objective, option, register_objective
from vitx.data.views import View


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
                           "[1 - jitter, 1 + jitter], hue shifts up to jitter / 4, in a random order, with "
                           "probability 0.8 (SimCLR's 0.8 × its strength 0.5; 0: off).", min=0, below=1)
    gray: float = option(0.2, "Probability of turning a view gray.", min=0, max=1)


@register_objective("simclr", description="SimCLR (lightly): two augmented views, projection head, NT-Xent loss")
class SimCLR(Objective):
    Options = SimCLROptions  # each option with its type, bounds and help: vitx checks them before __init__ runs
    min_batch = 2  # each image's other view is its positive, the batch's other images its negatives
    # SimCLR's schedule (google-research/simclr model_util.py; docs/recipes.md): a linear warm-up from 0, cosine to 0;
    # no gradient clipping (run.py and model_util.py clip nothing). Not its: AdamW where its ResNets take LARS
    recipe = {"warmup_start": "zero", "schedule": "cosine", "min_lr": 0.0, "grad_clip": 0.0}

    def __init__(self, backbone: torch.nn.Module, **options: Any) -> None:
        super().__init__(backbone, **options)
        o = self.settings  # a SimCLROptions, every option filled
        # lightly (and torchvision through it) takes seconds to import: only when a SimCLR is built
        from lightly.loss import NTXentLoss
        from lightly.models.modules import SimCLRProjectionHead

        dim = backbone.embed_dim
        self.head = SimCLRProjectionHead(input_dim=dim, hidden_dim=dim, output_dim=o.proj_dim,
                                         num_layers=o.proj_layers)
        self.criterion = NTXentLoss(temperature=o.temperature, gather_distributed=True)
        # (data_util.py:74-77: brightness, contrast, saturation 0.8 × strength, hue 0.2 × strength)
        self.view = View(count=2, size=int(backbone.patch_embed.img_size[0]), scale=(o.crop_scale, 1.0),
                         jitter=(o.jitter, o.jitter, o.jitter, o.jitter / 4), jitter_p=0.8, gray=o.gray).check(
                             "simclr's views")

    def init_parts(self) -> dict[str, tuple[str, ...]]:
        """`--from` of a SimCLR run continues its projection head with the backbone (the header says
        `head: runs/simclr step N`); from anything else it starts new, said."""
        return {"head": ("head.",)}

    def views(self) -> tuple[View, ...]:
        return (self.view,)

    def forward(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        first, second = batch["views"]  # (B, 3, S, S) each, normalised
        z0, z1 = self.head(self.backbone(torch.cat((first, second)))).chunk(2)  # (B, proj_dim) each
        loss = self.criterion(z0, z1)
        with torch.no_grad():  # how often a view's nearest other view (cosine) is its own pair
            sim = F.normalize(z0.float(), dim=1) @ F.normalize(z1.float(), dim=1).T  # (B, B)
            pair_top1 = (sim.argmax(1) == torch.arange(len(sim), device=sim.device)).float().mean()
        return {"loss": loss, "pair_top1": pair_top1}


__all__ = ["SimCLR"]

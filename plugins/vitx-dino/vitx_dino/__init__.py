"""DINO as a vitx objective (Caron et al. 2021), in one file, on lightly's `DINOProjectionHead`, `DINOLoss`,
`IBOTPatchLoss`, `KoLeoLoss` and `update_momentum`.

The student (the vitx backbone and a projection head) sees every crop of an image: 2 global crops at the run's
image size and N local crops at 96/224 of it, made in the loader's workers (`views()`: crop scale, flip, colour
jitter, grayscale, blur and solarisation as DINO's transform has them, seeded per sample and crop). The teacher
(a copy of both, never optimised) sees the global crops; its weights follow the student's by an exponential
moving average whose momentum rises from `momentum` to 1 on a cosine over the run. The loss is the
cross-entropy between the teacher's centred, sharpened output and the student's, for every pair of
different crops; the teacher temperature warms up as DINO's linspace; the head's last layer is frozen for the
first epoch; local crops' position embeddings are resampled as DINO's `interpolate_pos_encoding`; DINO's
collapse diagnostics are logged and read by `head_findings` (the runner's collapse watch). Options:

- `ibot` (weight, 0: off): iBOT's masked-patch self-distillation. A `mask_ratio` of the student's global-crop
  patches become a learned [mask] token; the student's patch outputs there are distilled from the teacher's
  (unmasked) patch outputs through a second head pair (DINOv2's separate iBOT head).
- `koleo` (weight, 0: off): DINOv2's KoLeo regulariser on the student's global [class] tokens, spreading them.
- `centering`: `mean` (DINO's: the teacher's output minus a moving mean, then a softmax at the teacher
  temperature) or `sinkhorn` (DINOv2's: 3 Sinkhorn-Knopp iterations over the batch, on every process's global
  crops, at the teacher temperature: each output dimension takes an equal share of the batch, no moving state;
  the iBOT patch loss keeps its moving centre).

Teacher and centres live in this module: saved with every checkpoint, resumed bit for bit, never optimised
(`requires_grad` off; iBOT's [mask] token is trained with the student); the teacher's backbone is also saved as teacher.safetensors, monitored
beside the student, and exported with `vitx export --export-teacher` (DINO evaluates the teacher).

    vitx pretrain --objective 'dino(local_crops=6)' --data embedded:digits
"""
from __future__ import annotations

import copy
import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from vitx import Objective, View, VitxError, option, register_objective
from vitx.objectives import Fitted
from vitx.objectives.base import HeadFinding
from vitx.backbones.droppath import SkippingBlock, set_drop_path
from vitx.backbones.packing import forward_packed
from vitx.backbones.stages import forward_tokens, staged
from vitx.runner.optim import cosine_from

DINO_JITTER = (0.4, 0.4, 0.2, 0.1)  # DINO's ColorJitter(brightness, contrast, saturation, hue), p = 0.8
LOCAL_FRACTION = 96 / 224  # local crops: 96px beside 224px global crops
BLUR_SIGMA = (0.1, 2.0)  # DINO's GaussianBlur radius_min, radius_max: PIL's radius is the sigma, in pixels
PACKINGS = ("off", "local", "all")  # the student's crops: a forward per crop size, or packed per image (DINOv2 §5)
CENTERINGS = ("mean", "sinkhorn")  # DINO's moving-mean centre; DINOv2's Sinkhorn-Knopp (3 iterations)
UNIFORM = 0.98  # a teacher whose mean entropy is this fraction of log K or more has a uniform output
SMALL_KL = 0.1  # ... while KL(teacher ‖ student) is at most this (nats): the student has caught up with its targets
CONSTANT = 0.02  # nats the teacher's output tells of the image (H(mean P_t) − mean H(P_t)) at most: the same output for every image
ONE_DIMENSION = math.log(2)  # a batch-mean teacher output with less entropy: one dimension takes the whole batch


def dino_pos_embed(pos_embed: torch.Tensor, grid: tuple[int, int], prefix: int) -> torch.Tensor:
    """The position embeddings (1, prefix + G·G, D) for a crop of `grid` patches, as DINO's
    `interpolate_pos_encoding`: the patch grid resampled bicubically (no antialiasing) with scale factor
    (grid + 0.1) / G (DINO's 0.1 avoids floating-point error in the output size), [class] embedding kept.
    Returns (1, grid[0]·grid[1], D), the patches' only."""
    patch = pos_embed[:, prefix:]  # (1, G·G, D)
    side, dim = int(math.sqrt(patch.shape[1])), patch.shape[-1]
    grid_pos = patch.reshape(1, side, side, dim).permute(0, 3, 1, 2)  # (1, D, G, G)
    out = torch.nn.functional.interpolate(grid_pos, scale_factor=((grid[0] + 0.1) / side, (grid[1] + 0.1) / side),
                                          mode="bicubic")  # (1, D, grid[0], grid[1])
    if tuple(out.shape[-2:]) != tuple(grid):
        raise VitxError(f"dino: position embeddings resampled to {tuple(out.shape[-2:])}, not {tuple(grid)}")
    return out.permute(0, 2, 3, 1).reshape(1, grid[0] * grid[1], dim)


def dino_views(size: int, local_size: int, global_crops: int = 2, local_crops: int = 8, global_scale: float = 0.4,
               local_scale: float = 0.05, blur_sigma: tuple[float, float] = BLUR_SIGMA) -> tuple[View, ...]:
    """DINO's DataAugmentationDINO as views: global crop 1 always blurred, global crop 2 blurred 10% and solarised
    20%, local crops blurred half the time; all flipped, colour-jittered and turned gray as DINO does; the blur's
    sigma drawn in `blur_sigma` pixels whatever the crop's size (DINO's PIL GaussianBlur radius 0.1–2)."""
    common = {"jitter": DINO_JITTER, "jitter_p": 0.8, "gray": 0.2, "flip": 0.5, "sigma": tuple(blur_sigma)}
    big = {"size": size, "scale": (global_scale, 1.0), **common}
    first = [View(blur=1.0, **big)] if global_crops >= 1 else []
    second = [View(count=global_crops - 1, blur=0.1, solarize=0.2, **big)] if global_crops > 1 else []
    local = [View(count=local_crops, size=local_size, scale=(local_scale, global_scale), blur=0.5,
                  **common)] if local_crops else []
    return tuple(first + second + local)


# lightly-train's data-size rule (lightly-ai/lightly-train 8f5a75c, src/lightly_train/_methods/dino/dino.py:86-151;
# `_scaling.py`: interpolate, clamped to its ends and rounded to 2 digits, and get_bucket_value): K by buckets of
# images, the teacher temperature linear from 0.02 at 20k images to 0.07 at ImageNet (1M), the warm-up temperature
# linear from 0.02 to 0.04 over that range of teacher temperatures and never above it, the warm-up over 37,500 steps
# (dino.py:144-151: DINO's 30 ImageNet epochs at batch 1024) at most 30% of the run (its
# warmup_teacher_temp_max_steps_fraction, dino.py:63, which its code applies to a warm-up given in epochs alone)
FIT_RULE = "lightly-train's rule, _methods/dino/dino.py:86-151"
WARMUP_TEACHER_STEPS, WARMUP_TEACHER_FRACTION = 37_500, 0.3
DEFAULT_WARMUP_TEMP = 0.04  # main_dino.py:68
OUT_DIMS = ((20_000, 1024), (50_000, 2048), (100_000, 4096), (200_000, 16384), (500_000, 32768),
            (math.inf, 65536))  # (images below, K)
IMAGENET_IMAGES = 1_000_000  # lightly-train's _scaling.IMAGENET_SIZE
FITTED = "fitted to the data ({} for a stream)"  # the default `vitx objectives dino` shows for a fitted option


def _interpolate(x: float, inputs: tuple[float, float], values: tuple[float, float]) -> float:
    """lightly-train's `_scaling.interpolate`: linear from values[0] at inputs[0] to values[1] at inputs[1], clamped
    to the values, rounded to 2 digits."""
    value = values[0] + (values[1] - values[0]) * (x - inputs[0]) / (inputs[1] - inputs[0])
    return round(min(max(value, values[0]), values[1]), 2)


@dataclass
class DINOOptions:
    """DINO's options: main_dino.py's defaults (facebookresearch/dino), named as lightly's DINO modules name them."""

    out_dim: int = option(65536, "Output dimension K of the projection head (main_dino.py's 65536). Unset, it is "
                          "fitted to the number of training images (lightly-train: 1,024 under 20k images, 2,048 "
                          "under 50k, ... 65,536 from 500k).", min=1, max=262144, shown=FITTED.format(65536))
    hidden_dim: int = option(2048, "Hidden width of the projection head's MLP (main_dino.py's 2048).", min=1,
                             max=16384)
    bottleneck_dim: int = option(256, "Bottleneck width before the weight-normed last layer (256).", min=1, max=4096)
    norm_last_layer: bool = option(True, "Fix the norm of the last layer's weights (main_dino.py's default; off "
                                   "trains faster but less stably for ViT-S).")
    batch_norm: bool = option(False, "BatchNorm in the head's MLP (main_dino.py's use_bn_in_head, off for ViTs).")
    freeze_last_layer: int | None = option(None, "Steps the last layer stays fixed at the start (none: one epoch, "
                                           "main_dino.py's freeze_last_layer 1).", min=0, shown="one epoch")
    global_crops: int = option(2, "Global crops per image, at the image size (DINO's 2).", min=1, max=8)
    local_crops: int = option(8, "Local crops per image (main_dino.py's local_crops_number 8); each is a forward "
                              "of the student, so at most 64.", min=0, max=64)
    local_size: int = option(0, "Local crops' side in pixels, a multiple of the patch (0: 96/224 of the image "
                             "size, as DINO's 96 beside 224).", min=0, max=1024)
    global_scale: float = option(0.4, "Smallest share of the image a global crop keeps (global_crops_scale "
                                 "(0.4, 1)); local crops keep up to it.", above=0, max=1)
    local_scale: float = option(0.05, "Smallest share of the image a local crop keeps (local_crops_scale "
                                "(0.05, 0.4)).", above=0, below=1)
    blur_sigma: list[float] = option(list(BLUR_SIGMA), "Gaussian blur sigma range (low, high) in pixels, whatever "
                                     "the crop's size (DINO's PIL radius 0.1-2).", above=0, length=2)
    momentum: float = option(0.996, "Teacher EMA momentum at the start, rising to 1 on a cosine (momentum_teacher).",
                             min=0, max=1)
    teacher_temp: float = option(0.04, "Teacher temperature after the warm-up (main_dino.py's 0.04). Unset, it is "
                                 "fitted to the number of training images (lightly-train: 0.02 up to 20k images, "
                                 "rising to 0.07 at ImageNet).", above=0, shown=FITTED.format(0.04))
    warmup_teacher_temp: float = option(DEFAULT_WARMUP_TEMP, "Teacher temperature at the start of the warm-up (0.04). Unset while "
                                        "teacher_temp is fitted, it is fitted too, never above it.", above=0,
                                        shown=FITTED.format(0.04))
    warmup_teacher_temp_steps: int = option(0, "Steps of the linear teacher-temperature warm-up (0: none, "
                                            "main_dino.py's default; its README's 0.07 runs warm up over 30 "
                                            "epochs). Unset while teacher_temp is fitted above the warm-up "
                                            "temperature, it is fitted too: 37,500 steps, at most 30% of the run "
                                            "(lightly-train).", min=0, shown=FITTED.format(0))
    student_temp: float = option(0.1, "Student temperature (0.1).", above=0)
    center_momentum: float = option(0.9, "Momentum of the teacher output's moving centre (0.9).", min=0, below=1)
    ibot: float = option(0.0, "Weight of iBOT's masked-patch self-distillation (0: off).", min=0)
    mask_ratio: float = option(0.3, "Share of the student's global-crop patches iBOT masks.", above=0, below=1)
    koleo: float = option(0.0, "Weight of DINOv2's KoLeo regulariser on the student's [class] tokens (0: off).",
                          min=0)
    centering: str = option("mean", "The teacher's centring: DINO's moving mean, or DINOv2's Sinkhorn-Knopp over "
                            "the batch.", choices=CENTERINGS)
    packed: str = option("off", "The student's crops: off (a forward per crop size, as DINO's code), local (each "
                         "image's local crops as one sequence with a block-diagonal attention mask) or all (its "
                         "global crops too, one forward for the student, as DINOv2 packs them). The same result to "
                         "float rounding; off is faster on a CPU (BENCHMARKS.md).", choices=PACKINGS)


@register_objective("dino", description="DINO (lightly): multi-crop self-distillation from an EMA teacher; "
                                        "iBOT and KoLeo options")
class DINO(Objective):
    features = "cls-token"  # the [class] token is what the DINO head reads (and what DINO evaluates)
    # main_dino.py's run (facebookresearch/dino; docs/recipes.md gives each line): AdamW, lr 5e-4 × batch / 256
    # warmed up from 0 (np.linspace) and cosine to min_lr 1e-6, weight decay 0.04 → 0.4 on all but biases and 1-D
    # parameters (get_params_groups), each parameter's gradient clipped to 3.0 (clip_gradients), drop path 0.1
    recipe = {"optimizer": "adamw", "betas": [0.9, 0.999], "blr": 5e-4, "warmup_start": "linspace",
              "schedule": "cosine", "min_lr": 1e-6, "weight_decay": 0.04, "weight_decay_end": 0.4,
              "decay_tokens": True, "grad_clip": 3.0, "grad_clip_mode": "per-parameter", "drop_path": 0.1}

    Options = DINOOptions

    def __init__(self, backbone: nn.Module, **options: Any) -> None:
        super().__init__(backbone, **options)  # checked against DINOOptions: types and each option's bounds
        o = self.settings
        out_dim, hidden_dim, bottleneck_dim, batch_norm = o.out_dim, o.hidden_dim, o.bottleneck_dim, o.batch_norm
        local_crops, local_size, ibot, koleo, mask_ratio = o.local_crops, o.local_size, o.ibot, o.koleo, o.mask_ratio
        teacher_temp, student_temp, center_momentum = o.teacher_temp, o.student_temp, o.center_momentum
        warmup_teacher_temp, warmup_teacher_temp_steps = o.warmup_teacher_temp, o.warmup_teacher_temp_steps
        norm_last_layer, freeze_last_layer = o.norm_last_layer, o.freeze_last_layer
        if o.global_crops + local_crops < 2:  # (what remains by hand: relations between options, and the backbone)
            raise VitxError("dino needs at least two crops in all (global_crops + local_crops ≥ 2)")
        if not o.local_scale < o.global_scale:
            raise VitxError(f"dino needs local_scale < global_scale, got {o.local_scale} and {o.global_scale}")
        if not o.blur_sigma[0] <= o.blur_sigma[1]:
            raise VitxError(f"dino blur_sigma must be (low, high) pixels with low <= high, got {tuple(o.blur_sigma)}")
        if o.packed != "off" and not staged(backbone):
            raise VitxError(f"dino packed={o.packed} needs timm's VisionTransformer stages; "
                            f"{type(backbone).__name__} has another forward: use packed=off")
        if o.packed != "off" and any(isinstance(b, SkippingBlock) for b in getattr(backbone, "blocks", ())):
            raise VitxError(f"dino packed={o.packed} cannot skip dropped samples (a packed row holds all of an "
                            "image's crops): use --drop-path-mode mask, or packed=off")
        if ibot > 0 and round(mask_ratio * backbone.patch_embed.num_patches) < 1:
            raise VitxError(f"dino mask_ratio {mask_ratio} masks no patch of {backbone.patch_embed.num_patches}; raise it")
        # lightly (and torchvision through it) takes seconds to import: only when a DINO is built
        from lightly.loss import DINOLoss, IBOTPatchLoss, KoLeoLoss
        from lightly.models.modules import DINOProjectionHead

        self.patch = int(backbone.patch_embed.patch_size[0])
        self.image_size = int(backbone.patch_embed.img_size[0])
        self.local_size = local_size or max(self.patch, round(self.image_size * LOCAL_FRACTION / self.patch) * self.patch)
        if local_crops and self.local_size % self.patch:
            raise VitxError(f"dino local_size must be a multiple of the patch size {self.patch}, got {local_size}")
        if local_crops and self.local_size > self.image_size:
            raise VitxError(f"dino local_size {local_size} is larger than the image ({self.image_size} px): local "
                            f"crops are the small views (DINO's 96 beside 224); give at most {self.image_size}, or 0")
        backbone.patch_embed.strict_img_size = False  # local crops are smaller: position embeddings are resampled

        def head(like: nn.Module | None = None) -> nn.Module:
            """A projection head; with `like`, a copy of it (weight-normed layers refuse `copy.deepcopy`)."""
            with warnings.catch_warnings():  # lightly's head uses torch's older weight_norm (a FutureWarning)
                warnings.simplefilter("ignore", FutureWarning)
                made = DINOProjectionHead(backbone.embed_dim, hidden_dim, bottleneck_dim, out_dim, batch_norm,
                                          norm_last_layer=norm_last_layer)  # (frozen by `on_after_backward`)
            if like is not None:
                made.load_state_dict(like.state_dict())
            return made

        self.head = head()
        self.criterion = DINOLoss(out_dim, warmup_teacher_temp, teacher_temp, max(1, warmup_teacher_temp_steps),
                                  student_temp, center_momentum)
        teacher_backbone = copy.deepcopy(backbone)
        set_drop_path(teacher_backbone, 0.0)  # DINO's teacher sees its inputs whole: no stochastic depth
        teacher_backbone.set_grad_checkpointing(False)  # (it computes no gradients)
        teacher = {"backbone": teacher_backbone, "head": head(self.head)}
        if ibot > 0:
            self.mask_token = nn.Parameter(torch.zeros(backbone.embed_dim))  # (D,) trained with the student
            nn.init.trunc_normal_(self.mask_token, std=0.02)
            self.ibot_head = head()
            teacher["ibot_head"] = head(self.ibot_head)
            self.ibot_criterion = IBOTPatchLoss(out_dim, teacher_temp, student_temp, center_momentum=center_momentum)
        self.koleo_criterion = KoLeoLoss() if koleo > 0 else None
        # the teacher is the student's moving average: saved and resumed with the objective, never optimised
        self.teacher = nn.ModuleDict(teacher).requires_grad_(False)
        self.step, self.steps = 0, 1  # the next step and the run's length (`on_fit_start`): the schedules' clock
        self.frozen_steps = freeze_last_layer or 0  # the last layers' fixed steps (None: one epoch's, at the start)

    # ---- defaults fitted to the data ----------------------------------------------------------------------
    @classmethod
    def fit_to_data(cls, given: dict[str, Any], images: int, steps: int) -> Fitted | None:
        """lightly-train's DINO defaults for the dataset's size (`DINOArgs.resolve_auto`, FIT_RULE), for those of
        out_dim, teacher_temp, warmup_teacher_temp and warmup_teacher_temp_steps the user left unset: main_dino.py's
        65,536 dimensions and 0.04 → 0.07 teacher temperatures are for ImageNet; on small data a lower temperature
        sharpens the teacher enough to keep its output from collapsing to uniform. The warm-up temperature follows
        the fitted one and never exceeds it; where it is below it, the warm-up takes 37,500 steps, at most 30% of
        the run's `steps` (a fitted 0.07 from the first step is what main_dino.py calls unstable). Each option the
        user set is kept as given."""
        values: dict[str, Any] = {}
        if "out_dim" not in given:
            values["out_dim"] = next(k for below, k in OUT_DIMS if images < below)
        if "teacher_temp" not in given:
            values["teacher_temp"] = temp = _interpolate(images, (20_000, IMAGENET_IMAGES), (0.02, 0.07))
            if "warmup_teacher_temp" not in given:
                values["warmup_teacher_temp"] = min(temp, _interpolate(temp, (0.02, 0.07), (0.02, 0.04)))
            start = values.get("warmup_teacher_temp", given.get("warmup_teacher_temp", DEFAULT_WARMUP_TEMP))
            if "warmup_teacher_temp_steps" not in given and start < temp:
                values["warmup_teacher_temp_steps"] = min(WARMUP_TEACHER_STEPS, int(steps * WARMUP_TEACHER_FRACTION))
        return Fitted(values, images, FIT_RULE) if values else None

    # ---- what the loader makes ------------------------------------------------------------------------------
    def views(self) -> tuple[View, ...]:
        o = self.options
        return dino_views(self.image_size, self.local_size, o["global_crops"], o["local_crops"], o["global_scale"],
                          o["local_scale"], o["blur_sigma"])

    # ---- schedules -----------------------------------------------------------------------------------------
    def on_fit_start(self, step: int, steps: int) -> None:
        self.step, self.steps = step, max(1, steps)
        if self.options["freeze_last_layer"] is None:  # DINO's default: the first epoch (a stream's length: unknown)
            self.frozen_steps = self.epoch_steps or 0

    def teacher_temperature(self) -> float:
        """DINO's warm-up, `np.linspace(warmup_teacher_temp, teacher_temp, W)` over the first W steps (the end
        value reached at step W − 1), then `teacher_temp`."""
        o = self.options
        warm = o["warmup_teacher_temp_steps"]
        if self.step >= warm or (self.step == warm - 1 and warm > 1):
            return float(o["teacher_temp"])
        if warm == 1:  # linspace(a, b, 1) is [a]
            return float(o["warmup_teacher_temp"])
        return float(o["warmup_teacher_temp"] + (o["teacher_temp"] - o["warmup_teacher_temp"]) * self.step / (warm - 1))

    def teacher_momentum(self, step: int) -> float:
        """The EMA momentum after optimiser step `step` (0-based): `momentum` → 1 on a cosine over the run, as
        main_dino.py:250's `utils.cosine_scheduler(momentum, 1, epochs, niter_per_ep)` (utils.py:193-194: the
        iteration i of N at 1 + (momentum − 1)(1 + cos(π i / N)) / 2, never quite 1)."""
        return cosine_from(step, self.steps, self.options["momentum"], 1.0)

    def on_after_backward(self) -> None:
        if self.step < self.frozen_steps:  # DINO keeps the last layer fixed for the first epoch (`grad = None`)
            heads = [self.head] + ([self.ibot_head] if self.options["ibot"] > 0 else [])
            for param in (p for head in heads for p in head.last_layer.parameters()):
                param.grad = None

    @torch.no_grad()
    def on_step_end(self, step: int) -> None:
        from lightly.models.utils import update_momentum

        m = self.teacher_momentum(step - 1)
        update_momentum(self.backbone, self.teacher["backbone"], m)
        update_momentum(self.head, self.teacher["head"], m)
        if self.options["ibot"] > 0:
            update_momentum(self.ibot_head, self.teacher["ibot_head"], m)
        self.step = step

    @torch.no_grad()
    def diagnostics(self, p: torch.Tensor, logp: torch.Tensor, student: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        """DINO's collapse diagnostics (its paper's §5.3): the teacher's centred, sharpened output P_t (g·B, K)
        (`logp`: its log) has `teacher_entropy` (the per-image mean; log K: uniform, the same for every image)
        and `teacher_batch_entropy` (of the batch's mean output; near 0: one dimension for every image), and
        `teacher_student_kl`, KL(P_t ‖ P_s) over the loss's pairs of different crops (→ 0 in either collapse)."""
        mean = p.mean(0)  # (K,)
        g = self.options["global_crops"]
        teacher, kl, pairs = list(zip(p.chunk(g), logp.chunk(g))), 0.0, 0
        for i, (pt, lt) in enumerate(teacher):
            for j, s in enumerate(student):
                if i != j:  # as the loss pairs them: each teacher global crop with every other student crop
                    ls = torch.log_softmax(s.float() / self.options["student_temp"], dim=-1)
                    kl, pairs = kl + (pt * (lt - ls)).sum(-1).mean(), pairs + 1
        return {"teacher_entropy": -(p * logp).sum(-1).mean(),
                "teacher_batch_entropy": -(mean * mean.clamp_min(1e-12).log()).sum(),
                "teacher_student_kl": kl / max(1, pairs)}

    def head_findings(self, metrics: dict[str, float]) -> list[HeadFinding]:
        """DINO's degenerate heads (its paper's §5.3, Fig. 7), by the teacher's output P_t: uniform (its entropy
        ≥ 98% of log K, KL(teacher ‖ student) small), one dimension for every image (the batch's mean output
        below log 2), or else the same output for every image (what it tells of the image, the entropy of the
        batch's mean output less the mean entropy per image, under CONSTANT nats: DINO's "KL = 0" collapse,
        seen at centre momentum 0.999). None is by itself a collapse: the CPU plan's DINO keeps a uniform head
        (0.997 of log K, KL 0.019) while its features double in rank and transfer 18 points above scratch
        (recipes/reproduction/DINO.md); the collapse watch calls one a collapse when the features stall too."""
        o = self.options
        k, temp, centre = o["out_dim"], o["teacher_temp"], o["center_momentum"]
        entropy, batch = metrics.get("teacher_entropy"), metrics.get("teacher_batch_entropy")
        kl = metrics.get("teacher_student_kl")
        kl_said = f"; KL(teacher ‖ student) {kl:.3f}" if kl is not None else ""
        sharpen = (f"sharpen the teacher: a lower teacher_temp (now {temp:g}), a smaller out_dim K (now {k:,}), "
                   f"center_momentum at DINO's 0.9 (now {centre:g}; 0.999 collapses in DINO's Appendix D)")
        if entropy is not None and entropy >= UNIFORM * math.log(k) and (kl is None or kl <= SMALL_KL):
            return [HeadFinding("teacher_entropy", entropy, UNIFORM * math.log(k), "uniform",
                                f"the DINO teacher's output is uniform (entropy {entropy:.3f} ≥ {UNIFORM:g} × log K = "
                                f"{UNIFORM * math.log(k):.3f}{kl_said})", sharpen)]
        if batch is not None and batch < ONE_DIMENSION:
            return [HeadFinding("teacher_batch_entropy", batch, ONE_DIMENSION, "one-hot",
                                f"one output dimension of the DINO teacher takes every image (the batch's mean output "
                                f"has entropy {batch:.3f} < log 2)", "soften the teacher: a higher teacher_temp (now "
                                f"{temp:g}) or a lower center_momentum (now {centre:g})")]
        if entropy is not None and batch is not None and batch - entropy <= CONSTANT:
            return [HeadFinding("teacher_information", batch - entropy, CONSTANT, "constant",
                                f"the DINO teacher's output is nearly the same for every image (it tells {batch - entropy:.3f} "
                                f"nats of the image: batch-mean entropy {batch:.3f} − per-image {entropy:.3f}{kl_said})",
                                sharpen)]
        return []

    def teacher_backbone(self) -> nn.Module:
        return self.teacher["backbone"]

    # ---- what --from continues -----------------------------------------------------------------------------
    def init_parts(self) -> dict[str, tuple[str, ...]]:
        """`--from` of a DINO run (or DINO's released checkpoint) continues the head, the teacher (backbone and
        head) and the centre with the student; iBOT's head, [mask] token and patch centre where it has them."""
        parts = {"head": ("head.",), "teacher": ("teacher.backbone.", "teacher.head."), "centre": ("criterion.center",)}
        if self.options["ibot"] > 0:
            parts["ibot"] = ("ibot_head.", "teacher.ibot_head.", "mask_token", "ibot_criterion.")
        return parts

    def released_state(self, layout: str, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """main_dino.py's checkpoint (`save_dict`, flattened) in this module's names: DINOHead's `mlp.N` is
        lightly's DINOProjectionHead `layers.N` (the same Linear/GELU order), `last_layer.weight_g/_v` the same
        weight norm, `dino_loss.center` (1, K) the criterion's (1, 1, K) centre; the teacher's ViT as it is."""
        if layout != "dino":
            return {}
        renamed = {}
        for key, value in state.items():
            for theirs, ours in (("student.head.mlp.", "head.layers."), ("student.head.", "head."),
                                 ("teacher.head.mlp.", "teacher.head.layers."), ("teacher.head.", "teacher.head."),
                                 ("teacher.backbone.", "teacher.backbone."), ("dino_loss.center", "criterion.center")):
                if key.startswith(theirs):
                    renamed[ours + key[len(theirs):]] = value
                    break
        return renamed

    # ---- the forward ---------------------------------------------------------------------------------------
    def encode(self, backbone: nn.Module, images: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, 3, S, S) at any multiple of the patch → (B, prefix + N, D) after the final norm (the backbone's
        staged forward); position embeddings resampled to the crop's grid as DINO does (`dino_pos_embed`);
        `mask` (B, N) bool: those patches become the [mask] token."""
        return forward_tokens(backbone, images, patches=self.masking(mask), resample=dino_pos_embed)

    def masking(self, mask: torch.Tensor | None) -> Any:
        """iBOT's [mask] token in place of the patch embeddings (B, N, D) where `mask` (B, N) is set; None: none."""
        if mask is None:
            return None
        return lambda x: torch.where(mask[..., None], self.mask_token.to(x.dtype), x)  # (B, N, D)

    def student_tokens(self, glob: torch.Tensor, local: torch.Tensor | None,
                       mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The student's tokens of the global crops (g·B, 3, S, S) → (g·B, prefix + N, D) and of the local crops
        (l·B, 3, s, s) → (l·B, prefix + n, D) (None without any): a forward per crop size, or packed per image as
        `packed` says (vitx/backbones/packing.py: the same tokens to float rounding)."""
        packed, batch = self.options["packed"], glob.shape[0] // self.options["global_crops"]
        if packed == "all" and local is not None:
            s_glob, s_local = forward_packed(self.backbone, [glob, local], batch, patches=[self.masking(mask), None],
                                             resample=dino_pos_embed)
            return s_glob, s_local
        s_glob = self.encode(self.backbone, glob, mask)
        if local is None:
            return s_glob, None
        if packed == "off":
            return s_glob, self.encode(self.backbone, local)
        return s_glob, forward_packed(self.backbone, [local], batch, resample=dino_pos_embed)[0]

    def forward(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        views = batch["views"]  # [(B, 3, S, S)] × global crops + [(B, 3, s, s)] × local crops
        g = self.options["global_crops"]
        glob = torch.cat(views[:g])  # (g·B, 3, S, S): same-sized crops in one forward, as DINO batches them
        mask = None
        if self.options["ibot"] > 0:  # a random `mask_ratio` of each global crop's patches (torch's seeded RNG)
            n = self.backbone.patch_embed.num_patches
            mask = torch.rand(glob.shape[0], n, device=glob.device).argsort(1) < round(self.options["mask_ratio"] * n)

        with torch.no_grad():
            t_tokens = self.encode(self.teacher["backbone"], glob)  # (g·B, prefix + N, D)
            t_out = self.teacher["head"](self.teacher["backbone"].forward_head(t_tokens, pre_logits=True))
        local = torch.cat(views[g:]) if len(views) > g else None  # (l·B, 3, s, s)
        s_tokens, l_tokens = self.student_tokens(glob, local, mask)  # (g·B, prefix + N, D), (l·B, prefix + n, D)
        s_cls = self.backbone.forward_head(s_tokens, pre_logits=True)  # (g·B, D)
        s_out = [self.head(s_cls)]
        if l_tokens is not None:
            s_out.append(self.head(self.backbone.forward_head(l_tokens, pre_logits=True)))
        student = list(torch.cat(s_out).chunk(len(views)))  # [(B, out_dim)] per crop, globals first
        return self.losses(t_out, student, t_tokens, s_tokens, s_cls, mask)

    @torch.compiler.disable
    def losses(self, t_out: torch.Tensor, student: list[torch.Tensor], t_tokens: torch.Tensor,
               s_tokens: torch.Tensor, s_cls: torch.Tensor, mask: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """DINO's loss (with iBOT's and KoLeo's where on) from the teacher's head outputs `t_out` (g·B, out_dim),
        the student's [(B, out_dim)] per crop, both networks' global-crop tokens (g·B, prefix + N, D), the
        student's [class] features `s_cls` (g·B, D) and iBOT's `mask` (g·B, N). Eager under --compile (the
        backbones and heads before it are compiled): the teacher's temperature and the EMA momentum are Python
        numbers that change each step, as lightly's losses take them, and a traced forward would be compiled
        again at every step (tests/test_compile.py)."""
        g = self.options["global_crops"]
        prefix = int(self.backbone.num_prefix_tokens)
        teacher = list(t_out.chunk(g))  # [(B, out_dim)] per global crop
        temp = self.teacher_temperature()
        center = self.criterion.center.clone()  # (1, out_dim) what the loss centres with (it then moves)
        keep = None if self.training else center  # evaluation leaves the centre as it was
        if self.options["centering"] == "sinkhorn":
            p = sinkhorn_teacher(t_out, temp)  # (g·B, out_dim), rows sum to 1
            logp = p.clamp_min(1e-30).log()
            dino = cross_view_entropy(list(p.chunk(g)), student, self.options["student_temp"])
        else:
            logp = torch.log_softmax((t_out.float() - center.view(1, -1)) / temp, dim=-1)  # (g·B, out_dim)
            p = logp.exp()
            dino = self.criterion(teacher, student, teacher_temp=temp)
        out = {"dino_loss": dino.detach()}
        if self.training:  # the schedules' values at this step (evaluation has none of its own), filled on the
            # device: torch.tensor(x, device=...) copies from the host and waits for the device's queue
            out["teacher_temp"] = torch.full((), temp, device=dino.device)
            out["momentum"] = torch.full((), self.teacher_momentum(self.step), device=dino.device)
        loss = dino
        if mask is not None:
            with torch.no_grad():
                t_patch = self.teacher["ibot_head"](t_tokens[:, prefix:][mask])  # (M, out_dim)
            s_patch = self.ibot_head(s_tokens[:, prefix:][mask])  # (M, out_dim)
            grid = self.backbone.patch_embed.grid_size
            kept = None if self.training else self.ibot_criterion.center.center.clone()
            ibot = self.ibot_criterion(t_patch, s_patch, mask.view(-1, *grid), teacher_temp=temp)
            if kept is not None:
                self.ibot_criterion.center.center = kept
            loss = loss + self.options["ibot"] * ibot
            out["ibot_loss"] = ibot.detach()
        if self.koleo_criterion is not None:
            koleo = sum(self.koleo_criterion(c) for c in s_cls.chunk(g)) / g
            loss = loss + self.options["koleo"] * koleo
            out["koleo_loss"] = koleo.detach()
        if keep is not None:
            self.criterion.center.copy_(keep)
        out.update(self.diagnostics(p, logp, student))
        out["loss"] = loss
        return out


@torch.no_grad()
def sinkhorn_teacher(t_out: torch.Tensor, temp: float, iterations: int = 3) -> torch.Tensor:
    """DINOv2's teacher targets: Sinkhorn-Knopp over the batch (lightly's SwAV `sinkhorn`, every process's rows
    together) of the teacher's output (g·B, K) at temperature `temp`. Each row sums to 1 and each dimension takes
    about an equal share of the batch: no dimension can take every image and no moving centre is needed."""
    import torch.distributed as dist
    from lightly.loss.swav_loss import sinkhorn

    top = t_out.float().max()  # a constant shift leaves the normalised result unchanged; exp(·/temp) stays finite
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(top, op=dist.ReduceOp.MAX)  # the same shift on every process
    return sinkhorn(t_out.float() - top, iterations=iterations, epsilon=temp, gather_distributed=True)


def cross_view_entropy(teacher: list[torch.Tensor], student: list[torch.Tensor], student_temp: float) -> torch.Tensor:
    """DINO's loss from given teacher probabilities [(B, K)] per global crop: the cross-entropy with the student's
    softmax at `student_temp` [(B, K)] per crop, averaged over the pairs of different crops (as lightly's DINOLoss
    pairs them)."""
    t = torch.stack(teacher)  # (g, B, K)
    s = torch.log_softmax(torch.stack(student).float() / student_temp, dim=-1)  # (v, B, K)
    loss = -torch.einsum("tbk,sbk->ts", t, s)  # (g, v): summed over the batch
    loss.fill_diagonal_(0)  # a crop is not its own target
    pairs = loss.numel() - min(loss.shape)
    return loss.sum() / (pairs * t.shape[1])


__all__ = ["DINO", "cross_view_entropy", "dino_pos_embed", "dino_views", "sinkhorn_teacher"]

"""Train and eval preprocessing on uint8 tensors, driven by an explicit random generator.

Loader workers decode to (3, H, W) uint8 (`decode.py`), crop and resize with torchvision's `transforms.v2`
kernels on uint8 (AVX2 paths, no float image on the CPU), and hand over uint8: a quarter of float32's shared
memory and host-to-device traffic. Normalisation happens once, on the device, in `Preprocess.normalise`.

Randomness comes from a generator seeded by (run seed, stream position) for every sample, so the same sample
gets the same augmentation whichever process or worker loads it: runs are reproducible across process counts
and resume exactly.
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from ..errors import VitxError
from ..settings.groups import augment_policy  # (--randaugment's meaning, with its group)
from . import INTERPOLATIONS

EVAL_RESIZES = ("tensor", "timm", "big_vision")
CROP_MODES = ("center", "squash", "border")  # timm's eval crop modes (a pretrained_cfg's crop_mode)


@lru_cache(maxsize=16)
def timm_eval_transform(size: int, crop_pct: float, crop_mode: str, interpolation: str,
                        mean: tuple[float, ...]) -> Any:
    """timm's own eval transform, `create_transform(is_training=False)` with these settings, in its prefetcher form
    (geometry only, ending in a uint8 tensor; vitx normalises on the device). Built by timm, not rebuilt here, so
    every crop mode (center: the short side to floor(S / crop_pct), a centre crop; squash: both sides to
    floor(S / crop_pct), aspect not kept, a centre crop; border: the long side to floor(S / crop_pct), padded
    with the mean colour) and every crop_pct gives timm's pixels. One per setting in each loader worker."""
    from timm.data import create_transform

    return create_transform(input_size=(3, size, size), is_training=False, interpolation=interpolation, mean=mean,
                            crop_pct=crop_pct, crop_mode=crop_mode, use_prefetcher=True)


def _timm_eval(image: torch.Tensor, size: int, crop_pct: float, crop_mode: str, interpolation: str,
               mean: tuple[float, ...]) -> torch.Tensor:
    """A (3, H, W) uint8 image through timm's eval transform (`timm_eval_transform`, on a PIL image as timm's
    loader gives it) → (3, S, S) uint8: the pixels timm's pipeline gives, so a timm model sees its own input."""
    picture = Image.fromarray(image.permute(1, 2, 0).numpy())  # (H, W, 3) RGB
    out = timm_eval_transform(size, crop_pct, crop_mode, interpolation, tuple(mean))(picture)  # (3, S, S) uint8
    return out.contiguous()


def _big_vision_eval(image: torch.Tensor, size: int) -> torch.Tensor:
    """big_vision's few-shot evaluator input (`configs/common_fewshot.py`: `resize_small(256, antialias=True)|
    central_crop(224)`, scaled to `size`): the short side resized by area averaging to round(size · 256/224),
    the aspect kept (sides rounded), then a centre crop of size. (3, H, W) uint8 → (3, S, S) uint8; torch's area
    resampling, so pixels may differ from TensorFlow's by rounding."""
    h, w = image.shape[-2:]
    ratio = round(size * 256 / 224) / min(h, w)
    new_h, new_w = max(size, round(h * ratio)), max(size, round(w * ratio))
    resized = F.interpolate(image[None].float(), size=(new_h, new_w), mode="area")[0]
    top, left = (new_h - size) // 2, (new_w - size) // 2
    out = resized[:, top:top + size, left:left + size].round().clamp(0, 255).to(torch.uint8)
    return out.contiguous()  # (3, S, S)


def finite_numbers(value: object, count: int, positive: bool, what: str) -> tuple[float, ...]:
    """`count` finite numbers (above 0 when `positive`) from a JSON list, as a tuple."""
    ok = isinstance(value, (list, tuple)) and len(value) == count and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (v > 0 or not positive)
        for v in value)
    if not ok:
        kind = "positive finite numbers" if positive else "finite numbers"
        raise VitxError(f"{what} must be a list of {count} {kind}, got {json.dumps(value)[:60]}")
    return tuple(float(v) for v in value)


@dataclass(frozen=True)
class Preprocess:
    """Everything needed to turn an image into the model's input; stored in config.json.

    mean/std 0.5 maps pixels to [-1, 1] as in the paper's code. `crop_scale` is the lower bound of the random
    resized crop's area (the Inception setting is 0.08, right for natural images at 224px; the runner's default 0.8
    keeps objects whole on small procedural images).
    """

    image_size: int
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    interpolation: str = "bicubic"
    crop_scale: float = 0.08
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    hflip: bool = True
    eval_crop_pct: float = 1.0
    squash: bool = False  # eval: resize the whole image to a square (VTAB) instead of centre-cropping it
    eval_resize: str = "tensor"  # eval: "tensor" (crop, then resize on uint8 tensors), "timm" (timm's eval
    # transform, pixel for pixel, with eval_crop_pct and eval_crop_mode: `timm_eval_transform`) or "big_vision"
    # (its few-shot evaluator's: short side to S·256/224 by area averaging, centre crop S)
    eval_crop_mode: str = "center"  # with eval_resize "timm": timm's crop_mode (center, squash or border)
    augment: bool = True  # False: training sees the eval transform too (VTAB's protocol: resize only)
    randaugment: str = ""  # a timm RandAugment policy after the crop, e.g. "rand-m9-mstd0.5-inc1"; "": none
    random_erasing: float = 0.0  # probability of timm's RandomErasing (per-pixel noise), on the device, training only

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, where: str = "preprocess") -> "Preprocess":
        """The preprocessing a config.json records (`to_dict`), for commands that reuse a finished run's
        evaluation transform (predict, export), checked as its flags are: the file may have been edited, and a
        bad value would otherwise be a traceback deep in torchvision, or an export that timm cannot use.
        `where` names the record in errors."""
        from ..backbones.spec import MAX_IMAGE_SIDE
        from ..recipe import typed

        if not isinstance(data, dict):
            raise VitxError(f"{where} must be an object of settings")
        values = dict(typed(cls, key, value, where) for key, value in data.items())  # unknown keys, types
        if "image_size" not in values:
            raise VitxError(f"{where}: image_size is missing")
        if not 1 <= values["image_size"] <= MAX_IMAGE_SIDE:
            raise VitxError(f"{where}: image_size must be from 1 to {MAX_IMAGE_SIDE}, got {values['image_size']}")
        for key, count, positive in (("mean", 3, False), ("std", 3, True), ("crop_ratio", 2, True)):
            if key in values:
                values[key] = finite_numbers(values[key], count, positive, f"{where}: {key}")
        if "crop_ratio" in values and values["crop_ratio"][0] > values["crop_ratio"][1]:
            raise VitxError(f"{where}: crop_ratio must be [low, high] with low <= high")
        for key, choices in (("eval_resize", EVAL_RESIZES), ("interpolation", INTERPOLATIONS),
                             ("eval_crop_mode", CROP_MODES)):
            if values.get(key, choices[0]) not in choices:
                raise VitxError(f"{where}: {key} must be one of {', '.join(choices)}, got '{values[key]}'")
        for key, lo, hi, open_lo in (("crop_scale", 0, 1, True), ("eval_crop_pct", 0, 1, True),
                                     ("random_erasing", 0, 1, False)):
            value = values.get(key, 1)
            if not (lo < value <= hi if open_lo else lo <= value <= hi):
                raise VitxError(f"{where}: {key} must be in {'(' if open_lo else '['}{lo}, {hi}], got {value}")
        return cls(**values)

    def train(self, image: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        """Random resized crop + horizontal flip: (3, H, W) uint8 → (3, S, S) uint8."""
        top, left, h, w = self._random_box(image.shape[-2:], rng)
        out = self._resize(image[:, top:top + h, left:left + w])
        if self.hflip and rng.random() < 0.5:
            out = out.flip(-1)
        if self.randaugment:
            out = _rand_augment(out, self.randaugment, self.image_size, self.mean, rng)
        return out

    def erase(self, x: torch.Tensor) -> torch.Tensor:
        """timm's RandomErasing on a normalised training batch (B, 3, S, S), where timm's own loader applies it
        (after normalisation, on the device: erased pixels are N(0, 1) noise in normalised units). Its draws
        come from Python's and torch's generators, which the runner seeds at every micro-step."""
        return _eraser(self.random_erasing, x.device)(x) if self.random_erasing > 0 else x

    def eval(self, image: torch.Tensor) -> torch.Tensor:
        """Centre crop of `eval_crop_pct` of the short side (or the whole image when `squash`), resized; timm's
        eval transform with eval_resize "timm": (3, H, W) uint8 → (3, S, S) uint8."""
        h, w = image.shape[-2:]
        if self.eval_resize == "timm" and not self.squash:
            return _timm_eval(image, self.image_size, self.eval_crop_pct, self.eval_crop_mode, self.interpolation,
                              self.mean)
        if self.eval_resize == "big_vision":
            return _big_vision_eval(image, self.image_size)
        if not self.squash:
            side = max(1, round(min(h, w) * self.eval_crop_pct))
            top, left = (h - side) // 2, (w - side) // 2
            image = image[:, top:top + side, left:left + side]
        return self._resize(image)

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """(..., 3, S, S) uint8 → float32, (x/255 − mean)/std; run it on the device the model is on."""
        scale, shift = _affine(self.mean, self.std, x.device)  # (3, 1, 1) each, made once per device
        return torch.addcmul(shift, x.float(), scale)  # x·(1/(255·std)) − mean/std

    def _resize(self, image: torch.Tensor, size: int | None = None) -> torch.Tensor:
        return resize_square(image, size or self.image_size, self.interpolation)

    def _random_box(self, size: tuple[int, int], rng: np.random.Generator) -> tuple[int, int, int, int]:
        return random_box(size, (self.crop_scale, 1.0), self.crop_ratio, rng)


def resize_square(image: torch.Tensor, size: int, interpolation: str) -> torch.Tensor:
    """(3, H, W) uint8 → (3, size, size) uint8 with torchvision's v2 kernel (antialiased unless nearest)."""
    from torchvision.transforms.v2 import InterpolationMode
    from torchvision.transforms.v2.functional import resize

    if tuple(image.shape[-2:]) == (size, size):
        return image.contiguous()
    mode = InterpolationMode(interpolation)
    return resize(image, [size, size], interpolation=mode, antialias=mode != InterpolationMode.NEAREST)


def random_box(size: tuple[int, int], scale: tuple[float, float], ratio: tuple[float, float],
               rng: np.random.Generator) -> tuple[int, int, int, int]:
    """Inception-style crop (top, left, height, width), as torchvision's RandomResizedCrop draws it: area in
    `scale` of the image's, log-uniform aspect ratio in `ratio`; the centre square after 10 misses."""
    h, w = int(size[0]), int(size[1])
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target = w * h * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        cw, ch = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < cw <= w and 0 < ch <= h:
            left, top = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
            return top, left, ch, cw
    side = min(w, h)
    return (h - side) // 2, (w - side) // 2, side, side


def _rand_augment(image: torch.Tensor, policy: str, size: int, mean: tuple[float, ...],
                  rng: np.random.Generator) -> torch.Tensor:
    """A timm policy (a PIL transform) on a (3, S, S) uint8 tensor. timm draws from Python's and NumPy's global
    generators, torchvision's TrivialAugment from torch's: all are seeded from this sample's own generator and
    restored after, so the sample's augmentation depends on (seed, position) alone, as the crop does."""
    op = augment_policy(policy, size, mean)
    state, np_state = random.getstate(), np.random.get_state()
    seed = int(rng.integers(2**63))
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            out = op(Image.fromarray(image.permute(1, 2, 0).numpy()))
    finally:
        random.setstate(state)
        np.random.set_state(np_state)
    return torch.from_numpy(np.asarray(out, dtype=np.uint8).copy()).permute(2, 0, 1).contiguous()


@lru_cache(maxsize=8)
def _eraser(probability: float, device: torch.device):
    from timm.data.random_erasing import RandomErasing

    return RandomErasing(probability, mode="pixel", device=device)


@lru_cache(maxsize=16)
def _affine(mean: tuple[float, ...], std: tuple[float, ...], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalisation as one multiply-add, its constants kept on the device: building them from Python lists at
    every step would be a host-to-device copy that waits for the device."""
    scale = torch.tensor([1.0 / (255.0 * s) for s in std]).view(3, 1, 1)
    shift = torch.tensor([-m / s for m, s in zip(mean, std)]).view(3, 1, 1)
    return scale.to(device), shift.to(device)

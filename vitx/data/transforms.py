"""Train and eval preprocessing, driven by an explicit random generator.

Randomness comes from a generator seeded by (run seed, stream position) for every sample, so the same sample
gets the same augmentation whichever process or worker loads it: runs are reproducible across process counts
and resume exactly.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
from PIL import Image

INTERPOLATION = {"bicubic": Image.BICUBIC, "bilinear": Image.BILINEAR, "nearest": Image.NEAREST}


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

    def to_dict(self) -> dict:
        return asdict(self)

    def train(self, img: Image.Image, rng: np.random.Generator) -> torch.Tensor:
        """Random resized crop + horizontal flip + normalise. Returns (3, S, S)."""
        box = self._random_box(img.size, rng)
        out = img.resize((self.image_size, self.image_size), INTERPOLATION[self.interpolation], box=box)
        if self.hflip and rng.random() < 0.5:
            out = out.transpose(Image.FLIP_LEFT_RIGHT)
        return self._normalise(out)

    def eval(self, img: Image.Image) -> torch.Tensor:
        """Resize the short side to size / crop_pct, centre-crop to size, normalise. Returns (3, S, S)."""
        return self._normalise(self.eval_image(img))

    def eval_image(self, img: Image.Image) -> Image.Image:
        """The eval crop and resize, before normalisation (what in-memory splits store, as uint8)."""
        w, h = img.size
        side = min(w, h) * self.eval_crop_pct
        box = None if self.squash else ((w - side) / 2, (h - side) / 2, (w + side) / 2, (h + side) / 2)
        return img.resize((self.image_size, self.image_size), INTERPOLATION[self.interpolation], box=box)

    def normalise_uint8(self, x: torch.Tensor) -> torch.Tensor:
        """(..., 3, S, S) uint8 → float, normalised like `eval`."""
        mean = torch.tensor(self.mean, device=x.device).view(3, 1, 1)
        std = torch.tensor(self.std, device=x.device).view(3, 1, 1)
        return (x.float().div_(255.0) - mean) / std

    def _random_box(self, size: tuple[int, int], rng: np.random.Generator) -> tuple[float, float, float, float]:
        """Inception-style crop: area in [crop_scale, 1], log-uniform aspect ratio; centre crop after 10 misses."""
        w, h = size
        area = w * h
        log_lo, log_hi = math.log(self.crop_ratio[0]), math.log(self.crop_ratio[1])
        for _ in range(10):
            target = area * rng.uniform(self.crop_scale, 1.0)
            ratio = math.exp(rng.uniform(log_lo, log_hi))
            cw, ch = math.sqrt(target * ratio), math.sqrt(target / ratio)
            if cw <= w and ch <= h:
                x0, y0 = rng.uniform(0, w - cw), rng.uniform(0, h - ch)
                return (x0, y0, x0 + cw, y0 + ch)
        side = min(w, h)
        return ((w - side) / 2, (h - side) / 2, (w + side) / 2, (h + side) / 2)

    def _normalise(self, img: Image.Image) -> torch.Tensor:
        x = torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1).float().div_(255.0)  # (3, S, S)
        mean = torch.tensor(self.mean).view(3, 1, 1)
        std = torch.tensor(self.std).view(3, 1, 1)
        return (x - mean) / std

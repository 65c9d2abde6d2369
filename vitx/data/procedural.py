"""Embedded datasets drawn on the fly: deterministic from (seed, split, index), at any image size, no files.

- `leaves`: unlabeled dead-leaves images (Baradad et al. 2021, "Learning to See by Looking at Noise"):
  occluding discs and rotated rectangles with power-law sizes, which gives natural-image-like 1/f spectra
  and edge statistics. For self-supervised pre-training.
- `shapes`: a labelled 10-class set (circle, ring, square, triangle, cross, flower, ellipse, bar, semicircle,
  bowtie) at random position, scale, rotation and colour over a noisy gradient. For supervised demos.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from PIL import Image

from ..errors import VitxError

SPLIT_KEYS = {"train": 0, "validation": 1, "test": 2}
MAX_LENGTH = 100_000_000  # far above any real use: a typo must not allocate labels for minutes


def check_options(data: Any) -> None:
    """Each option as its default's kind (`length=-5`, `classes='a'`, `size=0`): one line naming the option,
    instead of a crash inside numpy at the first image."""
    what = "embedded:" + next(k for k, v in EMBEDDED.items() if isinstance(data, v))
    for f in fields(data):
        value = getattr(data, f.name)
        if isinstance(f.default, bool):
            if not isinstance(value, bool):
                raise VitxError(f"{what}: {f.name} must be True or False, got {value!r}")
        elif isinstance(f.default, int):
            low = 1 if f.name == "size" else 0
            high = MAX_LENGTH if f.name == "length" else 2 ** 32 - 1 if f.name == "seed" else 4_096
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise VitxError(f"{what}: {f.name} must be a whole number from {low} to {high:,}, got {value!r}")
        elif isinstance(f.default, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise VitxError(f"{what}: {f.name} must be a positive number, got {value!r}")
        elif isinstance(f.default, str) and value not in SPLIT_KEYS:
            raise VitxError(f"{what}: {f.name} must be one of {', '.join(SPLIT_KEYS)}, got {value!r}")


def _grid(size: int, supersample: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Pixel-centre coordinates in [0, 1), `supersample`× denser for anti-aliasing. Each (S*ss, S*ss)."""
    n = size * supersample
    c = (np.arange(n, dtype=np.float32) + 0.5) / n
    return np.meshgrid(c, c, indexing="xy")


def _downsample(img: np.ndarray, factor: int) -> np.ndarray:  # (H*f, W*f, C) -> (H, W, C)
    h, w = img.shape[0] // factor, img.shape[1] // factor
    return img.reshape(h, factor, w, factor, -1).mean(axis=(1, 3))


def _to_image(rgb: np.ndarray) -> Image.Image:
    return Image.fromarray((np.clip(rgb, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8), "RGB")


def _random_colours(rng: np.random.Generator, n: int) -> np.ndarray:
    """Colours with varied hue, saturation and value (HSV sampled, converted to RGB). (n, 3) in [0, 1]."""
    h, s, v = rng.random(n), rng.beta(1.2, 1.2, n), rng.beta(2.0, 1.3, n)
    k = (np.array([5.0, 3.0, 1.0])[None, :] + h[:, None] * 6.0) % 6.0
    return v[:, None] - v[:, None] * s[:, None] * np.clip(np.minimum(k, 4.0 - k), 0.0, 1.0)


@dataclass(frozen=True)
class _Drawn:
    """What the generated sets share: `length` images of `size` pixels, each drawn from (seed, split, index)."""

    size: int = 32
    length: int = 0
    seed: int = 0
    split: str = "train"

    def __post_init__(self) -> None:
        check_options(self)

    def __len__(self) -> int:
        return self.length

    def _rng(self, index: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, SPLIT_KEYS[self.split], index])


@dataclass(frozen=True)
class DeadLeaves(_Drawn):
    """Unlabeled dead-leaves corpus. `leaves` discs/rectangles per image, radii ~ r^-3 in [r_min, r_max]."""

    length: int = 50_000
    leaves: int = 96
    r_min: float = 0.04
    r_max: float = 0.4
    num_classes: None = None
    class_names: None = None

    def load(self, index: int) -> tuple[Image.Image, int | None]:
        rng = self._rng(index)
        n = self.leaves
        # inverse-CDF sampling of p(r) ∝ r^-3 on [r_min, r_max]
        a, b = self.r_min ** -2, self.r_max ** -2
        radius = (a - rng.random(n) * (a - b)) ** -0.5  # (n,)
        centre = rng.random((n, 2))
        square = rng.random(n) < 0.5
        theta = rng.random(n) * math.pi
        aspect = np.exp(rng.normal(0.0, 0.35, n))
        colour = _random_colours(rng, n + 1)  # (n + 1, 3); the last one is the ground
        ss = 2 if self.size < 128 else 1
        side = self.size * ss
        rgb = np.full((side, side, 3), colour[-1], np.float32)
        coords = (np.arange(side, dtype=np.float32) + 0.5) / side
        for i in range(n - 1, -1, -1):  # back to front: leaf 0 ends on top
            reach = radius[i] * max(aspect[i], 1 / aspect[i]) * 1.2
            x0, x1 = np.searchsorted(coords, [centre[i, 0] - reach, centre[i, 0] + reach])
            y0, y1 = np.searchsorted(coords, [centre[i, 1] - reach, centre[i, 1] + reach])
            if x0 >= x1 or y0 >= y1:
                continue
            dx = coords[None, x0:x1] - centre[i, 0]  # (1, w)
            dy = coords[y0:y1, None] - centre[i, 1]  # (h, 1)
            c, s = math.cos(theta[i]), math.sin(theta[i])
            u, v = (dx * c + dy * s) / aspect[i], (dy * c - dx * s) * aspect[i]  # (h, w)
            r = radius[i]
            inside = (np.abs(u) <= r * 0.85) & (np.abs(v) <= r * 0.85) if square[i] else u * u + v * v <= r * r
            rgb[y0:y1, x0:x1][inside] = colour[i]
        shade = 1.0 + 0.08 * rng.standard_normal(3)  # a little global tint variation
        return _to_image(_downsample(rgb * shade, ss)), None


TRIANGLE = np.pi / 2 + 2 * np.pi * np.arange(3) / 3 + np.pi / 3  # its three edges' normals
# each shape's inside-test in its own frame, unit radius: (u, v, r2 = u² + v²) → mask
SHAPE_MASKS = {
    "circle": lambda u, v, r2: r2 <= 1.0,
    "ring": lambda u, v, r2: (r2 <= 1.0) & (r2 >= 0.36),
    "square": lambda u, v, r2: (np.abs(u) <= 0.8) & (np.abs(v) <= 0.8),
    # regular, circumradius 1: inside all three edge half-planes (apothem 0.5)
    "triangle": lambda u, v, r2: np.stack([u * np.cos(t) + v * np.sin(t) for t in TRIANGLE]).max(axis=0) <= 0.5,
    "cross": lambda u, v, r2: ((np.abs(u) <= 0.3) & (np.abs(v) <= 0.95)) | ((np.abs(v) <= 0.3) & (np.abs(u) <= 0.95)),
    "flower": lambda u, v, r2: np.sqrt(r2) <= 0.6 + 0.4 * np.cos(5 * np.arctan2(v, u)),
    "ellipse": lambda u, v, r2: u * u + (v / 0.45) ** 2 <= 1.0,
    "bar": lambda u, v, r2: (np.abs(u) <= 0.95) & (np.abs(v) <= 0.25),
    "semicircle": lambda u, v, r2: (u * u + (v + 0.4) ** 2 <= 1.0) & (v >= -0.4),
    "bowtie": lambda u, v, r2: (np.abs(u) <= 0.9) & (np.abs(v) <= np.abs(u) * 0.9),
}
SHAPES = tuple(SHAPE_MASKS)


@dataclass(frozen=True)
class Shapes(_Drawn):
    """Labelled procedural classification: which of 10 shapes is drawn (balanced: label = index mod classes)."""

    length: int = 20_000
    classes: int = 10
    rotate: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 2 <= self.classes <= len(SHAPES):
            raise VitxError(f"embedded:shapes supports 2 to {len(SHAPES)} classes, got {self.classes}")

    @property
    def num_classes(self) -> int:
        return self.classes

    @property
    def class_names(self) -> list[str]:
        return list(SHAPES[: self.classes])

    def labels(self) -> np.ndarray:
        return np.arange(self.length, dtype=np.int64) % self.classes

    def load(self, index: int) -> tuple[Image.Image, int]:
        rng = self._rng(index)
        label = index % self.classes
        x, y = _grid(self.size)
        # background: a gradient between two colours at a random angle, plus pixel noise
        bg = _random_colours(rng, 2)
        angle = rng.random() * 2 * math.pi
        t = np.clip((x - 0.5) * math.cos(angle) + (y - 0.5) * math.sin(angle) + 0.5, 0, 1)[..., None]
        rgb = bg[0] * (1 - t) + bg[1] * t
        # foreground: contrasting colour, random scale / position / rotation
        fg = _random_colours(rng, 1)[0]
        if abs(fg.mean() - bg.mean()) < 0.25:
            fg = 1.0 - fg
        scale = rng.uniform(0.22, 0.42)
        cx, cy = rng.uniform(scale, 1 - scale, 2)
        theta = rng.random() * 2 * math.pi if self.rotate else 0.0
        dx, dy = (x - cx) / scale, (y - cy) / scale
        u = dx * math.cos(theta) + dy * math.sin(theta)
        v = dy * math.cos(theta) - dx * math.sin(theta)
        rgb = np.where(SHAPE_MASKS[SHAPES[label]](u, v, u * u + v * v)[..., None], fg, rgb)
        rgb = _downsample(rgb, 2) + rng.normal(0.0, 0.04, (self.size, self.size, 3))
        return _to_image(rgb), label


@dataclass(frozen=True)
class Digits:
    """scikit-learn's 8x8 handwritten digits (1,797 real images, 10 classes), upsampled and made RGB.

    Split deterministically: a fixed permutation, 80% train and 20% validation/test. `length` keeps the first N
    images of the split (0: all): the same N digits every time, for studies of how much data a recipe needs.
    """

    size: int = 32
    split: str = "train"
    seed: int = 0
    length: int = 0

    def __post_init__(self) -> None:
        check_options(self)
        try:
            from sklearn.datasets import load_digits
        except ImportError:
            raise VitxError("embedded:digits needs scikit-learn: pip install scikit-learn") from None
        data = load_digits()
        order = np.random.default_rng(0).permutation(len(data.target))
        cut = int(0.8 * len(order))
        keep = order[:cut] if self.split == "train" else order[cut:]
        if self.length < 0 or self.length > len(keep):
            raise VitxError(f"embedded:digits has {len(keep)} {self.split} images; length must be 0 to {len(keep)}, "
                            f"got {self.length}")
        keep = keep[:self.length or len(keep)]
        object.__setattr__(self, "_images", (data.images[keep] / 16.0).astype(np.float32))  # (N, 8, 8)
        object.__setattr__(self, "_labels", data.target[keep].astype(np.int64))

    num_classes = 10
    class_names = [str(i) for i in range(10)]

    def __len__(self) -> int:
        return len(self._labels)

    def labels(self) -> np.ndarray:
        return self._labels

    def load(self, index: int) -> tuple[Image.Image, int]:
        small = Image.fromarray((self._images[index] * 255).astype(np.uint8), "L")
        return small.resize((self.size, self.size), Image.BILINEAR).convert("RGB"), int(self._labels[index])


EMBEDDED = {"leaves": DeadLeaves, "shapes": Shapes, "digits": Digits}

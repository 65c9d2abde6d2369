"""dSprites regenerated: every combination of its generative factors, drawn on the fly (Matthey et al. 2017).

3 shapes (square, ellipse, heart) × 6 scales in [0.5, 1] × 40 orientations in [0, 2π] × 32 × 32 positions in
[0, 1]² = 737,280 binary 64×64 images, indexed shape-major like the original archive. The factor grid and the
labels are exactly the dataset's; the pixels are vitx's own rasterisation of the same shapes (not the archive's
PNGs). Splits follow VTAB (task_adaptation): a fixed shuffle (TFDS stores records shuffled), then 80% train,
10% val, 10% test.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from PIL import Image

from ..errors import VitxError

FACTORS = {"shape": 3, "scale": 6, "orientation": 40, "x_position": 32, "y_position": 32}
TOTAL = 3 * 6 * 40 * 32 * 32  # 737,280
SPLITS = {"train": (0, TOTAL * 80 // 100), "val": (TOTAL * 80 // 100, TOTAL * 90 // 100),
          "test": (TOTAL * 90 // 100, TOTAL)}
SIZE = 64
_ORDER_SEED = 20170301  # fixed: every vitx install sees the same splits


def factors_of(index: int) -> dict[str, int]:
    """Factor values (as indices) of archive record `index`."""
    return {k: int(v) for k, v in zip(FACTORS, np.unravel_index(index, tuple(FACTORS.values())))}


@lru_cache(maxsize=None)
def record_order() -> np.ndarray:
    """The fixed shuffle of the 737,280 records that the splits cut (made once, on first use)."""
    return np.random.default_rng(_ORDER_SEED).permutation(TOTAL)


def bin_factor(value: Any, factor: str, classes: int = 16) -> Any:
    """VTAB's binning: floor(value / (values / classes)), e.g. x 0..31 → 0..15, orientation 0..39 → 0..15.
    Works on an int or an array of values."""
    binned = np.floor(np.asarray(value) / (FACTORS[factor] / classes)).astype(np.int64)
    return int(binned) if binned.ndim == 0 else binned

_C = (np.arange(SIZE, dtype=np.float32) + 0.5)  # pixel centres


def render(shape: int, scale: int, orientation: int, x_position: int, y_position: int) -> np.ndarray:
    """A (64, 64) uint8 image in {0, 255}: the shape at its scale, rotated, centred at its position."""
    s = 0.5 + 0.5 * scale / (FACTORS["scale"] - 1)  # 0.5 .. 1
    theta = 2 * math.pi * orientation / (FACTORS["orientation"] - 1)  # 0 .. 2π inclusive, as in dSprites
    cx = 8.0 + 48.0 * x_position / (FACTORS["x_position"] - 1)  # the shape stays inside the frame
    cy = 8.0 + 48.0 * y_position / (FACTORS["y_position"] - 1)
    half = 9.0 * s  # pixels: the largest square is 18×18
    dx = (_C[None, :] - cx) / half  # (1, 64) along x
    dy = (_C[:, None] - cy) / half  # (64, 1) along y (down)
    c, n = math.cos(theta), math.sin(theta)
    u = c * dx + n * dy  # (64, 64) coordinates in the shape's frame
    v = -n * dx + c * dy
    if shape == 0:  # square
        inside = np.maximum(np.abs(u), np.abs(v)) <= 1.0
    elif shape == 1:  # ellipse, 2:1
        inside = u ** 2 + (2.0 * v) ** 2 <= 1.0
    else:  # heart: (x² + y² − 1)³ − x² y³ ≤ 0, point up in its own frame
        x, y = 1.15 * u, -1.15 * v + 0.15
        inside = (x ** 2 + y ** 2 - 1.0) ** 3 - x ** 2 * y ** 3 <= 0.0
    return inside.astype(np.uint8) * 255


@dataclass(frozen=True)
class DSprites:
    """One VTAB split of dSprites, labelled by `factor` binned into `classes` (VTAB: 16 for both tasks)."""

    split: str = "train"
    factor: str = "x_position"
    classes: int = 16

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise VitxError(f"dsprites has splits {', '.join(SPLITS)}, not '{self.split}'")
        if self.factor not in FACTORS:
            raise VitxError(f"dsprites factors are {', '.join(FACTORS)}, not '{self.factor}'")

    @property
    def num_classes(self) -> int:
        return self.classes

    @property
    def class_names(self) -> list[str]:
        return [str(i) for i in range(self.classes)]

    def __len__(self) -> int:
        lo, hi = SPLITS[self.split]
        return hi - lo

    def record(self, index: int) -> int:
        lo, hi = SPLITS[self.split]
        if not 0 <= index < hi - lo:
            raise IndexError(index)
        return int(record_order()[lo + index])

    def labels(self) -> np.ndarray:
        lo, hi = SPLITS[self.split]
        value = np.unravel_index(record_order()[lo:hi], tuple(FACTORS.values()))[list(FACTORS).index(self.factor)]
        return bin_factor(value, self.factor, self.classes)

    def load(self, index: int) -> tuple[Image.Image, int]:
        factors = factors_of(self.record(index))
        gray = render(**factors)
        label = bin_factor(factors[self.factor], self.factor, self.classes)
        return Image.fromarray(np.repeat(gray[:, :, None], 3, axis=2), "RGB"), label


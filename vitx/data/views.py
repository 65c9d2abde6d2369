"""Several crops of each image, as an objective declares them (DINO's 2 global + N local crops, a two-view
contrastive pair): each its own size, crop scale and photometric augmentation. The loader's workers make the
geometry on uint8 (crop box, resize, flip) and draw the photometry's parameters; the photometry itself
(`photometry.py`) runs batched on the GPU of a GPU run, else where the crops are made, in cache-sized chunks.

Every view of every sample draws from its own generator, seeded by (run seed, stream position, view): the
same crops whichever process or worker loads the sample, so a resumed run and a run on k processes see
exactly the crops one uninterrupted process would. An evaluation draws by (run seed, sample index, view),
the same crops at every evaluation. An objective that declares no views gets the one crop of `transforms.py`
(`batch["image"]`), on the path it always had.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np
import torch

from ..errors import VitxError
from .transforms import random_box, resize_square

VIEWS_TAG, EVAL_TAG = 31, 37  # keep view draws apart from the single crop's [seed, position]


@dataclass(frozen=True)
class View:
    """`count` crops of one kind. Probabilities are per crop; `jitter` is torchvision ColorJitter's (brightness,
    contrast, saturation, hue), applied with probability `jitter_p` in a random order; `sigma` is the Gaussian
    blur's range in pixels of the output (DINO's 0.1–2 at 224px)."""

    count: int = 1
    size: int = 0  # output side in pixels; 0: the run's image size
    scale: tuple[float, float] = (0.08, 1.0)  # the crop's area, as a fraction of the image's
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip: float = 0.5
    jitter: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    jitter_p: float = 0.8
    gray: float = 0.0
    blur: float = 0.0
    sigma: tuple[float, float] = (0.1, 2.0)
    solarize: float = 0.0

    def check(self, what: str = "view") -> "View":
        """One line for a view that cannot be made."""
        probabilities = {k: getattr(self, k) for k in ("flip", "jitter_p", "gray", "blur", "solarize")}
        bad = [k for k, v in probabilities.items() if not 0 <= v <= 1]
        if bad:
            raise VitxError(f"{what}: {bad[0]} is a probability in [0, 1], got {probabilities[bad[0]]}")
        if self.count < 1 or self.size < 0:
            raise VitxError(f"{what}: count must be at least 1 and size at least 0, got {self.count} and {self.size}")
        if not 0 < self.scale[0] <= self.scale[1] <= 1:
            raise VitxError(f"{what}: scale must be (low, high) with 0 < low <= high <= 1, got {self.scale}")
        if not 0 < self.ratio[0] <= self.ratio[1] or not 0 < self.sigma[0] <= self.sigma[1]:
            raise VitxError(f"{what}: ratio and sigma must be (low, high) with 0 < low <= high")
        if min(self.jitter[:3]) < 0 or not 0 <= self.jitter[3] <= 0.5:
            raise VitxError(f"{what}: jitter is (brightness, contrast, saturation ≥ 0, hue in [0, 0.5]), "
                            f"got {self.jitter}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def expand(views: Sequence[View], image_size: int) -> list[View]:
    """One entry per crop, each with its size resolved: the order of `batch["views"]`."""
    return [View(**{**asdict(v), "count": 1, "size": v.size or image_size}) for v in views for _ in range(v.count)]


def view_rng(seed: int, position: int | None, index: int, view: int) -> np.random.Generator:
    """The generator of one crop: (seed, stream position, view) in training, (seed, sample index, view) in
    evaluation (position None)."""
    key = [seed, VIEWS_TAG, position, view] if position is not None else [seed, EVAL_TAG, index, view]
    return np.random.default_rng(key)


def make_crop(image: torch.Tensor, view: View, interpolation: str, rng: np.random.Generator) -> torch.Tensor:
    """The geometry of one crop of a (3, H, W) uint8 image → (3, S, S) uint8, S = view.size (resolved by
    `expand`): an Inception-style box, resized, maybe mirrored. Draws first from `rng`; the photometry's draws
    (`photometry.draw`) follow on the same generator."""
    top, left, h, w = random_box(image.shape[-2:], view.scale, view.ratio, rng)
    out = resize_square(image[:, top:top + h, left:left + w], view.size, interpolation)
    if rng.random() < view.flip:
        out = out.flip(-1)
    return out.contiguous()


__all__ = ["View", "expand", "make_crop", "view_rng"]

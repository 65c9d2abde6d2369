"""The photometric half of a view (colour jitter, grayscale, Gaussian blur, solarisation), apart from its
geometry, so that it can run on a whole micro-batch where that is fastest.

The loader's workers do the geometry per sample (crop box, resize, flip: irregular, best on the CPU) and draw
every random parameter from the crop's own seeded generator (`draw`), in the order the per-sample transforms
draw them. `apply` then makes the pixels: on a GPU run, on the device, each op over every sample that takes it
at once (with its own factor); on a CPU, in the worker, sample by sample with the same kernels.

The pixels are torchvision's `transforms.v2` kernels' applied sample by sample: brightness, contrast,
saturation, hue (torchvision's own HSV round trip, which takes a batch), grayscale and solarisation the same
float operations, so the same bytes; the Gaussian blur is done separably (2·K taps instead of K², the bulk of a
view's cost on a CPU), within one level of 8 bits (tests/test_views.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from .views import View

BRIGHTNESS, CONTRAST, SATURATION, HUE = range(4)
GRAY_WEIGHTS = (0.2989, 0.587, 0.114)  # torchvision's (ITU-R 601-2 luma)


@dataclass
class Params:
    """One view's photometric parameters for a batch, one row per sample. `order[b]` is the permutation in
    which sample b's jitter applies brightness, contrast, saturation and hue; `factors[b, k]` the factor of op
    k (1 for brightness, contrast and saturation, 0 for hue: no change); `sigma[b]` 0 for no blur."""

    jitter: torch.Tensor  # (B,) bool
    order: torch.Tensor  # (B, 4) int64
    factors: torch.Tensor  # (B, 4) float64
    gray: torch.Tensor  # (B,) bool
    sigma: torch.Tensor  # (B,) float64
    solarize: torch.Tensor  # (B,) bool

    @staticmethod
    def stack(rows: Sequence["Params"]) -> "Params":
        return Params(*(torch.cat([getattr(r, k) for r in rows]) for k in Params.__dataclass_fields__))

    def to(self, device: torch.device | str) -> "Params":
        return Params(*(getattr(self, k).to(device, non_blocking=True) for k in Params.__dataclass_fields__))

    def rows(self, which: slice) -> "Params":
        return Params(*(getattr(self, k)[which] for k in Params.__dataclass_fields__))



def draw(view: "View", rng: np.random.Generator) -> Params:
    """One sample's parameters, drawn from its crop's generator after the geometry, in the order (and with the
    same calls) as the per-sample ColorJitter, RandomGrayscale, GaussianBlur and RandomSolarize draw them."""
    jitter, order, factors = False, list(range(4)), [1.0, 1.0, 1.0, 0.0]
    if any(view.jitter) and rng.random() < view.jitter_p:
        jitter, order = True, [int(k) for k in rng.permutation(4)]
        for k in order:  # the four in a random order, each factor drawn in that order
            strength = view.jitter[k]
            if strength > 0:
                factors[k] = rng.uniform(-strength, strength) if k == HUE else \
                    rng.uniform(max(0.0, 1 - strength), 1 + strength)
    gray = bool(view.gray > 0 and rng.random() < view.gray)
    sigma = float(rng.uniform(*view.sigma)) if view.blur > 0 and rng.random() < view.blur else 0.0
    solarize = bool(view.solarize > 0 and rng.random() < view.solarize)
    return Params(torch.tensor([jitter]), torch.tensor([order]), torch.tensor([factors], dtype=torch.float64),
                  torch.tensor([gray]), torch.tensor([sigma], dtype=torch.float64), torch.tensor([solarize]))


def blur_kernel_size(sigma: float, size: int) -> int:
    """Odd taps covering ±3σ, within the image (reflect padding needs fewer than `size` on each side)."""
    return min(2 * math.ceil(3 * sigma) + 1, size - (1 - size % 2))


def apply(images: torch.Tensor, p: Params, batched: bool | None = None) -> torch.Tensor:
    """(B, 3, S, S) uint8 → (B, 3, S, S) uint8: jitter (in each sample's order), grayscale, blur, solarise.

    On an accelerator the whole batch goes through each op at once (the samples that take it, with their own
    factors). On a CPU sample by sample, with the same kernels: there a batch's float temporaries leave the
    cache and gathering the samples of an op costs more than it saves, so the gain is the kernels' own (a
    separable blur: 2·K taps, not K²). `batched`: force one way (None: by the device)."""
    if not (images.device.type != "cpu" if batched is None else batched):
        return torch.cat([_apply_each(images[j:j + 1], p.rows(slice(j, j + 1))) for j in range(len(images))]) \
            if len(images) else images
    out = images.clone()
    for position in range(4):  # every sample takes its op for this position; a sample runs each op once
        for k in range(4):
            rows = torch.nonzero(p.jitter & (p.order[:, position] == k)).flatten()
            if len(rows):
                out[rows] = JITTER[k](out[rows], p.factors[rows, k])
    rows = torch.nonzero(p.gray).flatten()
    if len(rows):
        out[rows] = _to_gray(out[rows])
    rows = torch.nonzero(p.sigma > 0).flatten()
    if len(rows):
        out[rows] = _blur(out[rows], p.sigma[rows])
    return torch.where(p.solarize.view(-1, 1, 1, 1) & (out >= 128), 255 - out, out)


def _apply_each(x: torch.Tensor, p: Params) -> torch.Tensor:
    """One sample (1, 3, S, S) through its ops, in its order; an op that does nothing is not run."""
    if bool(p.jitter):
        for k in p.order[0].tolist():
            if float(p.factors[0, k]) != (0.0 if k == HUE else 1.0):
                x = JITTER[k](x, p.factors[:, k])
    if bool(p.gray):
        x = _to_gray(x)
    if float(p.sigma) > 0:
        x = _blur(x, p.sigma)
    if bool(p.solarize):
        x = torch.where(x >= 128, 255 - x, x)
    return x


def _grayscale(x: torch.Tensor) -> torch.Tensor:
    """(B, 3, S, S) → (B, 1, S, S) float32 luma, as torchvision computes it (truncated when cast to uint8)."""
    r, g, b = x.unbind(dim=1)
    return r.mul(GRAY_WEIGHTS[0]).add_(g, alpha=GRAY_WEIGHTS[1]).add_(b, alpha=GRAY_WEIGHTS[2]).unsqueeze(1)


def _to_gray(x: torch.Tensor) -> torch.Tensor:
    """RandomGrayscale's output: the luma truncated to uint8, in all three channels (B, 3, S, S)."""
    return _grayscale(x).to(torch.uint8).expand(-1, 3, -1, -1)


def _blend(x: torch.Tensor, other: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    """torchvision's `_blend` with a per-sample ratio (B,) float64: x·r + other·(1 − r), clamped, truncated to
    uint8, rounded as it rounds (1 − r in double, then float32; the product fused into the sum)."""
    r = ratio.to(torch.float32).view(-1, 1, 1, 1)
    rest = (1.0 - ratio).to(torch.float32).view(-1, 1, 1, 1)
    return torch.addcmul(x.mul(r), other, rest).clamp_(0, 255).to(torch.uint8)


def _brightness(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return x.mul(factor.to(torch.float32).view(-1, 1, 1, 1)).clamp_(0, 255).to(torch.uint8)


def _contrast(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    mean = _grayscale(x).floor_().mean(dim=(-3, -2, -1), keepdim=True)  # (B, 1, 1, 1)
    return _blend(x, mean, factor)


def _saturation(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return _blend(x, _grayscale(x).floor_(), factor)


def _hue(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """torchvision's own HSV round trip (its kernels take a batch), each sample's hue turned by its factor: the
    same float operations as the per-sample transform, so the same pixels."""
    from torchvision.transforms.v2.functional import to_dtype
    from torchvision.transforms.v2.functional._color import _hsv_to_rgb, _rgb_to_hsv

    h, s, v = _rgb_to_hsv(to_dtype(x, torch.float32, scale=True)).unbind(dim=1)  # (B, S, S) each
    h = h.add_(factor.to(torch.float32).view(-1, 1, 1)).remainder_(1.0)
    return to_dtype(_hsv_to_rgb(torch.stack((h, s, v), dim=1)), torch.uint8, scale=True)


JITTER = (_brightness, _contrast, _saturation, _hue)


def _blur(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """Gaussian blur with a kernel per sample, as torchvision's (taps over ±3σ, reflect padding, rounded), done
    separably: each sample's 1D kernel is made at its own size, then zero-padded to the batch's largest."""
    b, c, size = x.shape[0], x.shape[1], x.shape[-1]
    sizes = [blur_kernel_size(float(s), size) for s in sigma.tolist()]
    width = max(sizes)
    kernels = torch.zeros((b, width), dtype=torch.float32, device=x.device)  # (B, K)
    for j, (k, s) in enumerate(zip(sizes, sigma.tolist())):
        if k >= 3:
            lim = (k - 1) / (2.0 * math.sqrt(2.0))  # torchvision's kernel: softmax(−(x/σ)²) on this grid
            grid = torch.linspace(-lim, lim, steps=k, dtype=torch.float32, device=x.device)
            kernels[j, (width - k) // 2:(width + k) // 2] = torch.softmax(grid.div(s).pow(2).neg(), dim=0)
        else:  # too small to blur (as the per-sample path skips it): the identity
            kernels[j, width // 2] = 1.0
    if width < 3:
        return x
    weight = kernels.repeat_interleave(c, dim=0)  # (B·3, K): one depthwise filter per channel
    pad = width // 2
    y = F.pad(x.float().reshape(1, b * c, size, size), [pad, pad, pad, pad], mode="reflect")
    y = F.conv2d(y, weight.view(b * c, 1, 1, width), groups=b * c)  # along the width
    y = F.conv2d(y, weight.view(b * c, 1, width, 1), groups=b * c)  # along the height
    return y.round_().clamp_(0, 255).to(torch.uint8).view(b, c, size, size)


__all__ = ["Params", "apply", "blur_kernel_size", "draw"]

"""The photometric half of a view (colour jitter, grayscale, Gaussian blur, solarisation), apart from its
geometry, so that it can run on a whole micro-batch where that is fastest.

The loader's workers do the geometry per sample (crop box, resize, flip: irregular, best on the CPU) and draw
every random parameter from the crop's own seeded generator (`draw`), in the order the per-sample transforms
draw them. `apply` then makes the pixels: on a GPU run, on the device, each op over the whole batch at once
(each sample with its own factor, the op's identity where it takes none); on a CPU, where the crops are made
(a loader worker, or the training process itself), the same over chunks of the batch that stay in the cache,
or sample by sample for large crops.

The pixels are torchvision's `transforms.v2` kernels' applied sample by sample: brightness, contrast,
saturation, hue (torchvision's own HSV round trip, which takes a batch), grayscale and solarisation the same
float operations, so the same bytes; the Gaussian blur is done separably (2·K taps instead of K², the bulk of a
view's cost on a CPU), within one level of 8 bits (tests/test_views.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np
import torch
import torch.nn.functional as F

BRIGHTNESS, CONTRAST, SATURATION, HUE = range(4)
GRAY_WEIGHTS = (0.2989, 0.587, 0.114)  # torchvision's (ITU-R 601-2 luma)


class Photometric(Protocol):
    """What the photometry reads of a view (views.py's View has it): each colour operation's strength or
    probability. Declared here, so that this module, below views.py, needs nothing of it."""

    @property
    def jitter(self) -> tuple[float, float, float, float]: ...  # ColorJitter's brightness, contrast, saturation, hue

    @property
    def jitter_p(self) -> float: ...

    @property
    def gray(self) -> float: ...

    @property
    def blur(self) -> float: ...

    @property
    def sigma(self) -> tuple[float, float]: ...

    @property
    def solarize(self) -> float: ...


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

    @staticmethod
    def of(rows: Sequence[tuple]) -> "Params":
        """A batch's parameters from `draw_row`'s plain rows: six tensors made once, not six per sample (a
        worker makes ten crops an image for DINO)."""
        jitter, order, factors, gray, sigma, solarize = zip(*rows) if rows else ((),) * 6
        return Params(torch.tensor(jitter, dtype=torch.bool), torch.tensor(order, dtype=torch.int64).view(-1, 4),
                      torch.tensor(factors, dtype=torch.float64).view(-1, 4), torch.tensor(gray, dtype=torch.bool),
                      torch.tensor(sigma, dtype=torch.float64), torch.tensor(solarize, dtype=torch.bool))


def draw(view: Photometric, rng: np.random.Generator) -> Params:
    """One sample's parameters (`draw_row`) as a one-row Params."""
    return Params.of([draw_row(view, rng)])


def draw_row(view: Photometric, rng: np.random.Generator) -> tuple:
    """One sample's parameters, drawn from its crop's generator after the geometry, in the order (and with the
    same calls) as the per-sample ColorJitter, RandomGrayscale, GaussianBlur and RandomSolarize draw them:
    (jitter, order, factors, gray, sigma, solarize) as plain values, batched by `Params.of`."""
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
    return jitter, order, factors, gray, sigma, solarize


def blur_kernel_size(sigma: float, size: int) -> int:
    """Odd taps covering ±3σ, within the image (reflect padding needs fewer than `size` on each side)."""
    return min(2 * math.ceil(3 * sigma) + 1, size - (1 - size % 2))


# On a CPU the batched ops run over chunks of about this many values (1 MiB of float32: the float temporaries
# stay in the cache), each chunk as one batch; a crop larger than half a chunk goes sample by sample. Measured on
# 2 cores, one thread, DINO's 2 global + 8 local views of a batch (ms for all ten): 32/16 px crops × 128: 1,145
# sample by sample → 151 chunked; 96/48 px × 64: 772 → 508; 160/64 px × 32: 579 → 527; 224/96 px × 32: 895
# (the 224 px crops sample by sample) against 1,615 as one batch.
CPU_CHUNK = 2 ** 18


def apply(images: torch.Tensor, p: Params, batched: bool | None = None) -> torch.Tensor:
    """(B, 3, S, S) uint8 → (B, 3, S, S) uint8: jitter (in each sample's order), grayscale, blur, solarise.

    `p` on the host (as the loader hands it): what the batch needs (which ops any sample takes, the blur's
    taps) is read there, so a device run never waits for the device. Batched, the whole batch goes through each
    op at once, every sample with its own factor: a sample that does not take an op at that point gets the op's
    identity (factor 1, a one-tap blur), which leaves its bytes exactly as they were, so the batch runs a fixed
    number of kernels with no gathering, no waiting, and the same bytes as sample by sample. On an accelerator
    the whole batch at once; on a CPU in chunks of `CPU_CHUNK` values (a larger batch's float temporaries leave
    the cache), or sample by sample where one crop fills more than half a chunk, with the same kernels (a separable blur:
    2·K taps, not K²). `batched`: force one way (True: one batch, False: sample by sample; None: by the device
    and the crops' size). Every way gives the same bytes."""
    if not len(images):
        return images
    if batched or (batched is None and images.device.type != "cpu"):
        return _apply_batch(images, p)
    rows = CPU_CHUNK // max(1, images[:1].numel()) if batched is None else 1  # samples a chunk holds
    if rows <= 1:  # sample by sample
        return torch.cat([_apply_each(images[j:j + 1], p.rows(slice(j, j + 1))) for j in range(len(images))])
    if rows >= len(images):
        return _apply_batch(images, p)
    return torch.cat([_apply_batch(images[j:j + rows], p.rows(slice(j, j + rows)))
                      for j in range(0, len(images), rows)])


def _apply_batch(images: torch.Tensor, p: Params) -> torch.Tensor:
    """All of `images` through each op at once (`apply`), each sample with its own parameters."""
    host, device = p.to("cpu"), images.device
    dev = host.to(device)
    out = _jitter(images, host, dev) if bool(host.jitter.any()) else images
    if bool(host.gray.any()):
        out = torch.where(dev.gray.view(-1, 1, 1, 1), _to_gray(out), out)
    if bool((host.sigma > 0).any()):
        out = _blur(out, _to(_kernels(host.sigma, out.shape[-1]), device))
    if bool(host.solarize.any()):
        out = torch.where(dev.solarize.view(-1, 1, 1, 1) & (out >= 128), 255 - out, out)
    return out


def _jitter(x: torch.Tensor, host: Params, dev: Params) -> torch.Tensor:
    """Colour jitter of a whole batch, each sample in its own order. A sample's hue is one HSV round trip at
    its own position: the brightness, contrast and saturation it takes before that (positions 0-2) are done
    first, then every sample's hue at once, then what each takes after it (positions 1-3). At each position one
    blend does the three linear ops (brightness blends with black, contrast with the mean grey, saturation with
    the grey image), the factor 1 for a sample that takes none there."""
    hue_at = (host.order == HUE).to(torch.int64).argmax(dim=1)  # (B,) the position of each sample's hue
    for before in (True, False):
        for position in (range(3) if before else range(1, 4)):
            op = host.order[:, position]
            takes = host.jitter & (op != HUE) & ((position < hue_at) if before else (position > hue_at))
            if bool(takes.any()):
                on = _to(op, x.device)  # (B,) each sample's op at this position, on the device
                x = _linear(x, on, dev.factors.gather(1, on[:, None])[:, 0], _to(takes, x.device),
                            bool((takes & (op != BRIGHTNESS)).any()))
        hue = host.jitter & (host.factors[:, HUE] != 0)
        if before and bool(hue.any()):
            x = torch.where(_to(hue, x.device).view(-1, 1, 1, 1), _hue(x, dev.factors[:, HUE]), x)
    return x


def _linear(x: torch.Tensor, op: torch.Tensor, factor: torch.Tensor, takes: torch.Tensor,
            grey: bool) -> torch.Tensor:
    """Brightness, contrast or saturation per sample (`op`, (B,)), as torchvision blends them; factor 1 (an
    exact no-op) where `takes` is false. `grey`: some sample needs the grey image (contrast, saturation)."""
    other = torch.zeros((), device=x.device)
    if grey:
        gray = _grayscale(x).floor_()  # (B, 1, S, S)
        mean = gray.mean(dim=(-3, -2, -1), keepdim=True)  # (B, 1, 1, 1)
        other = torch.where((op == CONTRAST).view(-1, 1, 1, 1), mean, gray)
        other = torch.where((op == BRIGHTNESS).view(-1, 1, 1, 1), 0.0, other)
    return _blend(x, other, torch.where(takes, factor, 1.0))


def _to(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A small host tensor onto `device` without waiting (pinned first for a GPU)."""
    if device.type == "cuda":
        t = t.pin_memory()
    return t.to(device, non_blocking=True)


def _apply_each(x: torch.Tensor, p: Params) -> torch.Tensor:
    """One sample (1, 3, S, S) through its ops, in its order; an op that does nothing is not run."""
    if bool(p.jitter):
        for k in p.order[0].tolist():
            if float(p.factors[0, k]) != (0.0 if k == HUE else 1.0):
                x = JITTER[k](x, p.factors[:, k])
    if bool(p.gray):
        x = _to_gray(x)
    if float(p.sigma) > 0:
        x = _blur(x, _kernels(p.sigma, x.shape[-1]).to(x.device))
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


def _kernels(sigma: torch.Tensor, size: int) -> torch.Tensor:
    """(B,) σ on the host → (B, K) float32: each sample's 1D Gaussian as torchvision makes it (taps over ±3σ,
    softmax(−(x/σ)²) on a grid of step 1/√2), centred and zero-padded to the batch's widest; the identity (one
    tap) where σ is 0 or its kernel would have fewer than 3 taps, as the per-sample path skips those."""
    sigma = sigma.to(torch.float64)
    taps = torch.tensor([blur_kernel_size(s, size) if s > 0 else 1 for s in sigma.tolist()], dtype=torch.int64)
    taps = torch.where(taps >= 3, taps, 1)  # (B,)
    # made at the widest a kernel can be at this size, then cut to the batch's widest: a sample's taps are the
    # same numbers whatever else is in its batch (the softmax's sum would otherwise vary with the row's length)
    full = blur_kernel_size(size, size)  # (σ = size: all the taps there are)
    offset = torch.arange(full, dtype=torch.int64) - full // 2  # (F,)
    grid = offset.to(torch.float32) / math.sqrt(2.0)  # torchvision's linspace(−lim, lim, k): step 1/√2
    logits = (grid[None, :] / sigma.clamp(min=1e-12).to(torch.float32)[:, None]).pow(2).neg()  # (B, F)
    logits = logits.masked_fill(offset.abs()[None, :] > (taps[:, None] - 1) // 2, float("-inf"))
    half = (int(taps.max()) if len(taps) else 1) // 2
    return torch.softmax(logits, dim=1)[:, full // 2 - half:full // 2 + half + 1]  # (B, K)


def _blur(x: torch.Tensor, kernels: torch.Tensor) -> torch.Tensor:
    """Gaussian blur of (B, 3, S, S) uint8 with one (K,) kernel per sample (`_kernels`), separably: along the
    width, then the height, reflect padding, rounded as torchvision rounds. A one-tap kernel leaves the sample's
    bytes as they were."""
    b, c, size = x.shape[0], x.shape[1], x.shape[-1]
    width = kernels.shape[1]
    if width < 3:
        return x
    weight = kernels.repeat_interleave(c, dim=0)  # (B·3, K): one depthwise filter per channel
    pad = width // 2
    y = F.pad(x.float().reshape(1, b * c, size, size), [pad, pad, pad, pad], mode="reflect")
    y = F.conv2d(y, weight.view(b * c, 1, 1, width), groups=b * c)  # along the width
    y = F.conv2d(y, weight.view(b * c, 1, width, 1), groups=b * c)  # along the height
    return y.round_().clamp_(0, 255).to(torch.uint8).view(b, c, size, size)


__all__ = ["Params", "Photometric", "apply", "blur_kernel_size", "draw", "draw_row"]

"""The four figures of the paper's Fig. 7 and Fig. 6, drawn with matplotlib (no display needed)."""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402


def _save(fig: "plt.Figure", path: Path) -> Path:
    from ..plots.canvas import save

    try:
        return save(fig, path, dpi=120, bbox_inches="tight")
    finally:
        plt.close(fig)


def filter_figure(components: torch.Tensor, explained: torch.Tensor, path: Path) -> Path:
    """Principal components of the patch-embedding filters as RGB tiles, each scaled to [0, 1] (Fig. 7 left)."""
    k = len(components)
    cols = min(7, k)
    rows = math.ceil(k / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 1.1, rows * 1.25), squeeze=False)
    for i, ax in enumerate(axes.flat):
        ax.axis("off")
        if i < k:
            tile = components[i].permute(1, 2, 0).numpy()  # (P, P, 3)
            tile = (tile - tile.min()) / max(float(tile.max() - tile.min()), 1e-12)
            ax.imshow(tile, interpolation="nearest")
            ax.set_title(f"{100 * float(explained[i]):.1f}%", fontsize=6)
    fig.suptitle("RGB embedding filters (first principal components)", fontsize=9)
    return _save(fig, path)


def position_figure(sim: torch.Tensor, grid: tuple[int, int], path: Path) -> Path:
    """For every patch (row, col), its cosine similarity with every other patch's position embedding
    (Fig. 7 centre: a grid of grids)."""
    gh, gw = grid
    maps = sim.reshape(gh, gw, gh, gw).numpy()
    fig, axes = plt.subplots(gh, gw, figsize=(min(9, 0.6 * gw + 1), min(9, 0.6 * gh + 1)), squeeze=False)
    image = None
    for r in range(gh):
        for c in range(gw):
            ax = axes[r, c]
            image = ax.imshow(maps[r, c], vmin=-1, vmax=1, cmap="viridis", interpolation="nearest")
            ax.set(xticks=[], yticks=[])
            if c == 0:
                ax.set_ylabel(str(r + 1), fontsize=6)
            if r == gh - 1:
                ax.set_xlabel(str(c + 1), fontsize=6)
    fig.supxlabel("input patch column", fontsize=8)
    fig.supylabel("input patch row", fontsize=8)
    fig.suptitle("Position embedding similarity", fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.6, label="cosine similarity")
    return _save(fig, path)


def distance_figure(distances: list[list[float]], image_size: int, path: Path) -> Path:
    """Mean attention distance of every head against depth (Fig. 7 right)."""
    fig, ax = plt.subplots(figsize=(4.2, 3.4))
    heads = max(len(d) for d in distances)
    colours = plt.cm.tab20(np.linspace(0, 1, max(heads, 2)))
    for h in range(heads):
        xs = [layer + 1 for layer, d in enumerate(distances) if h < len(d)]
        ys = [d[h] for d in distances if h < len(d)]
        ax.scatter(xs, ys, s=14, color=colours[h], label=f"head {h + 1}")
    ax.plot(range(1, len(distances) + 1), [float(np.mean(d)) for d in distances], color="black", lw=1,
            label="mean")
    ax.set(xlabel="network depth (layer)", ylabel="mean attention distance (pixels)", ylim=(0, image_size),
           xticks=range(1, len(distances) + 1))
    if heads <= 12:
        ax.legend(fontsize=6, loc="lower right", ncol=2)
    ax.set_title(f"Mean attention distance ({image_size}px input)", fontsize=9)
    return _save(fig, path)


def rollout_figure(images: list[np.ndarray], maps: list[np.ndarray], path: Path) -> Path:
    """Each image beside its attention-rollout map overlaid (Fig. 6). images: (H, W, 3) uint8; maps: (gh, gw)."""
    n = len(images)
    fig, axes = plt.subplots(2, n, figsize=(1.8 * n, 3.8), squeeze=False)
    for i, (img, m) in enumerate(zip(images, maps)):
        h, w = img.shape[:2]
        up = torch.nn.functional.interpolate(torch.as_tensor(m)[None, None].float(), size=(h, w), mode="bilinear",
                                             align_corners=False)[0, 0].numpy()
        up = (up - up.min()) / max(float(up.max() - up.min()), 1e-12)
        axes[0, i].imshow(img, interpolation="nearest")
        axes[1, i].imshow((img * up[..., None]).astype(np.uint8), interpolation="nearest")
        for ax in axes[:, i]:
            ax.axis("off")
    axes[0, 0].set_title("input", fontsize=8, loc="left")
    axes[1, 0].set_title("attention rollout", fontsize=8, loc="left")
    return _save(fig, path)


__all__ = ["distance_figure", "filter_figure", "position_figure", "rollout_figure"]

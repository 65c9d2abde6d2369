"""What the input layers learned (paper Fig. 7 left and centre): principal components of the patch-embedding
filters, and the cosine similarity between the position embeddings of every pair of patches."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import VitxError
from .attention import patch_distances


def patch_grid(backbone: nn.Module) -> tuple[int, int]:
    """The (rows, cols) of patches; a backbone without timm's `patch_embed.grid_size` cannot be inspected."""
    grid = getattr(getattr(backbone, "patch_embed", None), "grid_size", None)
    if grid is None or not hasattr(backbone, "pos_embed"):
        raise VitxError(f"{type(backbone).__name__} has no patch_embed.grid_size / pos_embed (timm's ViT layout); "
                        "cannot inspect it")
    return tuple(int(g) for g in grid)


def filter_components(backbone: nn.Module, k: int = 28) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The top-k principal components of the D patch-embedding filters, as (k, 3, P, P) images, and the share of
    variance each explains (k,). None when the embedding is not a convolution on RGB pixels (hybrid stem)."""
    proj = getattr(backbone.patch_embed, "proj", None)
    weight = getattr(proj, "weight", None)
    if weight is None or weight.dim() != 4 or weight.shape[1] != 3 or weight.shape[-1] == 1:
        return None
    weight = weight.detach().float().cpu()  # (D, C, P, P)
    d, c, p, _ = weight.shape
    x = weight.reshape(d, c * p * p)
    x = x - x.mean(dim=0, keepdim=True)  # the filters are the samples
    _, s, vt = torch.linalg.svd(x, full_matrices=False)  # vt: (min(D, CP²), CP²)
    k = min(k, vt.shape[0])
    explained = (s**2 / (s**2).sum().clamp_min(1e-12))[:k]
    return vt[:k].reshape(k, c, p, p), explained


def position_embeddings(backbone: nn.Module) -> torch.Tensor:
    """The patches' learned position embeddings, without the prefix ([class]) rows: (N, D)."""
    pos = backbone.pos_embed.detach().float().cpu()[0]  # (prefix + N, D) or (N, D)
    n = patch_grid(backbone)[0] * patch_grid(backbone)[1]
    return pos[-n:]


def position_similarity(pos: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of every patch's position embedding with every other: (N, D) -> (N, N)."""
    unit = F.normalize(pos.float(), dim=-1)
    return unit @ unit.T


def row_column_structure(sim: torch.Tensor, grid: tuple[int, int]) -> dict[str, float]:
    """How 2D the similarity is: the mean similarity of distinct patches that share a row or a column, minus that
    of patches that share neither. Near 0 for unstructured (random) embeddings."""
    rows = torch.arange(grid[0]).repeat_interleave(grid[1])
    cols = torch.arange(grid[1]).repeat(grid[0])
    shared = (rows[:, None] == rows[None, :]) | (cols[:, None] == cols[None, :])  # same row or same column
    other = ~torch.eye(len(rows), dtype=torch.bool)
    line, neither = shared & other, ~shared
    line_mean, neither_mean = float(sim[line].mean()), float(sim[neither].mean())
    dist = patch_distances(grid, 1)[other]  # in patches; the same row-major order as rows / cols
    corr = torch.corrcoef(torch.stack([sim[other].float(), dist]))[0, 1]  # < 0: nearer patches are more alike
    nearest = sim.masked_fill(~other, float("-inf")).argmax(dim=1)  # each patch's most similar other patch
    in_line = float(shared[torch.arange(len(rows)), nearest].float().mean())
    return {"same_row_or_column": line_mean, "neither": neither_mean, "row_column_gap": line_mean - neither_mean,
            "distance_correlation": float(corr), "nearest_in_row_or_column": in_line,
            "nearest_in_row_or_column_chance": (grid[0] + grid[1] - 2) / max(len(rows) - 1, 1)}


__all__ = ["filter_components", "patch_grid", "position_embeddings", "position_similarity", "row_column_structure"]

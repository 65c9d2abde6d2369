"""`vitx inspect`: every analysis of the paper's Section 4.5 for one backbone, as PNG figures and one JSON of
the numbers behind them."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
from rich.progress import Progress

from ..safe_io import atomic_write_text, read_json_object
from ..errors import VitxError, cannot_write
from ..data import DataOptions, EncodedImage, Preprocess, decode, open_data
from .attention import mean_attention_distance, recording, rollout, uniform_distance
from .embeddings import filter_components, patch_grid, position_embeddings, position_similarity, row_column_structure
from .figures import distance_figure, filter_figure, position_figure, rollout_figure

FIGURES = ("embedding_filters.png", "position_similarity.png", "attention_distance.png", "attention_rollout.png")


def _image_size(backbone: nn.Module) -> int:
    return int(backbone.patch_embed.img_size[0])


def _pixels_per_token(backbone: nn.Module) -> int:
    """Pixels per token side (a hybrid's tokens are 16px feature cells, whatever its patch_size says)."""
    return _image_size(backbone) // patch_grid(backbone)[0]


def _prefix(backbone: nn.Module) -> int:
    """Tokens before the patches: [class], [dist], registers."""
    return int(getattr(backbone, "num_prefix_tokens", 1))


def _as_batch(prep: Preprocess, pictures: list[np.ndarray]) -> torch.Tensor:
    """uint8 (H, W, 3) pictures -> normalised (B, 3, H, W)."""
    return prep.normalise(torch.from_numpy(np.stack(pictures)).permute(0, 3, 1, 2))


def _picture(prep: Preprocess, image: object) -> np.ndarray:
    """Any image a source gives → the eval crop as a (S, S, 3) uint8 picture."""
    return prep.eval(decode(image)).permute(1, 2, 0).numpy()


def sample_images(spec: str, size: int, count: int, seed: int = 0,
                  normal: dict[str, Any] | None = None) -> tuple[torch.Tensor, list[np.ndarray]]:
    """`count` evaluation images of a data spec at `size`: normalised (B, 3, S, S) and as uint8 pictures."""
    from ..data.streams import is_shards

    opened = open_data(spec, DataOptions(stream=is_shards(spec), image_size=size, seed=seed))
    source = opened.split("validation") or opened.split("test") or opened.split("train")
    if hasattr(source, "draw"):  # a stream: a seeded sample of it
        source, _ = source.draw(count, seed)
    elif len(source) > count:  # a seeded sample, not the first files (often all of one class)
        from ..data.draws import Subset

        source = Subset(source, np.sort(np.random.default_rng([seed, 4242]).choice(len(source), count, replace=False)))
    prep = Preprocess(image_size=size, **(normal or {}))
    pictures = [_picture(prep, source.load(i)[0]) for i in range(min(count, len(source)))]
    return _as_batch(prep, pictures), pictures


def load_images(paths: list[str], size: int, normal: dict[str, Any] | None = None) -> tuple[torch.Tensor, list[np.ndarray]]:
    """User images (--image), centre-cropped and resized to the backbone's resolution. Read as `vitx predict` and
    training read files (`EncodedImage`, `decode`): a file claiming more pixels than PIL's decompression-bomb
    limit, or one no decoder reads, is one line naming it, never a traceback."""
    prep = Preprocess(image_size=size, **(normal or {}))
    pictures = []
    for p in paths:
        if not Path(p).expanduser().is_file():
            raise VitxError(f"--image {p}: no such file")
        pictures.append(_picture(prep, EncodedImage.from_file(str(Path(p).expanduser()))))  # CorruptImageError names it
    return _as_batch(prep, pictures), pictures


@torch.no_grad()
def attention_statistics(backbone: nn.Module, images: torch.Tensor, batch: int = 32,
                         progress: Progress | None = None) -> list[list[float]]:
    """Mean attention distance in pixels, per layer and head, averaged over `images` (B, 3, S, S)."""
    grid, patch, prefix = patch_grid(backbone), _pixels_per_token(backbone), _prefix(backbone)
    device = next(backbone.parameters()).device
    sums: list[torch.Tensor] = []
    task = progress.add_task("attention distance", total=len(images)) if progress else None
    for start in range(0, len(images), batch):
        chunk = images[start:start + batch].to(device)

        def reduce(attn: torch.Tensor) -> torch.Tensor:  # (B, H, N, N) -> (H,), summed over the chunk's images
            return mean_attention_distance(attn, grid, patch, prefix).cpu() * len(chunk)

        with recording(backbone, reduce) as per_layer:
            backbone(chunk)
        sums = list(per_layer) if not sums else [s + p for s, p in zip(sums, per_layer)]
        if progress:
            progress.advance(task, len(chunk))
    return [[float(v) for v in s / len(images)] for s in sums]


@torch.no_grad()
def rollout_maps(backbone: nn.Module, images: torch.Tensor) -> list[np.ndarray]:
    """The [class] token's rollout over the patches, per image, as (rows, cols) maps."""
    prefix = _prefix(backbone)
    with recording(backbone) as maps:
        backbone(images.to(next(backbone.parameters()).device))
    rolled = rollout(maps).cpu()  # (B, N, N)
    return [r[0, prefix:].reshape(patch_grid(backbone)).numpy() for r in rolled]


def inspect_backbone(backbone: nn.Module, out_dir: str | Path, data: str = "embedded:shapes", samples: int = 128,
                     image_paths: list[str] | None = None, components: int = 28,
                     progress: Progress | None = None, normal: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the four figures and analysis.json for `backbone` into `out_dir`; returns the numbers. Runs on
    the device the backbone is on (the command puts it on its process's device). `normal`: the start's mean,
    std and interpolation (`runs.start.start_input`); default the paper's 0.5."""
    if samples < 1 or components < 1:
        raise VitxError(f"--samples and --components must be at least 1, got {samples} and {components}")
    backbone = backbone.eval().float()
    size, grid = _image_size(backbone), patch_grid(backbone)
    shown, pictures = load_images(image_paths, size, normal) if image_paths else sample_images(data, size, 6, 1, normal)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file where the folder (or one above it) should be, a read-only folder
        raise cannot_write(out, exc) from None
    result: dict[str, Any] = {"image_size": size, "grid": list(grid),
                              "pixels_per_patch": _pixels_per_token(backbone), "data": data, "samples": samples,
                              "input": dict(normal or {})}

    pcs = filter_components(backbone, components)
    if pcs is None:
        result["embedding_filters"] = {"skipped": "the patch embedding does not project RGB pixels (hybrid stem)"}
    else:
        filter_figure(*pcs, out / FIGURES[0])
        result["embedding_filters"] = {"explained_variance": [float(v) for v in pcs[1]],
                                       **({"components_asked": components} if len(pcs[1]) < components else {})}

    sim = position_similarity(position_embeddings(backbone))
    position_figure(sim, grid, out / FIGURES[1])
    result["position_similarity"] = {**row_column_structure(sim, grid), "matrix": sim.round(decimals=4).tolist()}

    images, _ = sample_images(data, size, samples, normal=normal)
    result["samples"] = len(images)  # (the data may hold fewer than asked: the count averaged over is recorded)
    if len(images) < samples:
        result["samples_asked"] = samples
    distances = attention_statistics(backbone, images, progress=progress)
    distance_figure(distances, size, out / FIGURES[2])
    result["attention_distance"] = {"pixels": distances, "layer_mean": [float(np.mean(d)) for d in distances],
                                    "uniform": uniform_distance(grid, _pixels_per_token(backbone)), "images": len(images)}

    if _prefix(backbone) == 0:  # rollout reads the [class] token's row
        result["attention_rollout"] = {"skipped": "the backbone has no [class] token (global pooling)"}
    else:
        maps = rollout_maps(backbone, shown)
        rollout_figure(pictures, maps, out / FIGURES[3])
        result["attention_rollout"] = {"images": image_paths or f"{len(pictures)} from {data}",
                                       "maps": [np.round(m, 5).tolist() for m in maps]}
    atomic_write_text(out / "analysis.json", json.dumps(result, indent=1))
    return result


def is_analysis(path: Path) -> bool:
    """Whether `path` holds an analysis.json `vitx inspect` wrote: what a later inspect replaces unasked."""
    record = read_json_object(Path(path))
    return record is not None and {"position_similarity", "attention_distance"} <= set(record)


__all__ = ["FIGURES", "attention_statistics", "inspect_backbone", "is_analysis", "load_images", "rollout_maps",
           "sample_images"]

"""Batched prediction with a finished run's classifier: image files in, the top-k classes with their
probabilities out, each image preprocessed exactly as the run's evaluation preprocessed it (decoded by
`vitx.data.decode`, `Preprocess.eval` on uint8, `Preprocess.normalise` on the device), so the same images give
the same predictions as the run's own test evaluation.
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import torch
import torch.nn as nn

from .data import EncodedImage, decode
from .data.opener import IMAGE_SUFFIXES
from .data.transforms import Preprocess
from .errors import CorruptImageError, VitxError
from .runs.trained import TrainedRun, load_classifier


@dataclass(frozen=True)
class Prediction:
    """One image's top-k classes, best first, and their probabilities (softmax; sigmoid for multi-label runs)."""

    image: str
    classes: list[int]
    probabilities: list[float]


def list_images(paths: Sequence[str | Path]) -> list[Path]:
    """Files as given (a named file is read whatever its suffix), folders walked recursively for image files,
    each folder's in sorted order."""
    found: list[Path] = []
    for given in paths:
        path = Path(given).expanduser()
        if path.is_dir():
            inside = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
            if not inside:
                raise VitxError(f"{given} holds no image files ({', '.join(IMAGE_SUFFIXES)})")
            found.extend(inside)
        elif path.is_file():
            found.append(path)
        else:
            raise VitxError(f"{given}: no such image file or folder")
    return found


def _batches(images: Sequence[Path], preprocess: Preprocess, size: int, skip_corrupt: bool,
             on_skip: Callable[[str], None]) -> Iterator[tuple[list[str], torch.Tensor]]:
    """Decoded, eval-transformed batches: (names, (b, 3, S, S) uint8). A corrupt file raises, or with
    `skip_corrupt` is reported through `on_skip` and left out."""
    names: list[str] = []
    pixels: list[torch.Tensor] = []
    for path in images:
        try:
            pixels.append(preprocess.eval(decode(EncodedImage.from_file(str(path)))))  # (3, S, S) uint8
        except CorruptImageError as exc:
            if not skip_corrupt:
                raise
            on_skip(exc.user_message())
            continue
        names.append(str(path))
        if len(names) == size:
            yield names, torch.stack(pixels)
            names, pixels = [], []
    if names:
        yield names, torch.stack(pixels)


@torch.no_grad()
def classify(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Logits of a supervised objective (backbone, then head) for normalised images: (B, 3, S, S) -> (B, K)."""
    return model.head(model.backbone(x)).float()


def predict(run: TrainedRun, images: Sequence[Path], top_k: int = 5, batch_size: int = 64,
            skip_corrupt: bool = False, device: torch.device | str = "cpu",
            on_skip: Callable[[str], None] = lambda line: None) -> list[Prediction]:
    """The top `top_k` (at most the class count) classes of every image, in the order given."""
    if top_k < 1:
        raise VitxError(f"--top-k must be at least 1, got {top_k}")
    if batch_size < 1:
        raise VitxError(f"--batch-size must be at least 1, got {batch_size}")
    model = load_classifier(run).to(device)
    multilabel = bool(getattr(model, "multilabel", False))
    preprocess = run.preprocess()
    k = min(top_k, int(run.num_classes or 0))
    out: list[Prediction] = []
    for names, batch in _batches(images, preprocess, batch_size, skip_corrupt, on_skip):
        logits = classify(model, preprocess.normalise(batch.to(device)))  # (b, K)
        probs = logits.sigmoid() if multilabel else logits.softmax(-1)  # (b, K)
        top = probs.topk(k, dim=-1)  # values, indices: (b, k) each
        out.extend(map(Prediction, names, top.indices.tolist(), top.values.tolist()))
    if not out:
        raise VitxError("no readable images: every one was skipped as corrupt")
    return out


def as_records(predictions: Sequence[Prediction], names: Sequence[str]) -> list[dict]:
    """JSON-ready: one dict per image, its predictions ranked."""
    return [{"image": p.image,
             "predictions": [{"rank": r, "class": c, "label": names[c], "probability": prob}
                             for r, (c, prob) in enumerate(zip(p.classes, p.probabilities), 1)]}
            for p in predictions]


def to_json(predictions: Sequence[Prediction], names: Sequence[str]) -> str:
    return json.dumps(as_records(predictions, names), indent=2)


def to_csv(predictions: Sequence[Prediction], names: Sequence[str]) -> str:
    """One row per image and rank: image, rank, class, label, probability."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["image", "rank", "class", "label", "probability"])
    for record in as_records(predictions, names):
        for row in record["predictions"]:
            writer.writerow([record["image"], row["rank"], row["class"], row["label"], f"{row['probability']:.6g}"])
    return buf.getvalue()


__all__ = ["IMAGE_SUFFIXES", "Prediction", "as_records", "classify", "list_images", "predict", "to_csv", "to_json"]

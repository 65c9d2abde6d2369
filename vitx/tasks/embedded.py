"""Embedded transfer tasks: procedural, offline, deterministic. A low-data downstream task for experiments that
must run anywhere (the small-scale reproduction of the paper's findings uses it)."""
from __future__ import annotations

from ..data.procedural import Shapes
from ..registry import register_task
from .base import Task

SPLITS = {"train": ("train", 10_000), "val": ("validation", 2_000), "test": ("test", 2_000)}


def shapes_split(split: str):
    """Seed 1: other images than `--data embedded:shapes` (seed 0) pre-trains on. Rendered at 64px, so the
    task can be fine-tuned at any resolution up to that."""
    name, length = SPLITS[split]
    return Shapes(size=64, length=length, seed=1, split=name)


register_task("embedded/shapes", Task(
    name="embedded/shapes", group="embedded", num_classes=10,
    label="which of 10 procedural shapes (other draws than embedded:shapes)", embedded=shapes_split,
), description="which of 10 procedural shapes", group="embedded", suite="embedded")


DIGITS_VAL = 237  # the last images of embedded:digits' train split form the task's validation pool


def digits_split(split: str):
    """scikit-learn's handwritten digits as a low-data task: train and val from `embedded:digits`' train split
    (1,437 images: the first 1,200 and the last 237), test = its test split (360 images), which no pre-training
    on `embedded:digits` sees. Rendered at 64px (8 pixels per digit pixel); other resolutions are resized from
    that."""
    from ..data.procedural import Digits
    from ..data.draws import Subset

    if split == "test":
        return Digits(size=64, split="test")
    train = Digits(size=64, split="train")
    cut = len(train) - DIGITS_VAL
    part = range(cut) if split == "train" else range(cut, len(train))
    return Subset(train, part, 10, class_names=train.class_names)


register_task("embedded/digits", Task(
    name="embedded/digits", group="embedded", num_classes=10,
    label="which digit (scikit-learn's 8x8 handwriting; test images unseen by embedded:digits pre-training)",
    embedded=digits_split,
), description="which handwritten digit (real images)", group="embedded", suite="embedded")

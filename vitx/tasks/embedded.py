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

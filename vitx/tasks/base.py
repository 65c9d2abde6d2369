"""A transfer task as data: its name, group, classes, where its data lives and how labels are defined."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
from PIL import Image

from ..data.sources import ImageSource, source_labels


@dataclass(frozen=True)
class Task:
    """One classification task.

    `hub` is the Hugging Face dataset repo of its full data (clip-benchmark's VTAB WebDataset copies);
    `hub_label` maps a label stored there to this task's label (identity when None); `embedded(split)` builds
    an offline procedural source for 'train' / 'val' / 'test' when the task can be regenerated exactly.
    """

    name: str
    group: str
    num_classes: int
    label: str  # the label definition, one line
    tfds: str = ""  # the TFDS dataset the reference implementation reads (provenance)
    hub: str | None = None
    hub_label: Callable[[int], int] | None = None
    embedded: Callable[[str], ImageSource] | None = None
    data: str | None = None  # a data spec (`--task PATH|hf:NAME|SHARDS`): any labelled data as a task (custom.py)
    release: str | None = None  # its folder's name in the VTAB-1k folder release (data/release.py)
    info: dict[str, Any] = field(default_factory=dict)


class SubsetSource:
    """Samples `indices` of `base`, with labels passed through `label_map`: a task split as an ImageSource."""

    def __init__(self, base: ImageSource, indices: Sequence[int], num_classes: int,
                 label_map: Callable[[int], int] | None = None, class_names: list[str] | None = None) -> None:
        self.base, self.indices = base, np.asarray(indices, dtype=np.int64)
        self.num_classes, self.label_map = num_classes, label_map
        self.class_names = class_names or [str(i) for i in range(num_classes)]

    def __len__(self) -> int:
        return len(self.indices)

    def labels(self) -> np.ndarray:
        raw = source_labels(self.base)[self.indices]
        return raw if self.label_map is None else np.asarray([self.label_map(int(v)) for v in raw], dtype=np.int64)

    def load(self, index: int) -> tuple[Image.Image, int]:
        img, label = self.base.load(int(self.indices[index]))
        return img, int(label if self.label_map is None else self.label_map(int(label)))

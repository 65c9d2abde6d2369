"""A transfer task as data: its name, group, classes, where its data lives and how labels are defined."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..data.sources import ImageSource


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

"""What every image source is: `len()`, `load(i) -> (image, label)`, `num_classes` (None when unlabeled) and
`class_names`; and `HFImageSource`, the map-style source over a `datasets.Dataset` that every file layout
becomes (`opener.py` opens them; `columns.py` finds the image and the label)."""
from __future__ import annotations

from typing import Any, Protocol

import numpy as np
from PIL import Image

from .columns import Columns


class ImageSource(Protocol):
    num_classes: int | None
    class_names: list[str] | None

    def __len__(self) -> int: ...

    def load(self, index: int) -> tuple[Image.Image, Any]: ...


def column_values(ds: Any, path: tuple[str, ...]) -> list[Any]:
    """Every value of a (possibly nested) column of a map-style dataset, read from its Arrow table."""
    values = ds[path[0]]
    return [None if v is None else v.get(path[1]) for v in values] if len(path) > 1 else list(values)


class HFImageSource:
    """A `datasets.Dataset` with an image column and (optionally) a label column, as `columns` found them."""

    def __init__(self, ds: Any, origin: str, columns: Columns) -> None:
        self.origin, self.columns = origin, columns
        self.num_classes, self.class_names, self.multilabel = columns.num_classes, columns.class_names, columns.multilabel
        self.ds = columns.undecoded(ds)

    @property
    def label_key(self) -> str | None:
        return self.columns.label_path[0] if self.columns.label_path else None

    def __len__(self) -> int:
        return len(self.ds)

    def load(self, index: int) -> tuple[Any, Any]:
        return self.columns.record(self.ds[int(index)], f"#{index} of {self.origin}")

    def labels(self) -> np.ndarray:
        """Every label, read from the table (no image is decoded). (N,) int64"""
        if self.columns.label_path is None or self.multilabel:
            raise ValueError(f"{self.origin} has no single-class labels")
        values = column_values(self.ds, self.columns.label_path)
        return np.asarray([self.columns.to_class(v, f"#{i} of {self.origin}") for i, v in enumerate(values)],
                          dtype=np.int64)


LABELS_READ = "_vitx_labels"  # where a source keeps the labels once read (a check and its evaluation read them)


def source_labels(source: ImageSource) -> np.ndarray:
    """Every label of a source, without decoding images where the source can say them directly. Read once per
    source object where they are not held already (a label-less plugin source decodes every image for them),
    then the same read-only view; a source's tensor of labels is read as it is. (N,) int64"""
    kept = getattr(source, LABELS_READ, None)
    if isinstance(kept, np.ndarray):
        return kept
    labels = getattr(source, "labels", None)
    if labels is not None:  # a method (task splits, tables) or a tensor (in-memory splits)
        read = np.asarray(labels() if callable(labels) else labels, dtype=np.int64)
    else:
        read = np.asarray([source.load(i)[1] for i in range(len(source))], dtype=np.int64)
    if labels is None or callable(labels):  # (a tensor of labels is already held: nothing to keep)
        read = read.view()  # (the source's own array stays writable)
        read.setflags(write=False)
        try:
            setattr(source, LABELS_READ, read)
        except (AttributeError, TypeError):  # a source with __slots__ or frozen: read again next time
            pass
    return read

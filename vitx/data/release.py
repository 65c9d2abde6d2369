"""The VTAB-1k folder release that PyTorch transfer work uses (VPT, NOAH, Convpass, FacT, RepAdapter, ...).

NOAH's `get_vtab1k.py` writes it from google-research/task_adaptation's own splits (TFDS):

    <root>/<task>/train800.txt  val200.txt  train800val200.txt  test.txt
    <root>/<task>/images/<split>/000000.jpg ...

each list line `images/<split>/000000.jpg <label>`, the path relative to `<root>/<task>` and the label final
(task_adaptation's label function already applied). vitx reads the lists as they are: train800 is the train
split, val200 the validation split, train800val200 what the final run trains on, test the test split.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .decoding import EncodedImage
from ..errors import VitxError

LISTS = {"train": "train800.txt", "val": "val200.txt", "train_val": "train800val200.txt", "test": "test.txt"}


def is_release(folder: Path) -> bool:
    """Whether `folder` holds one task of the folder release (its four list files)."""
    return all((folder / name).is_file() for name in LISTS.values())


class ListSource:
    """One list file of the release: `load(i)` gives the image file's bytes (decoded in the loader's workers)
    and its label; `labels()` reads the list, not the images."""

    def __init__(self, folder: Path, list_name: str, num_classes: int | None = None) -> None:
        self.origin = str(folder / list_name)
        paths, labels = [], []
        for number, line in enumerate((folder / list_name).read_text().splitlines(), 1):
            if not line.strip():
                continue
            parts = line.rsplit(maxsplit=1)
            if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
                raise VitxError(f"{self.origin}:{number}: expected '<image path> <label>', got '{line.strip()}'")
            label = int(parts[1])
            if label < 0 or (num_classes is not None and label >= num_classes):
                raise VitxError(f"{self.origin}:{number}: label {label} is outside 0..{(num_classes or 1) - 1}"
                               if num_classes else f"{self.origin}:{number}: label {label} is negative")
            paths.append(str(folder / parts[0]))
            labels.append(label)
        missing = next((p for p in paths if not Path(p).is_file()), None)
        if missing is not None:
            raise VitxError(f"{self.origin}: image {missing} does not exist")
        self.paths, self._labels = paths, np.asarray(labels, dtype=np.int64)
        if num_classes is None:  # a release folder opened as data: classes 0..max over its lists
            num_classes = int(self._labels.max()) + 1 if len(labels) else 0
        self.num_classes, self.class_names = num_classes, [str(i) for i in range(num_classes)]

    def __len__(self) -> int:
        return len(self.paths)

    def labels(self) -> np.ndarray:
        return self._labels

    def load(self, index: int) -> tuple[EncodedImage, int]:
        return EncodedImage.from_file(self.paths[index]), int(self._labels[index])


def open_release(folder: Path, num_classes: int | None = None) -> dict[str, ListSource]:
    """{'train', 'val', 'train_val', 'test'} → the release's lists in `folder` (classes: `num_classes`, or
    0..the largest label in any list)."""
    if num_classes is None:
        num_classes = max(ListSource(folder, name).num_classes for name in LISTS.values())
    return {split: ListSource(folder, name, num_classes) for split, name in LISTS.items()}

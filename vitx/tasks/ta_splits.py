"""task_adaptation's VTAB-1k splits, task by task, as data (google-research/task_adaptation,
`task_adaptation/data/<module>.py` at d7630d3).

Every task module names three splits of its TFDS dataset, `train`, `val` and `test`, and takes the few-shot
ones from them: train800 = train[:800], val200 = val[:200], train800val200 = both, test = test. How train,
val and test come out of the TFDS splits differs by task, in four rules:

    tfds-val          train, validation and test as TFDS has them             dtd, flowers, sun397, pcam, ...
    carve-val p       train = train[:p% of n], val = the rest of train         caltech101 (90), cifar100 (90), ...
    carve-val-test p q  train[:p%], val = the next q%, test = the remainder    eurosat, resisc45 (60, 20), dsprites
    val-from-test p   val = test[:p%], test = test[p%:]                        smallnorb (50)

(percentages of the split's size, rounded down, as task_adaptation computes them; clevr's test is TFDS's
validation split). A copy of a task holds either the TFDS splits (known by their sizes, `TFDS_SIZES`, the
sizes task_adaptation's own tests expect) or task_adaptation's train / val / test themselves: clip-benchmark's
hub copies are written by `clip_benchmark.webdataset_builder` from task_adaptation's split of that name, in
order (its eight loader workers read tf.data shards round-robin, which restores the order).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import VitxError

# vitx task → (task_adaptation module, rule, its percentages, the TFDS split test comes from)
RULES: dict[str, tuple[str, str, tuple[int, ...], str]] = {
    "caltech101": ("caltech.py", "carve-val", (90,), "test"),
    "cifar100": ("cifar.py", "carve-val", (90,), "test"),
    "dtd": ("dtd.py", "tfds-val", (), "test"),
    "flowers102": ("oxford_flowers102.py", "tfds-val", (), "test"),
    "pets": ("oxford_iiit_pet.py", "carve-val", (80,), "test"),
    "svhn": ("svhn.py", "carve-val", (90,), "test"),
    "sun397": ("sun397.py", "tfds-val", (), "test"),
    "camelyon": ("patch_camelyon.py", "tfds-val", (), "test"),
    "eurosat": ("eurosat.py", "carve-val-test", (60, 20), "train"),
    "resisc45": ("resisc45.py", "carve-val-test", (60, 20), "train"),
    "retinopathy": ("diabetic_retinopathy.py", "tfds-val", (), "test"),
    "clevr_count": ("clevr.py", "carve-val", (90,), "validation"),
    "clevr_dist": ("clevr.py", "carve-val", (90,), "validation"),
    "dmlab": ("dmlab.py", "tfds-val", (), "test"),
    "kitti_dist": ("kitti.py", "tfds-val", (), "test"),
    "dsprites_loc": ("dsprites.py", "carve-val-test", (80, 10), "train"),
    "dsprites_ori": ("dsprites.py", "carve-val-test", (80, 10), "train"),
    "smallnorb_azi": ("smallnorb.py", "val-from-test", (50,), "test"),
    "smallnorb_ele": ("smallnorb.py", "val-from-test", (50,), "test"),
}

# The TFDS split sizes task_adaptation's tests expect (task_adaptation/data/*_test.py)
TFDS_SIZES: dict[str, dict[str, int]] = {
    "caltech101": {"train": 3060, "test": 6084},
    "cifar100": {"train": 50000, "test": 10000},
    "dtd": {"train": 1880, "validation": 1880, "test": 1880},
    "flowers102": {"train": 1020, "validation": 1020, "test": 6149},
    "pets": {"train": 3680, "test": 3669},
    "svhn": {"train": 73257, "test": 26032},
    "sun397": {"train": 76128, "validation": 10875, "test": 21750},
    "camelyon": {"train": 262144, "validation": 32768, "test": 32768},
    "eurosat": {"train": 27000},
    "resisc45": {"train": 31500},
    "retinopathy": {"train": 35126, "validation": 10906, "test": 42670},
    "clevr_count": {"train": 70000, "validation": 15000},
    "clevr_dist": {"train": 70000, "validation": 15000},
    "dmlab": {"train": 65550, "validation": 22628, "test": 22735},
    "kitti_dist": {"train": 6347, "validation": 423, "test": 711},
    "dsprites_loc": {"train": 737280},
    "dsprites_ori": {"train": 737280},
    "smallnorb_azi": {"train": 24300, "test": 24300},
    "smallnorb_ele": {"train": 24300, "test": 24300},
}


@dataclass(frozen=True)
class Slice:
    """Examples [start, stop) of one split of a copy, in its order."""

    split: str  # train, validation or test (vitx's names; a copy's val/dev are found as validation)
    start: int
    stop: int

    def __str__(self) -> str:
        return f"{self.split}[{self.start or ''}:{self.stop}]"

    def head(self, n: int) -> "Slice":
        """The first n examples of this slice (`train[:800]`); never beyond it (into another split's images)."""
        if n > len(self):
            raise VitxError(f"{n} images are asked of {self}, which holds {len(self)}; use fewer --shots")
        return Slice(self.split, self.start, self.start + n)

    def __len__(self) -> int:
        return self.stop - self.start


def splits(task: str, sizes: dict[str, int]) -> dict[str, Slice]:
    """task_adaptation's train, val and test of `task` (a vitx short name, `caltech101`) in a copy of its TFDS
    splits of these sizes."""
    _, rule, pct, test_split = RULES[task]
    n = sizes["train"]
    if rule == "tfds-val":
        return {"train": Slice("train", 0, n), "val": Slice("validation", 0, sizes["validation"]),
                "test": Slice("test", 0, sizes["test"])}
    if rule == "carve-val":
        cut = pct[0] * n // 100
        return {"train": Slice("train", 0, cut), "val": Slice("train", cut, n),
                "test": Slice(test_split, 0, sizes[test_split])}
    if rule == "carve-val-test":
        cut, val = pct[0] * n // 100, pct[1] * n // 100
        return {"train": Slice("train", 0, cut), "val": Slice("train", cut, cut + val),
                "test": Slice("train", cut + val, n)}
    half = pct[0] * sizes["test"] // 100  # val-from-test
    return {"train": Slice("train", 0, n), "val": Slice("test", 0, half), "test": Slice("test", half, sizes["test"])}


def few_shot(task: str, sizes: dict[str, int], n_train: int = 800, n_val: int = 200) -> dict[str, Slice]:
    """train800, val200 and test (for other shot counts, the first n_train and n_val) as task_adaptation
    defines them, in a copy of the TFDS splits of these sizes."""
    whole = splits(task, sizes)
    return {"train": whole["train"].head(n_train), "val": whole["val"].head(n_val), "test": whole["test"]}


def holds_tfds_splits(task: str, sizes: dict[str, int]) -> bool:
    """Whether a copy with these split sizes holds the TFDS dataset's own splits (not task_adaptation's)."""
    return all(sizes.get(split) == size for split, size in TFDS_SIZES[task].items())


def definition(task: str) -> str:
    """task_adaptation's few-shot splits of `task` in its own words: `train800 = train[:800], val200 =
    train[2754:2954], test = test[:6084] of the TFDS splits (task_adaptation/data/caltech.py)`."""
    whole = splits(task, TFDS_SIZES[task])
    cut = {"train": whole["train"].head(min(800, len(whole["train"]))),
           "val": whole["val"].head(min(200, len(whole["val"]))), "test": whole["test"]}
    return (f"train800 = {cut['train']}, val200 = {cut['val']}, test = {cut['test']} of the TFDS splits "
            f"(task_adaptation/data/{RULES[task][0]})")


__all__ = ["RULES", "Slice", "TFDS_SIZES", "definition", "few_shot", "holds_tfds_splits", "splits"]

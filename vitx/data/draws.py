"""Seeded draws from a labelled pool: class-balanced N-shot sets, stratified hold-outs, and the test images of
`--test-samples`.

Data is often stored sorted by class (class folders, shards written class by class), so a split is never
"the first N": each draw here is a seeded function of the labels alone, the same on every machine, with
per-class counts as even as the data allows (`balanced_counts`).

`--test-samples N` has one rule for every command (`test_draw`): a seeded, class-stratified draw of N images of
the test split, each class in its share (0: the whole split, as task_adaptation evaluates). `vitx eval` and
`vitx transfer` on the same task with the same --seed evaluate the same images.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .sources import source_labels


def balanced_counts(available: Sequence[int], total: int, rng: np.random.Generator) -> np.ndarray:
    """How many to take from each class: `total` spread as evenly as `available` allows (water-filling; classes
    that get one more than the others are chosen by `rng`). (K,) int64"""
    available = np.asarray(available, dtype=np.int64)
    if total > int(available.sum()):
        raise ValueError(f"cannot draw {total} from {int(available.sum())}")
    take = np.zeros_like(available)
    left = total
    while left > 0:
        room = available - take
        classes = np.flatnonzero(room > 0)
        share, extra = divmod(left, len(classes))
        if share == 0:  # fewer left than classes with room: one more each for `extra` of them, seeded
            take[rng.permutation(classes)[:extra]] += 1
            break
        short = classes[room[classes] < share]
        if len(short):  # classes that cannot give a full share give all they have; the rest share again
            left -= int(room[short].sum())
            take[short] = available[short]
            continue
        take[classes] += share
        left -= share * len(classes)
    return take


def balanced_draw(labels: np.ndarray, total: int, seed: Any) -> np.ndarray:
    """`total` indices of `labels`, class-balanced, seeded; in ascending order. (total,) int64"""
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    members = [np.flatnonzero(labels == c) for c in classes]
    counts = balanced_counts([len(m) for m in members], total, rng)
    chosen = [rng.choice(m, int(k), replace=False) for m, k in zip(members, counts) if k > 0]
    return np.sort(np.concatenate(chosen)) if chosen else np.empty(0, dtype=np.int64)


def stratified_split(labels: np.ndarray, held: int, seed: Any) -> tuple[np.ndarray, np.ndarray]:
    """(kept, held out) positions of `labels`: `held` of them held out in proportion to each class's share
    (largest remainders, ties seeded), at least one per class when `held` allows. Both ascending."""
    rng = np.random.default_rng(seed)
    classes, sizes = np.unique(labels, return_counts=True)
    exact = held * sizes / sizes.sum()
    counts = np.floor(exact).astype(np.int64)
    order = np.lexsort((rng.random(len(classes)), -(exact - counts)))
    counts[order[: held - int(counts.sum())]] += 1
    out = [rng.choice(np.flatnonzero(labels == c), int(min(k, n)), replace=False)  # n: the class's members
           for c, k, n in zip(classes, counts, sizes)]
    held_out = np.sort(np.concatenate(out)) if out else np.empty(0, dtype=np.int64)
    return np.setdiff1d(np.arange(len(labels)), held_out), held_out  # (kept, held out)


TEST_DRAW = 78  # the test draw's own stream of the seed: [seed, TEST_DRAW]


def test_draw(labels: np.ndarray | None, size: int, count: int, seed: int) -> np.ndarray | None:
    """`--test-samples`: the positions of `count` of a test split's `size` images, a seeded, class-stratified draw
    (each class in its share of `count`, as `stratified_split` holds images out), ascending; None for the whole
    split (`count` 0, or not below `size`). Without single-class labels (`labels` None: unlabelled or
    multi-label), a seeded draw of `count` positions. (count,) int64"""
    if not count or count >= size:
        return None
    if labels is not None:
        return stratified_split(labels, count, [seed, TEST_DRAW])[1]
    return np.sort(np.random.default_rng([seed, TEST_DRAW]).choice(size, count, replace=False))


def test_rows(test: Any, count: int, seed: int) -> np.ndarray | None:
    """`test_draw` on a test source: stratified by its labels when it lists them without decoding an image."""
    return test_draw(source_labels(test) if _cheap_labels(test) else None, len(test), count, seed)


def drawn_test(test: Any, count: int, seed: int) -> Any:
    """The test split of `--test-samples` (`test_rows`): `test` itself for 0, else a `Subset` of it that says
    how it was drawn (`drawn_from`: the split's size)."""
    rows = test_rows(test, count, seed)
    if rows is None:
        return test
    drawn = Subset(test, rows)
    drawn.drawn_from = len(test)
    return drawn


def describe_test(test: Any, asked: int = 0) -> str:
    """The test images in words, for a header: "360", or "100 of 360 (a seeded, class-stratified draw:
    --test-samples)", or "all 360 (--test-samples 1000 asks for more than the split holds)"."""
    whole = getattr(test, "drawn_from", None)
    if whole is not None:
        return f"{len(test):,} of {whole:,} (a seeded, class-stratified draw: --test-samples)"
    if asked > len(test):
        return f"all {len(test):,} (--test-samples {asked:,} asks for more than the split holds)"
    return f"{len(test):,}"


def classes_left_out(drawn: np.ndarray, pool: np.ndarray, num_classes: int) -> list[int]:
    """The classes that `pool` (labels) holds images of and a draw from it (`drawn`, labels) has none of: a draw
    too small to give every class a training image trains a classifier that can never predict those classes,
    and its accuracy on a small test set can still look perfect."""
    have = np.bincount(np.asarray(drawn, dtype=np.int64), minlength=num_classes)
    held = np.bincount(np.asarray(pool, dtype=np.int64), minlength=num_classes)
    return [int(c) for c in np.flatnonzero((have == 0) & (held > 0))]


def class_counts(labels: np.ndarray, num_classes: int) -> list[int]:
    """Images per class, for a run's record."""
    return np.bincount(np.asarray(labels, dtype=np.int64), minlength=num_classes).tolist()


class Subset:
    """`indices` of `base` as a source of its own (a drawn, held-out or task split). A task may give its own
    `num_classes` and a `label_map` from the labels stored to its own (dSprites' raw factors on the hub)."""

    drawn_from: int | None = None  # a --test-samples draw's: the size of the split it was drawn from

    def __init__(self, base: Any, indices: Sequence[int], num_classes: int | None = None,
                 label_map: Callable[[int], int] | None = None, class_names: list[str] | None = None) -> None:
        self.base, self.indices, self.label_map = base, np.asarray(indices, dtype=np.int64), label_map
        self.num_classes = base.num_classes if num_classes is None else num_classes
        self.class_names = class_names or (base.class_names if num_classes is None else
                                           [str(i) for i in range(num_classes)])
        self.origin = getattr(base, "origin", "data")
        self.columns = getattr(base, "columns", None)

    def __len__(self) -> int:
        return len(self.indices)

    def labels(self) -> np.ndarray:
        raw = source_labels(self.base)[self.indices]
        return raw if self.label_map is None else np.asarray([self.label_map(int(v)) for v in raw], dtype=np.int64)

    def load(self, index: int) -> tuple[Any, Any]:
        img, label = self.base.load(int(self.indices[index]))
        return img, label if self.label_map is None else int(self.label_map(int(label)))


def validation_split(opened: Any, count: int, seed: int, held: int | None = None,
                     hold_out: bool = True) -> tuple[Any, Any, dict[str, Any]]:
    """(train, validation, record) for a run that evaluates `count` images: the data's validation split, else
    its test split, each as a seeded sample of `count` (never its first files: data is often sorted by class);
    else `count` images held out of train (stratified when labelled; a stream's through a seeded shuffle), which
    training then never sees. `held`: the `requested` size of the hold-out a resumed run made (so that it is
    made again exactly); `hold_out=False`: never hold images out (a resumed run that did not: its training data
    must not change)."""
    train = opened.split("train")
    if count <= 0 and held is None:
        return train, None, {}
    for name in ("validation", "test"):
        val = opened.split(name)
        if val is None:
            continue
        if hasattr(val, "draw"):  # a stream
            val, _ = val.draw(count, seed)
            how = f"{len(val)} of its {name} split (a seeded shuffle)"
        elif len(val) > count:
            if _cheap_labels(val):
                val = Subset(val, stratified_split(source_labels(val), count, [seed, 4242])[1])
                how = f"{count} of its {name} split (seeded, stratified)"
            else:
                val = Subset(val, np.sort(np.random.default_rng([seed, 4242]).choice(len(val), count, replace=False)))
                how = f"{count} of its {name} split (seeded)"
        else:
            how = f"its {name} split"
        return train, val, _record(val, name, how)
    if not hold_out:
        return train, None, {"split": None, "how": "none (the run being resumed held no images out)"}
    requested = held or count
    if hasattr(train, "hold_out"):  # a stream without a held-out split
        val = train.hold_out(requested, seed)
        if val is None:
            return train, None, {"split": None, "how": "none: the stream is too small to hold images out"}
        return train, val, {**_record(val, "held out of train", f"{len(val)} held out of train (a seeded shuffle, "
                                                  "stratified; not trained on)"), "requested": requested}
    n = min(requested, len(train) // 10)
    if n == 0:
        return train, None, {"split": None, "how": "none: too few images to hold some out"}
    if _cheap_labels(train):
        kept, out = stratified_split(source_labels(train), n, [seed, 4243])
    else:
        out = np.sort(np.random.default_rng([seed, 4243]).choice(len(train), n, replace=False))
        kept = np.setdiff1d(np.arange(len(train)), out)
    val = Subset(train, out)
    return Subset(train, kept), val, {**_record(val, "held out of train", f"{n} held out of train (seeded, "
                                                 "stratified; not trained on)"), "requested": requested}


def classes_unseen(train: Any, num_classes: int) -> list[int]:
    """The classes of 0..num_classes-1 with no image in `train` ([] when its labels cannot be listed cheaply)."""
    if not num_classes or not _cheap_labels(train):
        return []
    have = class_counts(source_labels(train), num_classes)[:num_classes]
    return [c for c, n in enumerate(have) if n == 0]


def _cheap_labels(source: Any) -> bool:
    """Whether a source has single-class labels it can list without decoding (or rendering) every image."""
    cheap = getattr(getattr(source, "base", source), "labels", None) is not None
    return bool(cheap and source.num_classes and not getattr(getattr(source, "columns", None), "multilabel", False))


def _record(val: Any, split: str, how: str) -> dict[str, Any]:
    counts = {"class_counts": class_counts(source_labels(val), val.num_classes)} if _cheap_labels(val) else {}
    return {"split": split, "images": len(val), "how": how, **counts}

"""Any labelled data as a transfer task: `vitx transfer --task PATH|hf:NAME|SHARDS`.

The data is opened by the one opener (`data/opener.py`), so every layout `--data` takes is a task. Its splits:

  test        its test split; else a seeded, stratified fifth of train, held out (the result says so);
              `--test-samples N`: a seeded, class-stratified draw of N of it, as every command draws them
  train, val  `--shots N`: a seeded, class-balanced draw of N (per-class counts as even as the data allows),
              4N/5 for training and N/5 for validation, the validation part from the data's own validation
              split when it has one, else a stratified part of the draw

Nothing is taken "first N": image folders and shards are often sorted by class. A VTAB-1k folder release is
used through its own lists, as the registered VTAB tasks use them.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..data.columns import require_classes
from ..data.draws import Subset, balanced_draw, class_counts, classes_left_out, drawn_test, stratified_split
from ..data.opener import DataOptions, Opened, open_data
from ..data.sources import source_labels
from ..errors import VitxError
from .base import Task

TEST_FRACTION = 5  # without a test split, 1/5 of train is held out as the test split


def data_task(spec: str, options: DataOptions) -> Task:
    """`spec` opened as a task: its classes come from the data's labels."""
    opened = open_data(spec, options)
    train = opened.split("train")
    require_classes(train, f"--task {spec}")
    if getattr(train, "multilabel", False):
        raise VitxError(f"--task {spec}: its labels are multi-label; a transfer trains a single-label classifier")
    return Task(name=spec, group="custom", num_classes=int(train.num_classes), label=opened.labels_described(),
                data=spec, info={"opened": opened})


def max_shots(train: int, val: int | None) -> int:
    """The largest --shots the pools allow (4N/5 from train; N/5 from val, or all N from train)."""
    if val is None:
        return train
    return max((n for n in range(2, 5 * (train + val) // 4 + 6) if n * 4 // 5 <= train and n - n * 4 // 5 <= val),
               default=0)


def custom_splits(task: Task, shots: int, seed: int, test_samples: int = 0) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(train, val, test, record) of a data task: see the module docstring. `test_samples`: a seeded sample of
    that many test images (not the first ones: test splits are often sorted by class)."""
    opened: Opened = task.info["opened"]
    k = task.num_classes
    pool, val_pool, test = opened.split("train"), opened.split("validation"), opened.split("test")
    if hasattr(pool, "draw_balanced"):
        return _stream_splits(task, shots, seed, pool, val_pool, test, test_samples)
    labels = source_labels(pool)
    record: dict[str, Any] = {"seed": seed, "draw": "class-balanced, seeded"}
    if test is None:
        kept, held = stratified_split(labels, len(labels) // TEST_FRACTION, [seed, 31])
        test, pool, labels = Subset(pool, held), Subset(pool, kept), labels[kept]
        record["test_from"] = f"a seeded, stratified fifth of train (the data has no test split): {len(held)} images"
    else:
        record["test_from"] = "its test split"
    if 0 < test_samples < len(test):
        test = drawn_test(test, test_samples, seed)  # the one --test-samples rule (data/draws.py)
        record["test_from"] += f" (a seeded, class-stratified draw of {test_samples}: --test-samples)"
    n_train, n_val = shots * 4 // 5, shots - shots * 4 // 5
    most = max_shots(len(labels), None if val_pool is None else len(val_pool))
    if shots > most:
        where = f"{len(labels)} train" + ("" if val_pool is None else f" and {len(val_pool)} validation")
        raise VitxError(f"--shots {shots} is more than {task.name} holds ({where} images): pass --shots {most} or less")
    if val_pool is not None:
        train_idx = balanced_draw(labels, n_train, [seed, 32])
        val_labels = source_labels(val_pool)
        val_idx = balanced_draw(val_labels, n_val, [seed, 33])
        train, val = Subset(pool, train_idx), Subset(val_pool, val_idx)
        train_counts, val_counts = labels[train_idx], val_labels[val_idx]
        record["val_from"] = "its validation split"
    else:
        drawn = balanced_draw(labels, shots, [seed, 32])
        kept, held = stratified_split(labels[drawn], n_val, [seed, 33])
        train, val = Subset(pool, drawn[kept]), Subset(pool, drawn[held])
        train_counts, val_counts = labels[drawn[kept]], labels[drawn[held]]
        record["val_from"] = "a stratified part of the draw from train (the data has no validation split)"
    refuse_empty_classes(task, shots, train_counts, labels, pool.class_names)
    record.update(train_per_class=class_counts(train_counts, k), val_per_class=class_counts(val_counts, k),
                  test_images=len(test))
    return train, val, test, record


def _stream_splits(task: Task, shots: int, seed: int, pool: Any, val_pool: Any, test: Any,
                   limit: int) -> tuple[Any, Any, Any, dict[str, Any]]:
    """`custom_splits` for streamed data (`--stream`): the shots are read from seeded shuffles of the stream
    (class-balanced by label, images kept encoded); the test split is held encoded (`--test-samples`: a seeded
    sample of it)."""
    k = task.num_classes
    n_train, n_val = shots * 4 // 5, shots - shots * 4 // 5
    record: dict[str, Any] = {"seed": seed, "draw": "class-balanced, seeded, read from a stream"}
    if val_pool is not None:
        train, val = pool.draw_balanced(n_train, seed), val_pool.draw_balanced(n_val, seed + 1)
        record["val_from"] = "its validation split"
    else:
        drawn = pool.draw_balanced(shots, seed)
        kept, held = stratified_split(drawn.labels(), n_val, [seed, 33])
        train, val = Subset(drawn, kept), Subset(drawn, held)
        record["val_from"] = "a stratified part of the draw from train (the data has no validation split)"
    refuse_empty_classes(task, shots, train.labels(), np.concatenate([train.labels(), val.labels()]), pool.class_names)
    if test is None:
        raise VitxError(f"--task {task.name} --stream: the data has no test split, and a stream cannot hold one out "
                        "of train; open it without --stream, or give it a test split")
    # --test-samples: drawn class-stratified from a seeded shuffle's first 4 N (a stream has no positions)
    test = drawn_test(test.draw(4 * limit, seed)[0], limit, seed) if limit else test.read_all()
    record["test_from"] = (f"its test split ({len(test)} images"
                           f"{', a seeded, class-stratified draw from a seeded shuffle' if limit else ''})")
    record.update(train_per_class=class_counts(train.labels(), k), val_per_class=class_counts(val.labels(), k),
                  test_images=len(test))
    return train, val, test, record


def refuse_empty_classes(task: Task, shots: int, train_labels: np.ndarray, pool_labels: np.ndarray,
                         names: list[str] | None = None) -> None:
    """Refuse a draw that leaves a class the data has without a training image (`--shots 3` on 3 classes: 2
    train, 1 validation image): its classifier could never predict that class. One line with the counts and the
    smallest --shots whose 4/5 gives every class one."""
    k = task.num_classes
    empty = classes_left_out(train_labels, pool_labels, k)
    if empty:
        present = len(np.unique(pool_labels))
        need = next(n for n in range(2, 5 * present + 5) if n * 4 // 5 >= present)
        shown = ", ".join(str(names[c]) if names and c < len(names) else str(c) for c in empty[:5])
        shown += ", ..." if len(empty) > 5 else ""
        counts = f"; train per class {class_counts(train_labels, k)}" if k <= 20 else ""
        raise VitxError(f"--shots {shots} leaves {len(empty)} of {k} classes without a training image ({shown}"
                        f"{counts}): pass --shots {need} or more (4/5 of them train)")


def describe_record(record: dict[str, Any]) -> str:
    """One line for a transfer's header: the per-class counts of the draw."""
    return (f"{record['draw']} (seed {record['seed']}): train per class {record['train_per_class']}, val per class "
            f"{record['val_per_class']} ({record['val_from']}); test: {record['test_from']}")


__all__ = ["custom_splits", "data_task", "describe_record", "max_shots"]

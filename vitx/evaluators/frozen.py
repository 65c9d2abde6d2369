"""The driver of `vitx eval NAME`: the start read once (`runs/start.py`), each dataset or task opened, its images
prepared as the start expects them, and the evaluator run on its features: one result per dataset."""
from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np

from ..errors import VitxError
from ..evaluation.config import FrozenConfig
from ..spec import split_specs

Each = Callable[[dict[str, Any]], None]


class Frozen:
    """A start's backbone at the evaluation's resolution and the input it expects (the flags override it)."""

    def __init__(self, cfg: FrozenConfig, command: str = "eval") -> None:
        from ..adapters import resize_backbone
        from ..runner.config import default_workers
        from ..runner.launch import process_device
        from ..runs.start import load_start, start_input

        backbone = load_start(cfg.start, cfg.model, cfg.seed, use_ema=cfg.use_ema)
        self.cfg, self.command = cfg, command  # command: `eval knn`, as errors name it
        self.size = cfg.image_size or int(backbone.patch_embed.img_size[0])
        self.given = start_input(cfg.start, backbone)  # the start's mean, std and interpolation
        self.crop_mode = timm_crop_mode(backbone) if self.given["eval_resize"] == "timm" else "center"
        self.normalisation, self.given["source"] = cfg.input_for(self.given)
        self.backbone = resize_backbone(backbone, self.size)
        self.workers, self.device = default_workers(), process_device()

    def datasets(self) -> list[tuple[str, Any, Any, Any]]:
        """(name, train source, test source, preprocess) of every dataset or task the config names, all opened
        before the first is evaluated: a bad later name or path is one line before minutes of evaluation, not
        after (sources read their images lazily, so holding them all open costs little)."""
        from ..data import Preprocess
        from ..data.opener import DataOptions, looks_like_data, open_labelled
        from ..registry import TASKS
        from ..tasks import get_task, open_full_splits

        cfg, size, normal = self.cfg, self.size, self.normalisation
        items = split_specs(cfg.task, "--task") if cfg.task else split_specs(cfg.data or "embedded:digits", "--data")
        opened = []
        for item in items:
            if cfg.task and not looks_like_data(item):  # a registered task; your own data given as --task is --data
                if item not in TASKS.names() and item.startswith((os.sep, ".", "~")):  # a path, not there
                    raise VitxError(f"--task {item}: no such file or folder (and not a registered task: see "
                                    "`vitx tasks`)")
                train, test, _ = open_full_splits(get_task(item), cfg.data_dir)
                preprocess = Preprocess(image_size=size, squash=True, **normal)
            else:
                options = DataOptions(label_key=cfg.label_key or None, image_key=cfg.image_key or None, image_size=size)
                train, test = open_labelled(item, self.command, options)
                preprocess = Preprocess(image_size=size, eval_crop_pct=self.given["crop_pct"],
                                        eval_resize=self.given["eval_resize"], eval_crop_mode=self.crop_mode, **normal)
            if cfg.preprocess == "big_vision":  # one geometry for every dataset, as big_vision's evaluator has
                preprocess = Preprocess(image_size=size, eval_resize="big_vision", **normal)
            opened.append((item, train, test, preprocess))
        return opened

    def record(self, item: str, preprocess: Any, features: str) -> dict[str, Any]:
        """What every result says of its start, data and input."""
        return {"from": self.cfg.start, "use_ema": self.cfg.use_ema, "data": item, "image_size": self.size,
                "features": features,
                "input": {**self.normalisation, "crop_pct": preprocess.eval_crop_pct, "eval_resize": preprocess.eval_resize,
                          "crop_mode": preprocess.eval_crop_mode if preprocess.eval_resize == "timm" else None,
                          "squash": preprocess.squash, "from": self.given["source"]}}

    def test_rows(self, test: Any) -> np.ndarray | None:
        """--test-samples N: the positions of N test images, the one rule every command draws them by (a seeded,
        class-stratified draw: `data.draws.test_draw`; test splits are often sorted by class, so never the first
        N), ascending; None: all of them."""
        from ..data.draws import test_rows

        return test_rows(test, self.cfg.test_samples, self.cfg.seed)

    def train_draw(self, train: Any, train_samples: int) -> tuple[np.ndarray, np.ndarray]:
        """(the train split's labels, the positions read): all, or a seeded class-balanced draw of
        `train_samples`; a draw that leaves a class without an image is refused in one line."""
        from ..data.draws import balanced_draw, classes_left_out
        from ..data.sources import source_labels

        labels = source_labels(train)
        chosen = np.arange(len(labels)) if not train_samples or train_samples >= len(labels) else \
            balanced_draw(labels, train_samples, [self.cfg.seed, 3571])
        empty = classes_left_out(labels[chosen], labels, int(train.num_classes))
        if empty:  # a class no train image stands for is never predicted: its accuracy would be a floor, unsaid
            present = len(np.unique(labels))
            raise VitxError(f"--train-samples {train_samples} leaves {len(empty)} of the {present} classes of the "
                            f"train split without an image: pass --train-samples {present} or more (or 0: all)")
        return labels, chosen

    def features(self, model: Any, train: Any, test: Any, preprocess: Any,
                 train_samples: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(train features, train labels, test features, test labels): the train images all or a seeded,
        class-balanced draw of `train_samples`; the test images of `test_rows`."""
        from ..data.sources import source_labels
        from ..evaluation.features import indexed_features

        labels, chosen = self.train_draw(train, train_samples)
        rows = self.test_rows(test)
        rows = np.arange(len(test)) if rows is None else rows
        model = model.to(self.device)
        x_train = indexed_features(model, train, preprocess, chosen, self.workers, self.device)  # (N, D)
        x_test = indexed_features(model, test, preprocess, rows, self.workers, self.device)  # (M, D)
        return x_train, labels[chosen], x_test, source_labels(test)[rows]


def timm_crop_mode(backbone: Any) -> str:
    """How a timm start's eval transform crops (its pretrained_cfg's crop_mode, as timm's `resolve_data_config`
    reads it): center, squash or border; anything else is timm's default, center."""
    from timm.data import resolve_data_config

    from ..data.transforms import CROP_MODES

    mode = resolve_data_config({}, model=backbone).get("crop_mode")
    return mode if mode in CROP_MODES else "center"


def evaluate(evaluator: Any, each: Each | None = None) -> list[dict[str, Any]]:
    """`evaluator` (a `vitx.evaluators.Evaluator` with its config) on every dataset or task its config names;
    `each` is called with each dataset's result as soon as it is done (a table printed before the next dataset
    is evaluated; every one was opened first, hub downloads included)."""
    frozen = Frozen(evaluator.cfg, f"eval {evaluator.name}")
    model = evaluator.reader(frozen)
    results, opened = [], frozen.datasets()
    for item, train, test, _ in opened:  # a dataset the evaluation cannot run on is refused before any result
        evaluator.check(frozen, item, train, test)
    for item, train, test, preprocess in opened:
        result = evaluator.evaluate(frozen, model, train, test, preprocess)
        results.append({**frozen.record(item, preprocess, getattr(model, "kind", "")), **result})
        if each is not None:
            each(results[-1])
    return results


__all__ = ["Frozen", "evaluate", "timm_crop_mode"]

"""Frozen-feature evaluation of a start (`vitx eval fewshot`, `knn` and `linear`): the start read once
(`runs/start.py`), each dataset or task opened, its images prepared as the start expects them, and a probe of
`vitx.evaluation` run on its features: one result per dataset."""
from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from ..evaluation.config import FewshotConfig, FrozenConfig, KnnConfig, LinearConfig
from ..spec import split_specs

Each = Callable[[dict[str, Any]], None]


class Frozen:
    """A start's backbone at the evaluation's resolution and the input it expects (the flags override it)."""

    def __init__(self, cfg: FrozenConfig) -> None:
        from ..adapters import resize_backbone
        from ..runner.config import default_workers
        from ..runner.launch import process_device
        from ..runs.start import load_start, start_input

        backbone = load_start(cfg.start, cfg.model, cfg.seed, use_ema=cfg.use_ema)
        self.cfg, self.size = cfg, cfg.image_size or int(backbone.patch_embed.img_size[0])
        self.given = start_input(cfg.start, backbone)  # the start's mean, std and interpolation
        self.normal = dict(mean=tuple(cfg.mean or self.given["mean"]), std=tuple(cfg.std or self.given["std"]),
                           interpolation=cfg.interpolation or self.given["interpolation"])
        if cfg.mean or cfg.std or cfg.interpolation:
            self.given["source"] = "--mean/--std/--interpolation"
        self.backbone = resize_backbone(backbone, self.size)
        self.workers, self.device = default_workers(), process_device()

    def datasets(self) -> Iterator[tuple[str, Any, Any, Any]]:
        """(name, train source, test source, preprocess) of every dataset or task the config names, opened one at
        a time."""
        from ..data import Preprocess
        from ..data.opener import DataOptions, looks_like_data, open_labelled
        from ..tasks import get_task, open_full_splits

        cfg, size, normal = self.cfg, self.size, self.normal
        items = split_specs(cfg.task, "--task") if cfg.task else split_specs(cfg.data or "embedded:digits", "--data")
        for item in items:
            if cfg.task and not looks_like_data(item):  # a registered task; your own data given as --task is --data
                train, test, _ = open_full_splits(get_task(item), cfg.data_dir)
                preprocess = Preprocess(image_size=size, squash=True, **normal)
            else:
                options = DataOptions(label_key=cfg.label_key or None, image_key=cfg.image_key or None, image_size=size)
                train, test = open_labelled(item, f"eval {self.command}", options)
                preprocess = Preprocess(image_size=size, eval_crop_pct=self.given["crop_pct"],
                                        eval_resize=self.given["eval_resize"], **normal)
            if cfg.preprocess == "big_vision":  # one geometry for every dataset, as big_vision's evaluator has
                preprocess = Preprocess(image_size=size, eval_resize="big_vision", **normal)
            yield item, train, test, preprocess

    @property
    def command(self) -> str:
        return {KnnConfig: "knn", LinearConfig: "linear"}.get(type(self.cfg), "fewshot")

    def record(self, item: str, preprocess: Any, features: str) -> dict[str, Any]:
        """What every result says of its start, data and input."""
        return {"from": self.cfg.start, "use_ema": self.cfg.use_ema, "data": item, "image_size": self.size,
                "features": features,
                "input": {**self.normal, "crop_pct": preprocess.eval_crop_pct, "eval_resize": preprocess.eval_resize,
                          "squash": preprocess.squash, "from": self.given["source"]}}

    def test_rows(self, test: Any) -> np.ndarray | None:
        """--test-samples N: a seeded draw of N test images, in ascending order (test splits are often sorted by
        class: never the first N); None: all of them."""
        n = self.cfg.test_samples
        if not n or n >= len(test):
            return None
        return np.sort(np.random.default_rng([self.cfg.seed, 78]).permutation(len(test))[:n])

    def features(self, model: Any, train: Any, test: Any, preprocess: Any,
                 train_samples: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(train features, train labels, test features, test labels): the train images all or a seeded,
        class-balanced draw of `train_samples`; the test images of `test_rows`."""
        from ..data.draws import balanced_draw
        from ..data.sources import source_labels
        from ..evaluation.features import indexed_features

        labels = source_labels(train)
        chosen = np.arange(len(labels)) if not train_samples or train_samples >= len(labels) else \
            balanced_draw(labels, train_samples, [self.cfg.seed, 3571])
        rows = self.test_rows(test)
        rows = np.arange(len(test)) if rows is None else rows
        model = model.to(self.device)
        x_train = indexed_features(model, train, preprocess, chosen, self.workers, self.device)  # (N, D)
        x_test = indexed_features(model, test, preprocess, rows, self.workers, self.device)  # (M, D)
        return x_train, labels[chosen], x_test, source_labels(test)[rows]


def evaluate_fewshot(cfg: FewshotConfig, each: Each | None = None) -> list[dict[str, Any]]:
    """Few-shot accuracies of `cfg.start`'s features on every dataset (or task) `cfg` names; `each` is called
    with each dataset's result as soon as it is done (a table printed before the next dataset is opened)."""
    from ..evaluation.fewshot import evaluate_sources
    from ..runs.start import representation

    frozen = Frozen(cfg)
    model = representation(frozen.backbone, cfg.start, cfg.features, cfg.use_ema)
    results = []
    for item, train, test, preprocess in frozen.datasets():
        result = evaluate_sources(model, train, test, preprocess, cfg.shots, range(cfg.seeds), cfg.reg,
                                  frozen.test_rows(test), workers=frozen.workers, device=frozen.device)
        results.append({**frozen.record(item, preprocess, model.kind), **result})
        if each is not None:
            each(results[-1])
    return results


def evaluate_knn(cfg: KnnConfig, each: Each | None = None) -> list[dict[str, Any]]:
    """Weighted kNN top-1 of `cfg.start`'s features for every k, on every dataset `cfg` names."""
    from ..evaluation.knn import knn_accuracy
    from ..runs.start import representation

    frozen = Frozen(cfg)
    model = representation(frozen.backbone, cfg.start, cfg.features, cfg.use_ema)
    results = []
    for item, train, test, preprocess in frozen.datasets():
        x_train, y_train, x_test, y_test = frozen.features(model, train, test, preprocess, cfg.train_samples)
        classes = int(train.num_classes)
        top1 = {str(k): knn_accuracy(x_train, y_train, x_test, y_test, classes, k, cfg.temperature) for k in cfg.k}
        results.append({**frozen.record(item, preprocess, model.kind), "top1": top1, "temperature": cfg.temperature,
                        "train_samples": len(y_train), "test_samples": len(y_test), "num_classes": classes,
                        "feature_dim": int(x_train.shape[1]),
                        "protocol": "weighted kNN (DINO): cosine similarity, votes exp(sim / T)"})
        if each is not None:
            each(results[-1])
    return results


def linear_choices(cfg: LinearConfig, available: dict[str, slice]) -> list[str]:
    """The feature choices of --features that the start has (all: every one; auto: the start's own)."""
    from ..errors import VitxError
    from ..evaluation import READOUTS
    from ..runs.start import start_features

    ordered = sorted(available, key=lambda name: READOUTS.index(name) if name in READOUTS else len(READOUTS))
    if "all" in cfg.features:
        return ordered
    own = start_features(cfg.start)
    own = own if own in available else "backbone"  # pre-logits without a representation layer: the pooled output
    chosen = [own if name == "auto" else name for name in cfg.features]
    missing = [name for name in chosen if name not in available]
    if missing:
        raise VitxError(f"--features {missing[0]} is not available for this start (it has {', '.join(ordered)})")
    return list(dict.fromkeys(chosen))


def evaluate_linear(cfg: LinearConfig, each: Each | None = None) -> list[dict[str, Any]]:
    """A linear probe per dataset on features extracted once (every choice in one pass), lr × features chosen
    on validation, test top-1 over the seeds."""
    from ..evaluation.linear import linear_probe
    from ..evaluation.representation import Readouts
    from ..runs.start import representation

    frozen = Frozen(cfg)
    readouts = Readouts(frozen.backbone, representation(frozen.backbone, cfg.start, "pre-logits", cfg.use_ema).layer)
    choices = linear_choices(cfg, readouts.slices)
    results = []
    for item, train, test, preprocess in frozen.datasets():
        x_train, y_train, x_test, y_test = frozen.features(readouts, train, test, preprocess, cfg.train_samples)
        result = linear_probe(x_train, y_train, x_test, y_test, int(train.num_classes), readouts.slices, choices,
                              cfg.lrs, cfg.epochs, cfg.batch_size, cfg.batch_norm, cfg.val_fraction, cfg.seeds,
                              frozen.device)
        results.append({**frozen.record(item, preprocess, result["features_chosen"]), **result})
        if each is not None:
            each(results[-1])
    return results


__all__ = ["Frozen", "evaluate_fewshot", "evaluate_knn", "evaluate_linear", "linear_choices"]

"""Frozen-feature evaluation of a start (`vitx eval fewshot`): the start read once (`runs/start.py`), each
dataset or task opened, its images prepared as the start expects them, and the few-shot least-squares probe of
`vitx.evaluation` run on its features: one result per dataset."""
from __future__ import annotations

from typing import Any, Callable

from ..evaluation.config import FewshotConfig
from ..spec import split_specs


def evaluate_fewshot(cfg: FewshotConfig, each: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Few-shot accuracies of `cfg.start`'s features on every dataset (or task) `cfg` names; `each` is called
    with each dataset's result as soon as it is done (a table printed before the next dataset is opened)."""
    from ..adapters import resize_backbone
    from ..data import Preprocess
    from ..data.opener import DataOptions, looks_like_data, open_labelled
    from ..evaluation.fewshot import evaluate_sources
    from ..runner.config import default_workers
    from ..runner.launch import process_device
    from ..runs.start import load_start, representation, start_input
    from ..tasks import get_task, open_full_splits

    backbone = load_start(cfg.start, cfg.model, cfg.seed)
    size = cfg.image_size or int(backbone.patch_embed.img_size[0])
    given = start_input(cfg.start, backbone)  # the start's mean, std and interpolation; the flags override them
    normal = dict(mean=tuple(cfg.mean or given["mean"]), std=tuple(cfg.std or given["std"]),
                  interpolation=cfg.interpolation or given["interpolation"])
    if cfg.mean or cfg.std or cfg.interpolation:
        given["source"] = "--mean/--std/--interpolation"
    model = representation(resize_backbone(backbone, size), cfg.start, cfg.features)
    results = []
    items = split_specs(cfg.task, "--task") if cfg.task else split_specs(cfg.data or "embedded:digits", "--data")
    for item in items:
        if cfg.task and not looks_like_data(item):  # a registered task; your own data given as --task is --data
            train, test, _ = open_full_splits(get_task(item), cfg.data_dir)
            preprocess = Preprocess(image_size=size, squash=True, **normal)
        else:
            options = DataOptions(label_key=cfg.label_key or None, image_key=cfg.image_key or None, image_size=size)
            train, test = open_labelled(item, "eval fewshot", options)
            preprocess = Preprocess(image_size=size, eval_crop_pct=given["crop_pct"],
                                    eval_resize=given["eval_resize"], **normal)
        if cfg.preprocess == "big_vision":  # one geometry for every dataset, as big_vision's evaluator has
            preprocess = Preprocess(image_size=size, eval_resize="big_vision", **normal)
        result = evaluate_sources(model, train, test, preprocess, cfg.shots, range(cfg.seeds), cfg.reg,
                                  cfg.test_samples, workers=default_workers(), device=process_device())
        results.append({"from": cfg.start, "data": item, "image_size": size, "features": model.kind,
                        "input": {**normal, "crop_pct": preprocess.eval_crop_pct, "eval_resize": preprocess.eval_resize,
                                  "squash": preprocess.squash, "from": given["source"]}, **result})
        if each is not None:
            each(results[-1])
    return results


__all__ = ["evaluate_fewshot"]

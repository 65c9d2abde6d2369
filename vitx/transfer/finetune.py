"""One transfer run through the runner: the starting backbone, adapted to the task, trained on one split.

`prepare` does the per-task work once (load the start, decode the small splits into memory); `train_run` is
one point of the protocol (a sweep point or the final run) and can resume from its own checkpoints.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from rich.console import Console

from ..adapters import AdaptContext, Adapter, resolve_adapters, trainable_parameters
from ..backbones.droppath import configure as configure_drop_path, describe as describe_drop_path
from ..backbones.pooling import set_pooling
from ..console import say
from ..data import Preprocess, TensorSplit, decode_split
from ..errors import VitxError
from ..objectives.supervised import Supervised
from ..runner.config import PretrainConfig, default_workers
from ..settings import shared_values
from ..runner.launch import make_accelerator, process_device
from ..runner.loop import Trainer
from ..runner.setup import assemble
from ..runner.threads import describe as describe_threads
from ..runs.rundir import RunDir
from ..tasks import Task, TaskSplits, open_task
from ..tasks.splits import task_class_names
from .config import TransferConfig
from ..evaluation import feature_name
from ..evaluation.features import extract_features, source_features
from ..evaluation.least_squares import fit_least_squares
from ..runs.start import load_start, representation, start_features, start_input


@dataclass
class Prepared:
    """A task's splits and starting point, made once and shared by every run of its protocol."""

    task: Task
    splits: TaskSplits
    start: nn.Module  # the starting backbone at its own resolution; each run adapts a copy
    adapters: list[Adapter]
    preprocess: Preprocess
    train: TensorSplit  # trainN, in memory
    val: TensorSplit  # valN, in memory
    test: Any  # an ImageSource, streamed (test splits can be large)
    input_from: str = ""  # where the mean, std and interpolation came from (the start, or the flags)
    head_options: dict[str, float] = field(default_factory=dict)  # the classifier's loss: smoothing, mixup, cutmix
    drop_path: float = 0.0  # stochastic depth set on each run's copy of the start
    drop_path_mode: str = "mask"  # how it drops a branch (backbones/droppath.py)

    @property
    def train_val(self) -> TensorSplit:
        """trainN ∪ valN in memory; for the VTAB-1k folder release, its own train800val200 list, in its order."""
        both = TensorSplit(torch.cat([self.train.images, self.val.images]),
                           torch.cat([self.train.labels, self.val.labels]), self.train.num_classes)
        listed = self.splits.release_train_val
        if listed is None:
            return both
        decoded = {p: i for i, p in enumerate(self.splits.train.base.paths + self.splits.val.base.paths)}
        order = [decoded.get(p) for p in listed.paths]
        if None in order:  # the list names images outside train800 and val200: decode it as it is
            return decode_split(listed, self.preprocess)
        return both.subset(order)

    @property
    def method(self) -> Adapter:
        return self.adapters[-1]


def prepare(cfg: TransferConfig, task: Task, splits: TaskSplits | None = None) -> Prepared:
    splits = splits or open_task(task, cfg.shots, cfg.data_dir, seed=cfg.seed, test_samples=cfg.test_samples)
    start = load_start(cfg.start, cfg.model, cfg.seed, use_ema=cfg.use_ema)
    read = start_features(cfg.start) if cfg.features == "auto" else feature_name(cfg.features)
    if read in ("cls-token", "patch-mean"):  # what the head reads (auto, pre-logits: the start's own pooling)
        set_pooling(start, read)
    size = cfg.image_size or int(start.patch_embed.img_size[0])
    adapters = resolve_adapters(cfg.adapters)
    given = start_input(cfg.start, start)  # the start decides the input; --mean/--std/--interpolation override
    # VTAB preprocessing: the whole image resized to a square (see data/memory.py), decoded once; with --augment
    # each training step crops, flips and augments those squares, seeded per sample as pre-training does
    normal, input_from = cfg.input_for(given)
    preprocess = Preprocess(image_size=size, **normal, squash=True, augment=cfg.augment, crop_scale=cfg.crop_scale,
                            hflip=cfg.hflip, randaugment=cfg.randaugment, random_erasing=cfg.random_erasing)
    workers = default_workers() if cfg.workers < 0 else cfg.workers
    train, val = (decode_split(split, preprocess, workers=workers) for split in (splits.train, splits.val))
    head_options = {k: getattr(cfg, k) for k in ("label_smoothing", "mixup", "cutmix") if getattr(cfg, k)}
    return Prepared(task, splits, start, adapters, preprocess, train, val, splits.test, input_from, head_options,
                    cfg.drop_path, cfg.drop_path_mode)


def adapted_model(start: nn.Module, num_classes: int, image_size: int, adapters: list[Adapter],
                  head_options: dict[str, float] | None = None, drop_path: float = 0.0,
                  drop_path_mode: str = "mask") -> Supervised:
    """A copy of `start`, as a classifier with `num_classes` classes at `image_size`, with every adapter applied
    in role order."""
    model = Supervised(copy.deepcopy(start), num_classes, head="linear", **(head_options or {}))
    configure_drop_path(model.backbone, drop_path, drop_path_mode)
    ctx = AdaptContext(image_size=image_size, num_classes=num_classes)
    for adapter in adapters:
        adapter.apply(model, ctx)
    if not adapters[-1].closed_form and trainable_parameters(model) == 0:
        raise VitxError(f"after the adapters {', '.join(a.name for a in adapters)} nothing is left to train")
    return model


def build_model(prep: Prepared) -> Supervised:
    """The task's model: a copy of its start with its classes and every adapter applied."""
    return adapted_model(prep.start, prep.task.num_classes, prep.preprocess.image_size, prep.adapters,
                         prep.head_options, prep.drop_path, prep.drop_path_mode)


def model_summary(prep: Prepared, micro: int) -> tuple[dict[str, int], str | None]:
    """Trainable and total parameters of the task's model (adapters applied, head included): what a PEFT table
    reports beside accuracy; and its stochastic depth's header line (`droppath.describe`, a forward of `micro`
    images), from one build of it."""
    model = build_model(prep)
    counts = {"trainable": trainable_parameters(model), "total": sum(p.numel() for p in model.parameters())}
    return counts, describe_drop_path(model.backbone, micro)


def run_config(cfg: TransferConfig, prep: Prepared, lr: float, steps: int, out_dir: Path, eval_samples: int,
               curves: bool = False) -> PretrainConfig:
    """The runner's config for one transfer run (the paper's fine-tuning recipe by default). Its start (`--from`),
    image size and seed are the transfer's (their group's), its `model` the start's architecture and its `data`
    where the task's images came from; the task is in config.json's `transfer` record. `curves`: draw the run's curves.png (the final run; sweep points are
    summed up in sweep.png, and `vitx plot` overlays them)."""
    record = getattr(prep.start, "vitx_record", None) or {}
    own = dict(  # what a transfer run sets itself; every setting of the groups both configs compose comes as given
        objective=f"supervised({', '.join(f'{k}={v!r}' for k, v in {'head': 'linear', **prep.head_options}.items())})",
        model=str(record.get("name") or cfg.model or cfg.start), data=prep.splits.origin, steps=steps, lr=lr,
        warmup_steps=int(round(cfg.warmup * steps)), schedule="cosine", output_dir=str(out_dir),
        save_every=min(cfg.save_every, steps), keep_checkpoints=1, log_every=min(cfg.log_every, steps),
        eval_samples=eval_samples, curves=curves, watch_every=0,  # (supervised fine-tuning: no collapse to watch)
        tracker_run=f"{prep.task.name} {out_dir.name}",
        tracker_group=f"{Path(cfg.output_dir).name}/{prep.task.name}")
    return PretrainConfig(**{**shared_values(cfg, PretrainConfig), **own}).validate()


@dataclass
class Fitted:
    """A finished transfer run: its last metrics (with validation when it had a validation split), whether this
    process is the one that writes files, and its trainer, to evaluate the fitted model on other data."""

    metrics: dict[str, float]
    main: bool
    trainer: Trainer

    def validated(self) -> dict[str, float]:
        """The last metrics with validation: evaluated now when the last logged step had none (a resumed run
        that was already complete)."""
        return self.metrics if "val_top1" in self.metrics else {**self.metrics, **self.trainer.evaluate()}


def train_run(cfg: TransferConfig, prep: Prepared, lr: float, steps: int, out_dir: Path, train: TensorSplit,
              val: TensorSplit | None, console: Console, label: str, record: dict[str, Any],
              curves: bool = False, say_threads: bool = False) -> Fitted:
    """Fine-tune a fresh copy on `train` for `steps` at `lr` (resuming `out_dir`'s checkpoint if there is one).
    `curves`: draw curves.png; `say_threads`: say the threads it computes with first (a process's first run)."""
    run_cfg = run_config(cfg, prep, lr, steps, out_dir, len(val) if val is not None else 0, curves)
    accelerator = make_accelerator(run_cfg)
    model = build_model(prep)
    data_info = {"spec": prep.task.name, "num_classes": prep.task.num_classes,
                 "class_names": task_class_names(prep.splits), "train_size": len(train), "origin": prep.splits.origin,
                 **({"splits": prep.splits.record} if prep.splits.record is not None else {})}
    latest = RunDir(out_dir).latest()
    setup = assemble(run_cfg, accelerator, model, prep.preprocess, train, val, data_info, resume_from=latest,
                     record={"transfer": record})
    trainer = Trainer(setup, console, label=label)
    if say_threads and accelerator.is_main_process:
        say(console, describe_threads(setup.record["threads"]))
    metrics: dict[str, float] = {"step": setup.start_step}
    if setup.start_step < steps:
        metrics = trainer.fit()
    elif accelerator.is_main_process:
        setup.run.repair()  # the top-level files a kill may have left at an older step
    return Fitted(metrics, accelerator.is_main_process, trainer)


@torch.no_grad()
def closed_form(prep: Prepared, start: str, use_ema: bool = False) -> dict[str, Any]:
    """Few-shot linear evaluation on the task: least squares on trainN ∪ valN pre-logits (`start`'s tanh
    representation layer when it has one), accuracy on test (the --test-samples draw: `open_task`)."""
    device = process_device()
    features = representation(build_model(prep).backbone, start, use_ema=use_ema).to(device)
    data = prep.train_val
    feats = extract_features(features, data.images, device=device, normalise=prep.preprocess.normalise)
    head = fit_least_squares(feats, data.labels.numpy(), prep.task.num_classes, prep.method.reg)
    feats, labels = source_features(features, prep.test, prep.preprocess, len(prep.test), default_workers(), device)
    return {"test_top1": float((head.predict(feats) == labels).mean()) if len(labels) else 0.0,
            "test_samples": float(len(labels)), "features": features.kind}


__all__ = ["Fitted", "Prepared", "adapted_model", "build_model", "closed_form", "model_summary", "prepare", "run_config", "train_run"]

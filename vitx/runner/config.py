"""Run configuration as data: one dataclass, saved in config.json, compared on --resume."""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable

from ..errors import VitxError

CHOICES = {
    "optimizer": ("adamw", "adam", "sgd"),
    "schedule": ("cosine", "linear"),
    "precision": ("no", "bf16", "fp16"),
    "monitor_features": ("pre-logits", "backbone", "patch-mean"),  # evaluation.representation.FEATURES (torch-free here)
    "log_format": ("auto", "bar", "lines", "json"),  # runner.reporting.LOG_FORMATS (torch-free here)
}

# Sizes far above any real run: a slip of the keyboard (1000000 for 1000) is refused in one line instead of
# allocating for minutes. Seeds are what numpy's generators take.
LIMITS = {"batch_size": 65_536, "grad_accum": 65_536, "image_size": 4_096, "eval_samples": 10_000_000,
          "test_samples": 10_000_000, "workers": 256, "shuffle_buffer": 1_000_000, "seed": 2 ** 32 - 1}
# The least value of a setting, and what the refusal says: shared by every run's settings (pretrain, transfer).
FLOORS = {"seed": (0, "must not be negative"),
          "workers": (-1, "must be -1 (the default: as many as the cores allow) or more")}


def flag(name: str) -> str:
    """The command-line option of a config field."""
    return "--" + name.replace("_", "-")


def check_numbers(values: dict[str, Any], name_of: Callable[[str], str] = flag,
                  limits: dict[str, int] = LIMITS) -> None:
    """Every float finite (nan passes every `<= 0` check after it), every size within `limits` and above its
    floor (`FLOORS`), else one line naming the setting. `values`: setting name → value (a list of floats is
    checked item by item)."""
    for name, value in values.items():
        items = value if isinstance(value, list) else [value]
        if any(isinstance(v, float) and not math.isfinite(v) for v in items):
            what = "finite numbers" if isinstance(value, list) else "a finite number"
            raise VitxError(f"{name_of(name)} must be {what}, got {value}")
        floor, says = FLOORS.get(name, (None, ""))
        if floor is not None and isinstance(value, int) and value < floor:
            raise VitxError(f"{name_of(name)} {says}, got {value}")
        limit = limits.get(name)
        if limit is not None and isinstance(value, int) and value > limit:
            raise VitxError(f"{name_of(name)} {value} is too large: at most {limit:,}, far above any real run "
                            "(a typo?)")


def default_workers() -> int:
    """Loader workers per process: the cores this process may use (its CPU affinity, e.g. a SLURM or container
    allotment), shared among the machine's local processes, less one for the process itself; at least 1. A GPU
    step needs few host cycles, so decoding gets nearly all of them; training on the CPU keeps the cores for
    compute (at most 4 workers). `--workers` overrides."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 2
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    spare = max(1, cores // local - 1)
    import torch  # here, not at import: the CLI reads this module to print --help

    return spare if torch.cuda.is_available() else min(4, spare)


@dataclass
class PretrainConfig:
    """Defaults run the embedded CPU demo (vit-nano/4, 16px shapes, ~2 minutes on 2 cores; about 36% validation
    top-1 against 10% chance). The paper's B/16 settings are in recipes/."""

    objective: str = "supervised"
    model: str = "vit-nano/4"
    data: str = "embedded:shapes"
    image_size: int | None = None  # None: the backbone's default (16 or 32 for the CPU variants, 224 for the paper's)
    batch_size: int = 128  # global: per optimiser step, over all processes and accumulation steps
    steps: int = 1200
    lr: float = 2e-3
    warmup_steps: int = 100
    schedule: str = "cosine"
    optimizer: str = "adamw"
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    precision: str = "no"
    grad_accum: int = 1
    output_dir: str = "runs/pretrain"
    seed: int = 0
    save_every: int = 400
    keep_checkpoints: int = 2
    log_every: int = 10
    log_format: str = "auto"  # progress: auto (a bar on a terminal, a plain line per --log-every otherwise), bar, lines, json
    quiet: bool = False  # print nothing but errors
    eval_samples: int = 1024
    workers: int = -1  # -1: default_workers()
    skip_corrupt: bool = False
    grad_checkpointing: bool = False
    crop_scale: float = 0.8
    hflip: bool = True  # random horizontal flips; off for data whose mirror image is another class (digits, text)
    randaugment: str = ""  # a timm RandAugment policy, e.g. "rand-m9-mstd0.5-inc1" (small-data supervised training)
    random_erasing: float = 0.0  # probability of timm's RandomErasing per training image
    log_with: str = "auto"  # auto: tensorboard when installed; none; or any Accelerate tracker name
    max_nonfinite_steps: int = 10  # consecutive optimiser steps skipped for a non-finite loss/gradient before stopping
    save_every_minutes: float = 0.0  # also checkpoint when this much time has passed since the last save; 0: off
    stop_signals: str = "TERM,USR1"  # checkpoint at the next step and exit 75 on these; "" leaves them alone
    compile: bool = False  # torch.compile the training forward and backward (objectives keep their graphs whole)
    tf32: bool = True  # GPUs with TF32 (Ampere and later): float32 matmuls and convolutions in TF32
    monitor: str = ""  # a labelled data spec: few-shot and kNN accuracy of the features during the run (monitor.py)
    monitor_every: int = 0  # also monitor every N steps; 0: at checkpoints only
    monitor_features: str = "pre-logits"  # what the monitor reads: pre-logits (the paper's), backbone or patch-mean
    stream: bool = False  # read a hub dataset (or a local copy of one) as a stream; tar shards always stream
    label_key: str = ""  # the label's column (or `json.<field>`); "": found as data/columns.py says
    image_key: str = ""  # the image's column; "": the first image column
    shuffle_buffer: int = 5000  # streams: a seeded shuffle buffer of this many encoded images per process; 0: in order
    curves: bool = True  # draw curves.png from metrics.jsonl at each checkpoint (the run's and the checkpoint's)

    def validate(self) -> "PretrainConfig":
        check_numbers(self.to_dict())
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise VitxError(f"--{name.replace('_', '-')} must be one of {', '.join(allowed)}, "
                                f"got '{getattr(self, name)}'")
        positive = ("batch_size", "steps", "grad_accum", "save_every", "log_every", "keep_checkpoints",
                    "max_nonfinite_steps")
        for name in positive:
            if getattr(self, name) <= 0:
                raise VitxError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.image_size is not None and self.image_size <= 0:
            raise VitxError(f"--image-size must be positive, got {self.image_size}")
        if self.eval_samples < 0:
            raise VitxError(f"--eval-samples must not be negative (0 disables), got {self.eval_samples}")
        if self.lr <= 0:
            raise VitxError(f"--lr must be positive, got {self.lr}")
        if self.warmup_steps < 0 or self.weight_decay < 0 or self.grad_clip < 0:
            raise VitxError("--warmup-steps, --weight-decay and --grad-clip must not be negative")
        if self.save_every_minutes < 0:
            raise VitxError(f"--save-every-minutes must not be negative, got {self.save_every_minutes}")
        from .preemption import parse_signals

        parse_signals(self.stop_signals)
        if self.monitor_every < 0:
            raise VitxError(f"--monitor-every must not be negative, got {self.monitor_every}")
        if self.shuffle_buffer < 0:
            raise VitxError(f"--shuffle-buffer must not be negative, got {self.shuffle_buffer}")
        if not 0 <= self.random_erasing <= 1:
            raise VitxError(f"--random-erasing must be in [0, 1], got {self.random_erasing}")
        if self.randaugment:
            from ..data.transforms import rand_augment_policy

            rand_augment_policy(self.randaugment, 32, (0.5, 0.5, 0.5))  # a bad policy fails here, in one line
        if not 0 < self.crop_scale <= 1:
            raise VitxError(f"--crop-scale must be in (0, 1], got {self.crop_scale}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PretrainConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


# Options that may differ between a run and its resumption without changing the result.
RESUME_FREE = {"output_dir", "workers", "log_with", "log_every", "log_format", "quiet", "save_every",
               "keep_checkpoints", "eval_samples", "max_nonfinite_steps", "save_every_minutes", "stop_signals", "monitor",
               "monitor_every", "monitor_features", "curves"}


def merge_for_resume(saved: PretrainConfig, explicit: dict[str, Any]) -> PretrainConfig:
    """The saved run's config, with the explicitly given options that may change; others must match."""
    clash = [f"--{k.replace('_', '-')} {v!r} (run has {getattr(saved, k)!r})"
             for k, v in explicit.items() if k not in RESUME_FREE and getattr(saved, k) != v]
    if clash:
        raise VitxError("cannot resume with different settings: " + "; ".join(clash))
    merged = saved.to_dict()
    merged.update({k: v for k, v in explicit.items() if k in RESUME_FREE})
    return PretrainConfig.from_dict(merged)

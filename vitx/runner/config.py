"""Run configuration as data: one dataclass, saved in config.json, compared on --resume."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from typing import Any

from ..errors import VitxError
from ..evaluation import AUTO, FEATURES, PROBES
from ..evaluation.config import USE_EMA
from ..settings import CHECKPOINTS, DATA, EVALUATION, MODEL, OPTIMISATION, OUTPUT, SCHEDULE, SYSTEM, check, setting
from ..settings import defaults, result_settings
from .preemption import parse_signals

# adamw, adam and sgd are built by vitx (runner/optim.py); the others by timm's optimizer factory
OPTIMIZERS = ("adamw", "adam", "sgd", "lamb", "lars", "lion", "nadamw", "adopt", "adan", "rmsprop", "adafactor")
CHOICES = {
    "optimizer": OPTIMIZERS,
    "schedule": ("cosine", "linear"),
    "precision": ("no", "bf16", "fp16"),
    "monitor_features": (AUTO, *FEATURES),
    "monitor_probes": PROBES,
    "log_format": ("auto", "bar", "lines", "json"),  # how progress is shown (runner/reporting.py)
}

# Sizes far above any real run: a slip of the keyboard (1000000 for 1000) is refused in one line instead of
# allocating for minutes. Seeds are what numpy's generators take.
LIMITS = {"batch_size": 65_536, "grad_accum": 65_536, "image_size": 4_096, "eval_samples": 10_000_000,
          "test_samples": 10_000_000, "workers": 256, "shuffle_buffer": 1_000_000, "seed": 2 ** 32 - 1}


# Settings that pre-training and transfer both take, declared once: each config calls `shared(name, default)`
# with its own default (the paper's pre-training and fine-tuning recipes differ).
SHARED = {
    "optimizer": dict(help="adamw, adam, sgd (momentum 0.9), or timm's lamb, lars, lion, nadamw, adopt, adan, rmsprop, adafactor.", group=OPTIMISATION, choices=OPTIMIZERS),
    "weight_decay": dict(help="Weight decay (not on biases, norms, position embeddings or the \\[class] token).", group=OPTIMISATION, min=0),
    "layer_decay": dict(help="Layer-wise lr decay: block i of L learns at lr · d^(L+1−i), the embeddings least, the head at lr (BEiT/MAE fine-tuning: 0.65–0.75); 1: off.", group=OPTIMISATION, above=0, max=1),
    "drop_path": dict(help="Stochastic depth: the last block drops its residual branches with this probability, block i at i/(L−1) of it.", group=OPTIMISATION, min=0, below=1),
    "ema_decay": dict(help="Keep a moving average of the weights (timm's ModelEmaV3) with this decay, warmed up as timm does; evaluated and monitored beside the live weights (ema_* metrics) and saved beside them (ema.safetensors); 0: off.", group=OPTIMISATION, min=0, below=1),
    "use_ema": USE_EMA,
    "log_with": dict(help="Accelerate tracker(s): auto (tensorboard if installed), none, tensorboard, wandb, mlflow, comet_ml, aim, clearml, dvclive; a transfer logs each sweep point and final run as its own run, grouped by task.", group=OUTPUT, result=False),
    "crop_scale": dict(help="Smallest random-crop area fraction.", group=DATA, above=0, max=1),
    "hflip": dict(help="Random horizontal flips of training images; off where a mirror image is another class (digits, text).", group=DATA),
    "randaugment": dict(help="timm augmentation policy for training images: rand-m9-mstd0.5-inc1 (RandAugment), original or v0 (AutoAugment), augmix-m5-w4-d2, or trivialaugment (TrivialAugment Wide).", group=DATA),
    "random_erasing": dict(help="Probability of timm's RandomErasing per training image.", group=DATA, min=0, max=1),
}


def shared(name: str, default: Any) -> Any:
    """The declaration of a setting both `vitx pretrain` and `vitx transfer` take, with this config's default."""
    return setting(default, **SHARED[name])


def check_policy(policy: str) -> None:
    """A bad --randaugment policy fails at once, in one line, not in a loader worker minutes later."""
    if policy:
        from ..data.transforms import augment_policy

        augment_policy(policy, 32, (0.5, 0.5, 0.5))


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
    top-1 against 10% chance). The paper's B/16 settings are in recipes/. Each field is one option of
    `vitx pretrain` (vitx/settings.py)."""

    objective: str = setting("supervised", "Objective, with options: 'supervised(label_smoothing=0.1)' (see `vitx objectives`).", MODEL)
    model: str = setting("vit-nano/4", "Backbone name (see `vitx models`) or timm:<name>.", MODEL)
    use_ema: bool = shared("use_ema", False)
    init: str = setting("", "Start from these weights instead of a new --model: a vitx run or checkpoint directory, a timm model folder, timm:<name> (its pretrained weights) or timm:hf-hub:REPO; the input is normalised as the start expects.", MODEL, shown="none: a new --model")
    image_size: int | None = setting(None, "Input resolution; a multiple of the patch size.", MODEL, above=0, limit=LIMITS["image_size"], shown="the model's")
    grad_checkpointing: bool = setting(False, "Trade compute for memory.", MODEL)
    data: str = setting("embedded:shapes", "embedded:leaves|shapes|digits; an image folder (class subfolders, or metadata.csv); a save_to_disk, parquet or VTAB-1k release folder; hf:owner/name; or WebDataset shards ('shards/train-{0000..0099}.tar', a folder of .tar, URLs).", DATA)
    label_key: str = setting("", "The column (or json.<field> of WebDataset shards) that holds the labels.", DATA, shown="a ClassLabel column, else label, labels, cls, class, fine_label, target, category or txt")
    image_key: str = setting("", "The column that holds the images.", DATA, shown="the first image column")
    stream: bool = setting(False, "Stream a hub dataset (or a local copy of one) instead of downloading it whole; tar shards always stream.", DATA)
    shuffle_buffer: int = setting(5000, "Streams: shuffle through a seeded buffer of this many encoded images per process; 0: read in order.", DATA, min=0, limit=LIMITS["shuffle_buffer"])
    crop_scale: float = shared("crop_scale", 0.8)
    hflip: bool = shared("hflip", True)
    randaugment: str = shared("randaugment", "")
    random_erasing: float = shared("random_erasing", 0.0)
    skip_corrupt: bool = setting(False, "Skip (and count) undecodable images instead of stopping.", DATA)
    workers: int = setting(-1, "Loader worker processes per process.", DATA, min=-1, limit=LIMITS["workers"], says="must be -1 (the default: as many as the cores allow) or more", shown="the cores available / local processes - 1; at most 4 when training on the CPU", result=False)
    batch_size: int = setting(128, "Global batch per optimiser step, over all processes and accumulation steps.", OPTIMISATION, above=0, limit=LIMITS["batch_size"])
    grad_accum: int = setting(1, "Gradient accumulation steps (memory).", OPTIMISATION, above=0, limit=LIMITS["grad_accum"])
    optimizer: str = shared("optimizer", "adamw")
    lr: float = setting(2e-3, "Peak learning rate.", OPTIMISATION, above=0)
    weight_decay: float = shared("weight_decay", 0.1)
    layer_decay: float = shared("layer_decay", 1.0)
    drop_path: float = shared("drop_path", 0.0)
    ema_decay: float = shared("ema_decay", 0.0)
    grad_clip: float = setting(1.0, "Global gradient-norm clip; 0 disables.", OPTIMISATION, min=0)
    precision: str = setting("no", "Mixed precision: no, bf16 or fp16 (GPU).", OPTIMISATION, choices=CHOICES["precision"])
    max_nonfinite_steps: int = setting(10, "Steps with a non-finite loss or gradient are skipped; stop after this many in a row.", OPTIMISATION, above=0, result=False)
    steps: int = setting(1200, "Optimiser steps.", SCHEDULE, above=0)
    warmup_steps: int = setting(100, "Linear warm-up steps.", SCHEDULE, min=0)
    schedule: str = setting("cosine", "Decay after warm-up: cosine or linear.", SCHEDULE, choices=CHOICES["schedule"])
    seed: int = setting(0, "Seed of the initialisation, the data order and every random draw.", SCHEDULE, min=0, limit=LIMITS["seed"])
    eval_samples: int = setting(1024, "Validation images evaluated at each checkpoint; 0 disables.", EVALUATION, min=0, limit=LIMITS["eval_samples"], result=False)
    monitor: str = setting("", "Labelled data, one or several comma-separated (e.g. embedded:digits,embedded:shapes): log few-shot linear and kNN accuracy of the features at each checkpoint.", EVALUATION, result=False)
    monitor_every: int = setting(0, "Also run the --monitor every N steps; 0: at checkpoints only.", EVALUATION, min=0, result=False)
    monitor_probes: list[str] = setting(["fewshot", "knn"], "What the --monitor runs: fewshot (closed-form 1- and 10-shot heads), knn (weighted 20-NN, DINO's), linear (a linear probe, lr chosen on a held-out fifth: `vitx eval linear`'s, 30 epochs).", EVALUATION, choices=CHOICES["monitor_probes"], result=False)
    monitor_features: str = setting(AUTO, "What the --monitor reads: auto (what the objective trains: patch-mean for MPP and MAE, pre-logits otherwise), pre-logits (the paper's few-shot features), backbone (\\[class] token) or patch-mean (the mean patch token).", EVALUATION, choices=CHOICES["monitor_features"], result=False)
    output_dir: str = setting("runs/pretrain", "Run directory.", CHECKPOINTS, result=False)
    save_every: int = setting(400, "Checkpoint every N steps (and at the end).", CHECKPOINTS, above=0, result=False)
    save_every_minutes: float = setting(0.0, "Also checkpoint when this many minutes have passed since the last save; 0: off.", CHECKPOINTS, min=0, result=False)
    keep_checkpoints: int = setting(2, "How many checkpoints to keep.", CHECKPOINTS, above=0, result=False)
    stop_signals: str = setting("TERM,USR1", "On these signals, checkpoint at the next step and exit 75 (a second one exits at once); '' to leave them alone.", CHECKPOINTS, result=False)
    log_every: int = setting(10, "Log metrics every N steps.", OUTPUT, above=0, result=False)
    log_format: str = setting("auto", "Progress: auto (a bar on a terminal; a plain, flushed line every --log-every steps in a log file or pipe), bar, lines or json (a JSON object per line).", OUTPUT, choices=CHOICES["log_format"], result=False)
    log_with: str = shared("log_with", "auto")
    tracker_run: str = setting("", "The tracker's name for this run (a transfer names each point and groups them).", OUTPUT, cli=False, result=False)
    tracker_group: str = setting("", "The tracker's group of runs.", OUTPUT, cli=False, result=False)
    quiet: bool = setting(False, "Print nothing but errors (metrics.jsonl is written as always).", OUTPUT, result=False)
    curves: bool = setting(True, "At each checkpoint, draw curves.png (loss, accuracy, monitor, learning rate) from metrics.jsonl.", OUTPUT, result=False)
    compile: bool = setting(False, "torch.compile the training step's forward and backward (minutes of compilation first; pays off on long GPU runs).", SYSTEM)
    tf32: bool = setting(True, "On GPUs that have it, float32 matmuls in TF32 (10-bit mantissa, ~8x the float32 rate).", SYSTEM)

    def validate(self) -> "PretrainConfig":
        check(self)  # every bound and choice, as declared
        if self.use_ema and not self.init:
            raise VitxError("--use-ema reads the moving average of the weights that --init saved; give --init")
        parse_signals(self.stop_signals)
        check_policy(self.randaugment)
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PretrainConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


# Options that may differ between a run and its resumption without changing the result (declared `result=False`).
RESUME_FREE = set(defaults(PretrainConfig)) - set(result_settings(PretrainConfig))


def merge_for_resume(saved: PretrainConfig, explicit: dict[str, Any]) -> PretrainConfig:
    """The saved run's config, with the explicitly given options that may change; others must match."""
    clash = [f"--{k.replace('_', '-')} {v!r} (run has {getattr(saved, k)!r})"
             for k, v in explicit.items() if k not in RESUME_FREE and getattr(saved, k) != v]
    if clash:
        raise VitxError("cannot resume with different settings: " + "; ".join(clash))
    return PretrainConfig.from_dict({**saved.to_dict(), **{k: v for k, v in explicit.items() if k in RESUME_FREE}})

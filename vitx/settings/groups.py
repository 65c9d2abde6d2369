"""The settings more than one command takes, declared once, in groups a reader recognises. A command's config
composes the groups it uses and adds only its own fields:

    PretrainConfig(Weights, Columns, Augmentation, Optimisation, Output, System)    runner/config.py
    TransferConfig(Weights, Columns, Input, Augmentation, Optimisation, Output, System)    transfer/config.py
    FrozenConfig(Weights, Columns, Input)    evaluation/config.py (every vitx eval NAME: vitx/evaluators/)

A setting added to a group is an option of every command that composes it: in its --help, validated, taken by
--set and recipes, recorded in config.json. Where recipes differ (pre-training's AdamW, fine-tuning's SGD) a
config gives the group's setting its own default with `with_default`; the declaration stays here. A transfer
hands the runner every setting of the groups both configs compose (`shared_values`). Torch-free.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import DATA, MODEL, OPTIMISATION, OUTPUT, SYSTEM, setting

INTERPOLATIONS = ("bicubic", "bilinear", "nearest")  # how images are resized (data/transforms.py)
# adamw, adam and sgd are built by vitx (runner/optim.py); the others by timm's optimizer factory
OPTIMIZERS = ("adamw", "adam", "sgd", "lamb", "lars", "lion", "nadamw", "adopt", "adan", "rmsprop", "adafactor")
PRECISIONS = ("no", "bf16", "fp16")
LOG_FORMATS = ("auto", "bar", "lines", "json")  # how progress is shown (runner/reporting.py)
# Sizes far above any real run: a slip of the keyboard (1000000 for 1000) is refused in one line instead of
# allocating for minutes. Seeds are what numpy's generators take.
LIMITS = {"batch_size": 65_536, "grad_accum": 65_536, "image_size": 4_096, "eval_samples": 10_000_000,
          "test_samples": 10_000_000, "workers": 256, "shuffle_buffer": 1_000_000, "seed": 2 ** 32 - 1,
          "weight_decay": 10}  # (real ones are 0-1; at lr · weight decay > 2 each AdamW update flips and grows the weights)


@dataclass
class Weights:
    """Which of a start's saved weights are read."""

    is_group = True
    use_ema: bool = setting(False, "Read the start's moving average of the weights (ema.safetensors, saved by a run with --ema-decay) instead of its live weights.", MODEL)


@dataclass
class Columns:
    """Where a labelled dataset keeps its images and labels."""

    is_group = True
    label_key: str = setting("", "The column (or json.<field> of WebDataset shards) that holds the labels.", DATA, shown="a ClassLabel column, else label, labels, cls, class, fine_label, target, category or txt")
    image_key: str = setting("", "The column that holds the images.", DATA, shown="the first image column")


@dataclass
class Input:
    """How a start's images are prepared: its normalisation and resampling unless given, and where a registered
    task's local copy is."""

    is_group = True
    data_dir: str | None = setting(None, "A local copy of the task's data: the VTAB-1k folder release, the hub's WebDataset layout, or save_to_disk; for a suite, their root.", DATA)
    mean: list[float] | None = setting(None, "Input normalisation mean, per RGB channel, e.g. 0.485,0.456,0.406.", DATA, shown="the start's: timm's pretrained_cfg, a vitx run's preprocessing, 0.5 for scratch", example="0.5,0.5,0.5", length=3)
    std: list[float] | None = setting(None, "Input normalisation std, per RGB channel.", DATA, above=0, shown="the start's", example="0.5,0.5,0.5", length=3)
    interpolation: str | None = setting(None, "Resize interpolation: bicubic, bilinear or nearest.", DATA, choices=INTERPOLATIONS, shown="the start's")


@dataclass
class Augmentation:
    """Random changes to training images (timm's transforms, seeded per sample)."""

    is_group = True
    crop_scale: float = setting(0.8, "Smallest random-crop area fraction.", DATA, above=0, max=1)
    hflip: bool = setting(True, "Random horizontal flips of training images; off where a mirror image is another class (digits, text).", DATA)
    randaugment: str = setting("", "timm augmentation policy for training images: rand-m9-mstd0.5-inc1 (RandAugment), original or v0 (AutoAugment), augmix-m5-w4-d2, or trivialaugment (TrivialAugment Wide).", DATA)
    random_erasing: float = setting(0.0, "Probability of timm's RandomErasing per training image.", DATA, min=0, max=1)


@dataclass
class Optimisation:
    """What each optimiser step does: the batch, the optimiser and what regularises it."""

    is_group = True
    batch_size: int = setting(128, "Global batch per optimiser step, over all processes and accumulation steps.", OPTIMISATION, above=0, limit=LIMITS["batch_size"])
    grad_accum: int = setting(1, "Split each batch into this many accumulated micro-batches (memory; the random draws follow the micro-batches, so it is part of the result).", OPTIMISATION, above=0, limit=LIMITS["grad_accum"])
    optimizer: str = setting("adamw", "adamw, adam, sgd (momentum 0.9), or timm's lamb, lars, lion, nadamw, adopt, adan, rmsprop, adafactor.", OPTIMISATION, choices=OPTIMIZERS)
    weight_decay: float = setting(0.1, "Weight decay (never on biases and norms; not on position embeddings or the \\[class] token unless pre-training's --decay-tokens).", OPTIMISATION, min=0, limit=LIMITS["weight_decay"])
    weight_decay_end: float | None = setting(None, "Weight decay at the end of the run: from --weight-decay along a half cosine over the steps, as DINO, iBOT and DINOv2 schedule it (0.04 → 0.4); a function of the step, so a resumed run follows it exactly.", OPTIMISATION, min=0, limit=LIMITS["weight_decay"], shown="--weight-decay throughout")
    layer_decay: float = setting(1.0, "Layer-wise lr decay: block i of L learns at lr · d^(L+1−i), the embeddings least, the head at lr (BEiT/MAE fine-tuning: 0.65–0.75); 1: off.", OPTIMISATION, above=0, max=1)
    drop_path: float = setting(0.0, "Stochastic depth: the last block drops its residual branches with this probability, block i at i/(L−1) of it.", OPTIMISATION, min=0, below=1)
    ema_decay: float = setting(0.0, "Keep a moving average of the weights (timm's ModelEmaV3) with this decay, warmed up as timm does; evaluated and monitored beside the live weights (ema_* metrics) and saved beside them (ema.safetensors); 0: off.", OPTIMISATION, min=0, below=1)
    grad_clip: float = setting(1.0, "Gradient-norm clip, of all gradients together (pre-training's --grad-clip-mode per-parameter: of each parameter's); 0 disables.", OPTIMISATION, min=0, says="must not be negative (0 disables)")
    precision: str = setting("no", "Mixed precision: no, bf16 or fp16 (GPU).", OPTIMISATION, choices=PRECISIONS)


@dataclass
class Output:
    """What a run shows and where it reports, none of which changes what it computes."""

    is_group = True
    log_every: int = setting(10, "Log metrics every N steps.", OUTPUT, above=0, affects_result=False)
    log_format: str = setting("auto", "Progress: auto (a bar on a terminal; a plain, flushed line every --log-every steps in a log file or pipe), bar, lines or json (one JSON object per line on stdout; the lines for people go to stderr).", OUTPUT, choices=LOG_FORMATS, affects_result=False)
    log_with: str = setting("auto", "Accelerate tracker(s): auto (tensorboard if installed), none, or tensorboard, wandb, mlflow, comet_ml, aim, clearml, dvclive, several comma-separated; one named that is not installed is refused before the run starts. A transfer logs each sweep point and final run as its own run, grouped by task.", OUTPUT, affects_result=False)
    quiet: bool = setting(False, "Print nothing but errors (metrics.jsonl and results are written as always).", OUTPUT, affects_result=False)
    curves: bool = setting(True, "Draw curves.png (loss, accuracy, monitor, learning rate) at each checkpoint; a transfer also draws sweep.png (validation top-1 per lr × steps).", OUTPUT, affects_result=False)


@dataclass
class System:
    """How the machine runs it."""

    is_group = True
    workers: int = setting(-1, "Loader worker processes per process.", DATA, min=-1, limit=LIMITS["workers"], says="must be -1 (the default: as many as the cores allow) or more", shown="the cores available / local processes - 1; at most 4 when training on the CPU", affects_result=False)
    compile: bool = setting(False, "torch.compile the training step's forward and backward (minutes of compilation first; pays off on long GPU runs).", SYSTEM)
    tf32: bool = setting(True, "On GPUs that have it, float32 matmuls in TF32 (10-bit mantissa, ~8x the float32 rate).", SYSTEM)


__all__ = ["INTERPOLATIONS", "LIMITS", "LOG_FORMATS", "OPTIMIZERS", "PRECISIONS", "Augmentation", "Columns", "Input",
           "Optimisation", "Output", "System", "Weights"]

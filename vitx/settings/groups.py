"""The settings more than one command takes, declared once, in groups a reader recognises. A command's config
composes the groups it uses and adds only its own fields:

    PretrainConfig(Seeded, Start, Columns, Streaming, Augmentation, Optimisation, Output, System)    runner/config.py
    TransferConfig(Seeded, Start, Columns, Input, Streaming, TestDraw, Augmentation, Optimisation, Output, System)
                                                                                          transfer/config.py
    FrozenConfig(Seeded, Start, Columns, Input, TestDraw)    evaluation/config.py (every vitx eval NAME:
        vitx/evaluators/; knn and linear add TrainDraw, fewshot and knn Readout: evaluation/config.py)

(--help lists a panel's group settings in the reverse order of the bases: Start's before Seeded's.)

A setting added to a group is an option of every command that composes it: in its --help, validated, taken by
--set and recipes, recorded in config.json. Where recipes differ (pre-training's AdamW, fine-tuning's SGD) a
config gives the group's setting its own default with `with_default`; the declaration stays here. A group's rule
that reaches past one setting's bounds is its `check_group`, which `settings.check` runs for every config that
composes it. A transfer hands the runner every setting of the groups both configs compose (`shared_values`).
Torch-free.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..errors import VitxError
from . import DATA, EVALUATION, MODEL, OPTIMISATION, OUTPUT, SYSTEM, setting

INTERPOLATIONS = ("bicubic", "bilinear", "nearest")  # how images are resized (data/transforms.py)
# adamw, adam and sgd are built by vitx (runner/optim.py); the others by timm's optimizer factory
OPTIMIZERS = ("adamw", "adam", "sgd", "lamb", "lars", "lion", "nadamw", "adopt", "adan", "rmsprop", "adafactor")
PRECISIONS = ("no", "bf16", "fp16")
DROP_PATH_MODES = ("mask", "skip")  # how stochastic depth drops a branch (backbones/droppath.py)
LOG_FORMATS = ("auto", "bar", "lines", "json")  # how progress is shown (runner/reporting.py)
# Sizes far above any real run: a slip of the keyboard (1000000 for 1000) is refused in one line instead of
# allocating for minutes. Seeds are what numpy's generators take.
LIMITS = {"batch_size": 65_536, "grad_accum": 65_536, "image_size": 4_096, "eval_samples": 10_000_000,
          "test_samples": 10_000_000, "train_samples": 100_000_000, "workers": 256, "shuffle_buffer": 1_000_000, "seed": 2 ** 32 - 1,
          "weight_decay": 10, "lr": 1_000, "steps": 10 ** 9}  # (real ones are 0-1; at lr · weight decay > 2 each AdamW update flips and grows the weights)


SCRATCH = "scratch"  # --from scratch: a new --model, initialised from --seed (runs/start.py)


def new_model(start: str) -> bool:
    """Whether --from names no weights: scratch, or "" (pre-training's runs recorded before --from was its name,
    whose `init` "" was a new --model)."""
    return start in ("", SCRATCH)


@dataclass
class Start:
    """Where a command's weights start, and which of them it reads: `vitx pretrain` continues pre-training from
    them, `vitx transfer` fine-tunes them, `vitx eval` reads their features."""

    is_group = True
    start: str = setting("runs/pretrain", "The weights to start from: a vitx run or checkpoint folder, a timm model folder (config.json and model.safetensors, as timm's save_for_hf writes it), timm:<name> (its pretrained weights), timm:hf-hub:REPO, or scratch (a new --model, initialised from --seed); the input is normalised as the start expects. Pre-training continues from it part by part (the objective's own parts from a run of the same objective: MAE's decoder, DINO's head, teacher and centre, the moving average under --ema-decay; a classifier nothing uses is dropped; the header says where each came from) and also reads a .safetensors file of released ViT weights (DINO's checkpoint layout or a bare backbone; a .pth is never unpickled). Pre-training's former name for it, --init, still works.", MODEL, flag="--from", formerly="--init")
    model: str | None = setting(None, "The backbone of a new model, for --from scratch: a name (see `vitx models`) or timm:<name> (timm's architecture, randomly initialised); any other start brings its own.", MODEL)
    image_size: int | None = setting(None, "Input resolution, a multiple of the patch size; a start of another resolution has its position embeddings interpolated.", MODEL, above=0, limit=LIMITS["image_size"], shown="the start's")
    use_ema: bool = setting(False, "Read the start's moving average of the weights (ema.safetensors, saved by a run with --ema-decay) instead of its live weights.", MODEL)

    def check_group(self) -> None:
        """--use-ema needs a start that has weights to average."""
        if self.use_ema and new_model(self.start):
            raise VitxError(f"--use-ema reads the moving average of a --from run's weights; --from "
                            f"{self.start or SCRATCH} has none: give --from RUN, or drop --use-ema")


@dataclass
class Seeded:
    """The seed of what a command draws at random."""

    is_group = True
    seed: int = setting(0, "Seed of every random draw: a new model's initialisation (--from scratch), the order and augmentation of the training images, and which images a draw takes (the test images of --test-samples, the train images of --train-samples and of a transfer's --shots of your data, those the collapse watch reads; few-shot evaluation's shots are drawn with --draws' seeds 0..N-1 instead).", MODEL, min=0, limit=LIMITS["seed"])


@dataclass
class Columns:
    """Where a labelled dataset keeps its images and labels."""

    is_group = True
    label_key: str = setting("", "The column (or json.<field> of WebDataset shards) that holds the labels.", DATA, shown="a ClassLabel column, else label, labels, cls, class, fine_label, target, category or txt")
    image_key: str = setting("", "The column that holds the images.", DATA, shown="the first image column")


@dataclass
class Normalisation:
    """The input's normalisation: the start's unless given."""

    is_group = True
    mean: list[float] | None = setting(None, "Input normalisation mean, per RGB channel, e.g. 0.485,0.456,0.406 (ImageNet's, which DINO, MAE and DeiT train with).", DATA, shown="the start's: timm's pretrained_cfg, a vitx run's preprocessing, a released DINO checkpoint's, 0.5 for scratch", example="0.5,0.5,0.5", length=3)
    std: list[float] | None = setting(None, "Input normalisation std, per RGB channel, e.g. 0.229,0.224,0.225.", DATA, above=0, shown="the start's", example="0.5,0.5,0.5", length=3)

    def mean_std(self, start: dict[str, Any]) -> dict[str, tuple[float, ...]]:
        """The input's mean and std: each as given, else the start's (`start` may hold neither: a scratch
        start's are then Preprocess's own)."""
        chosen = {k: getattr(self, k) if getattr(self, k) is not None else start.get(k) for k in ("mean", "std")}
        return {k: tuple(v) for k, v in chosen.items() if v is not None}


@dataclass
class Input(Normalisation):
    """How a start's images are prepared: its normalisation and resampling unless given, and where a registered
    task's local copy is."""

    is_group = True
    data_dir: str | None = setting(None, "A local copy of the task's data: the VTAB-1k folder release, the hub's WebDataset layout, or save_to_disk; for a suite, their root.", DATA)
    interpolation: str | None = setting(None, "Resize interpolation: bicubic, bilinear or nearest.", DATA, choices=INTERPOLATIONS, shown="the start's")

    def input_for(self, start: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """The input's mean, std and interpolation (each as given, else the start's `start_input`) and where they
        came from: the flags when any is given, else the start's source."""
        chosen = {**self.mean_std(start), "interpolation": self.interpolation or start["interpolation"]}
        given = self.mean or self.std or self.interpolation
        return chosen, "--mean/--std/--interpolation" if given else start["source"]


@dataclass
class Streaming:
    """Whether the data is read as a stream."""

    is_group = True
    stream: bool = setting(False, "Read the data as a stream (a hub dataset, hf:NAME, or a local copy of one; parquet) instead of downloading or caching it whole; tar shards always stream. A transfer draws your data's shots as the stream is read.", DATA)


@dataclass
class TestDraw:
    """Which test images are evaluated: the same rule, and the same images for one --seed, in every command."""

    is_group = True
    test_samples: int = setting(0, "Evaluate on N test images, a seeded, class-stratified draw (--seed): the same images in `vitx eval` and `vitx transfer`; 0: the whole test split.", EVALUATION, min=0, limit=LIMITS["test_samples"])


@dataclass
class TrainDraw:
    """Which train images a frozen-feature evaluation reads."""

    is_group = True
    train_samples: int = setting(0, "Train images read (those that vote in kNN, those the linear probe trains and validates on): a seeded, class-balanced draw (--seed); 0: all.", EVALUATION, min=0, limit=LIMITS["train_samples"])


@lru_cache(maxsize=8)
def augment_policy(policy: str, size: int, mean: tuple[float, ...]) -> Any:  # one per policy in each worker
    """The PIL transform of a timm policy string, as timm's `create_transform(auto_augment=...)` picks it:
    rand-* RandAugment, augmix-* AugMix, original/v0/3a[-mstdX] AutoAugment; trivialaugment is torchvision's
    TrivialAugmentWide. The loader's workers build it per sample (data/transforms.py); the group's check builds it
    once, so a bad policy fails at once in one line. timm and torchvision are imported here, when it is built."""
    from timm.data.auto_augment import augment_and_mix_transform, auto_augment_transform, rand_augment_transform

    bad = VitxError(f"randaugment '{policy}' is not a timm augmentation policy (e.g. rand-m9-mstd0.5-inc1, "
                    "original, v0, augmix-m5-w4-d2 or trivialaugment)")
    if policy == "trivialaugment":
        from torchvision.transforms import TrivialAugmentWide

        return TrivialAugmentWide()
    parts = policy.split("-")
    if parts[0] == "rand" and any(not p.startswith("t") and not re.fullmatch(r"[a-z]+\d[\d.]*", p) for p in parts[1:]):
        raise bad
    # magnitude_max just under timm's 10: at 10, an "inc1" policy posterizes to 0 bits, which Pillow ≥ 12 refuses
    # (a worker crash a few hundred steps in); a policy's own "mmax" still wins
    hparams = {"translate_const": int(size * 0.45), "img_mean": tuple(round(255 * m) for m in mean),
               "magnitude_max": 9.99}
    build = {"rand": rand_augment_transform, "augmix": augment_and_mix_transform}.get(parts[0])
    if build is None and parts[0] not in ("original", "originalr", "v0", "v0r", "3a"):
        raise bad
    try:
        return (build or auto_augment_transform)(policy, hparams)
    except (AssertionError, KeyError, ValueError, IndexError):
        raise bad from None


@dataclass
class Augmentation:
    """Random changes to training images (timm's transforms, seeded per sample)."""

    is_group = True
    crop_scale: float = setting(0.8, "Smallest random-crop area fraction.", DATA, above=0, max=1)
    hflip: bool = setting(True, "Random horizontal flips of training images; off where a mirror image is another class (digits, text).", DATA)
    randaugment: str = setting("", "timm augmentation policy for training images: rand-m9-mstd0.5-inc1 (RandAugment), original or v0 (AutoAugment), augmix-m5-w4-d2, or trivialaugment (TrivialAugment Wide).", DATA)
    random_erasing: float = setting(0.0, "Probability of timm's RandomErasing per training image.", DATA, min=0, max=1)

    def check_group(self) -> None:
        """A bad --randaugment policy fails at once, in one line, not in a loader worker minutes later."""
        if self.randaugment:
            augment_policy(self.randaugment, 32, (0.5, 0.5, 0.5))


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
    drop_path_mode: str = setting("mask", "How stochastic depth drops a branch: mask (timm's DropPath, as DINO, MAE and DeiT train: every sample's branch computed, a dropped one zeroed) or skip (DINOv2's Block: on blocks above rate 0.1 only a random max(⌊B(1−p)⌋, 1) of the samples compute the branch, scaled by B/that, so the dropped ones cost nothing; exactly that many kept; unpacked forwards only).", OPTIMISATION, choices=DROP_PATH_MODES)
    ema_decay: float = setting(0.0, "Keep a moving average of the weights (timm's ModelEmaV3) with this decay, warmed up as timm does; evaluated and monitored beside the live weights (ema_* metrics) and saved beside them (ema.safetensors); 0: off.", OPTIMISATION, min=0, below=1)
    grad_clip: float = setting(1.0, "Gradient-norm clip, of all gradients together (pre-training's --grad-clip-mode per-parameter: of each parameter's); 0 disables.", OPTIMISATION, min=0, says="must not be negative (0 disables)")
    precision: str = setting("no", "Mixed precision: no, bf16 or fp16 (GPU).", OPTIMISATION, choices=PRECISIONS)


# The trackers --log-with offers (Accelerate's): the modules each needs (any one of them) and what installs it
TRACKERS: dict[str, tuple[tuple[str, ...], str]] = {
    "tensorboard": (("tensorboard", "tensorboardX"), "tensorboard"),
    "wandb": (("wandb",), "wandb"),
    "mlflow": (("mlflow",), "mlflow"),
    "comet_ml": (("comet_ml",), "comet_ml"),
    "aim": (("aim",), '"aim<4"'),  # Accelerate's tracker takes aim 3 only
    "clearml": (("clearml",), "clearml"),
    "dvclive": (("dvclive",), "dvclive"),
}


def trackers(log_with: str) -> list[str]:
    """The trackers `--log-with` names: auto is tensorboard where it is installed (else none), none is none, else
    a comma-separated list of TRACKERS' names; another name is refused in one line."""
    if log_with == "auto":
        import importlib.util

        return ["tensorboard"] if any(importlib.util.find_spec(m) for m in TRACKERS["tensorboard"][0]) else []
    names = [] if log_with == "none" else [n.strip() for n in log_with.split(",") if n.strip()]
    if log_with != "none" and (not names or any(n not in TRACKERS for n in names)):
        raise VitxError(f"--log-with must be auto, none or one or more of {', '.join(TRACKERS)}, got '{log_with}'")
    return list(dict.fromkeys(names))


def check_trackers(log_with: str) -> None:
    """Every tracker named can start: its package imports and Accelerate takes it. Else one line naming what to
    install, before the run begins: Accelerate alone warns and trains without the tracker the user asked for."""
    import importlib

    for name in trackers(log_with) if log_with != "auto" else []:
        modules, package = TRACKERS[name]
        failed: list[ImportError] = []
        for module in modules:
            try:
                importlib.import_module(module)
                break
            except ImportError as exc:
                failed.append(exc)
        else:
            if all(isinstance(e, ModuleNotFoundError) and e.name == m for e, m in zip(failed, modules)):
                raise VitxError(f"--log-with {name}: {modules[0]} is not installed here; pip install {package} "
                                "(or choose another tracker, or --log-with none)")
            raise VitxError(f"--log-with {name}: {modules[0]} is installed but does not import ({failed[0]}); "
                            f"pip install -U {package}")
        from accelerate.utils import imports

        if not getattr(imports, f"is_{name}_available")():
            raise VitxError(f"--log-with {name}: Accelerate cannot use the {modules[0]} installed here; "
                            f"pip install {package}")


@dataclass
class Output:
    """What a run shows and where it reports, none of which changes what it computes."""

    is_group = True
    log_every: int = setting(10, "Log metrics every N steps.", OUTPUT, above=0, affects_result=False)
    log_format: str = setting("auto", "Progress: auto (a bar on a terminal; a plain, flushed line every --log-every steps in a log file or pipe), bar, lines or json (one JSON object per line on stdout; the lines for people go to stderr).", OUTPUT, choices=LOG_FORMATS, affects_result=False)
    log_with: str = setting("auto", "Accelerate tracker(s): auto (tensorboard if installed), none, or tensorboard, wandb, mlflow, comet_ml, aim, clearml, dvclive, several comma-separated; one named that is not installed is refused before the run starts. A transfer logs each sweep point and final run as its own run, grouped by task.", OUTPUT, affects_result=False)
    quiet: bool = setting(False, "Print nothing but errors (metrics.jsonl and results are written as always).", OUTPUT, affects_result=False)
    curves: bool = setting(True, "Draw curves.png (loss, accuracy, monitor, learning rate) at each checkpoint; a transfer also draws sweep.png (validation top-1 per lr × steps).", OUTPUT, affects_result=False)

    def check_group(self) -> None:
        """Every tracker --log-with names can start, before the run begins."""
        check_trackers(self.log_with)


@dataclass
class System:
    """How the machine runs it."""

    is_group = True
    workers: int = setting(-1, "Loader worker processes per process.", DATA, min=-1, limit=LIMITS["workers"], says="must be -1 (the default: as many as the cores allow) or more", shown="the cores available / local processes - 1; at most 4 when training on the CPU", affects_result=False)
    threads: int = setting(0, "Torch threads a process computes with; 0: its share of the granted cores less one per busy loader worker (OMP_NUM_THREADS when that is set). A compute-heavy step beside a mostly idle loader worker can take every core: the CPU DINO recipe's step runs about 1.2x faster on 2 threads than on the rule's 1 on 2 cores (recipes/cpu/pretrain-dino.toml). The thread count can change float rounding, as the rule's count does from machine to machine: it is recorded (config.json: threads), and a resumed run or a suite's other processes may use another.", SYSTEM, min=0, limit=LIMITS["workers"], affects_result=False)
    compile: bool = setting(False, "torch.compile the training step's forward and backward (minutes of compilation first; pays off on long GPU runs).", SYSTEM)
    tf32: bool = setting(True, "On GPUs that have it, float32 matmuls in TF32 (10-bit mantissa, ~8x the float32 rate).", SYSTEM)


__all__ = ["DROP_PATH_MODES", "INTERPOLATIONS", "LIMITS", "LOG_FORMATS", "OPTIMIZERS", "PRECISIONS", "SCRATCH", "Augmentation", "Columns",
           "Input", "Normalisation", "Optimisation", "Output", "Seeded", "Start", "Streaming", "System", "TestDraw",
           "TrainDraw", "new_model"]

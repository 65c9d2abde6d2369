"""Transfer configuration as data: the paper's VTAB-1k protocol by default."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..data import INTERPOLATIONS
from ..errors import VitxError
from ..runner.config import CHOICES, LIMITS, check_policy, shared
from ..settings import CHECKPOINTS, DATA, EVALUATION, MODEL, OPTIMISATION, OUTPUT, PROTOCOL, SCHEDULE, SYSTEM
from ..settings import check, result_settings as declared_result_settings, setting

SELECT = ("auto", "suite", "task")  # auto: suite for more than one task (protocol.py)

# --protocol: presets of settings, filled in where the command line, --set and the recipe leave a setting unset.
# vtab: the ViT paper's (the config's own defaults). peft: what the parameter-efficient transfer papers on
# VTAB-1k share, after NOAH (Zhang et al. 2022, github.com/ZhangYuanhan-AI/NOAH, configs/VTAB) and followed by
# SSF, FacT, SPT and SNELL: AdamW, lr 1e-3, weight decay 1e-4, batch 64, 100 epochs of the 1000 training images
# (steps = 100 · shots / batch) with 10 of warm-up, cosine decay, no gradient clipping, no augmentation or
# smoothing, images resized whole; one point (no sweep), trained on train800val200 and tested.
PROTOCOLS: dict[str, dict[str, Any]] = {
    "vtab": {},
    "peft": {"optimizer": "adamw", "lr": 1e-3, "weight_decay": 1e-4, "batch_size": 64, "warmup": 0.1,
             "grad_clip": 0.0, "sweep": False, "augment": False, "label_smoothing": 0.0, "epochs": 100},
}


def with_protocol(chosen: dict[str, Any]) -> dict[str, Any]:
    """The explicitly chosen settings completed by their --protocol's preset (explicit ones win); the preset's
    `epochs` become --steps for the chosen shots and batch."""
    preset = dict(PROTOCOLS.get(chosen.get("protocol", "vtab"), {}))
    epochs = preset.pop("epochs", None)
    out = {**preset, **chosen}
    if epochs is not None and "steps" not in chosen:
        shots = out.get("shots", TransferConfig.shots)
        out["steps"] = max(1, round(epochs * shots / out["batch_size"]))
    return out


@dataclass
class TransferConfig:
    """Defaults are the paper's fine-tuning recipe (Appendix B.1.1) and VTAB-1k protocol: SGD momentum 0.9, no
    weight decay, no augmentation, global-norm clip 1, cosine decay after a linear warm-up, batch 512; sweep lr × steps on
    train800 → val200, choose one point for the whole suite on the mean val200 (`select`), retrain it on all 1000,
    report test accuracy. Each field is one option of `vitx transfer` (vitx/settings.py)."""

    protocol: str = setting("vtab", "Preset of the settings not given: vtab (the ViT paper's VTAB-1k recipe, the defaults below) or peft (the parameter-efficient transfer papers': AdamW lr 1e-3, weight decay 1e-4, batch 64, 100 epochs, 10% warm-up, no sweep; see transfer/config.PROTOCOLS). In Python: TransferConfig(**with_protocol(settings)).", PROTOCOL, choices=tuple(PROTOCOLS))
    start: str = setting("runs/pretrain", "A vitx run or checkpoint directory, a timm model folder (config.json + model.safetensors), timm:<name>, timm:hf-hub:REPO, or scratch.", MODEL, flag="--from")
    use_ema: bool = shared("use_ema", False)
    features: str = setting("auto", "What the task head reads: auto (what the start's objective trains: the mean patch token after MPP or MAE, the \\[class] token otherwise), backbone (the \\[class] token after the final norm) or patch-mean (the mean patch token: MAE's fine-tuning and linear probe).", MODEL, choices=("auto", "backbone", "patch-mean"))
    model: str | None = setting(None, "Backbone for --from scratch (see `vitx models`).", MODEL)
    adapters: list[str] = setting([], "Adapter with options, repeatable, e.g. linear-probe or 'resize-posemb(mode=\"bilinear\")' (see `vitx adapters`); unnamed roles take the defaults.", MODEL, flag="--adapter", repeat=True, shown="resize-posemb, zero-head, finetune")
    image_size: int | None = setting(None, "Fine-tuning resolution; position embeddings are interpolated.", MODEL, above=0, limit=LIMITS["image_size"], shown="the start's")
    task: str = setting("vtab/dsprites_loc", "Task (see `vitx tasks`), several comma-separated, vtab/all, vtab/natural|specialized|structured, a pattern like 'vtab/dsprites_*', or your labelled data: an image folder, save_to_disk/parquet folder, hf:owner/name or WebDataset shards.", DATA, result=False)
    data_dir: str | None = setting(None, "A local copy of the task's data: the VTAB-1k folder release, the hub's WebDataset layout, or save_to_disk; for a suite, their root.", DATA)
    label_key: str = setting("", "Your data's label column (or json.<field> of WebDataset shards).", DATA, shown="a ClassLabel column, else label, labels, cls, class, fine_label, target, category or txt")
    image_key: str = setting("", "Your data's image column.", DATA, shown="the first image column")
    stream: bool = setting(False, "Your data (hf:NAME, parquet, shards) read as a stream: the shots are drawn as it is read, nothing is downloaded or cached whole.", DATA)
    mean: list[float] | None = setting(None, "Input normalisation mean, per RGB channel, e.g. 0.485,0.456,0.406.", DATA, shown="the start's: timm's pretrained_cfg, a vitx run's preprocessing, 0.5 for scratch", example="0.5,0.5,0.5", length=3)
    std: list[float] | None = setting(None, "Input normalisation std, per RGB channel.", DATA, above=0, shown="the start's", example="0.5,0.5,0.5", length=3)
    interpolation: str | None = setting(None, "Resize interpolation: bicubic, bilinear or nearest.", DATA, choices=INTERPOLATIONS, shown="the start's")
    workers: int = setting(-1, "Data worker processes; -1: cores - 1, at most 4.", DATA, min=-1, limit=LIMITS["workers"], says="must be -1 (the default: as many as the cores allow) or more", result=False)
    shots: int = setting(1000, "Training images: 4/5 train, 1/5 validation (VTAB-1k: 1000 = 800 + 200); from your data, a seeded, class-balanced draw.", PROTOCOL, above=0)
    sweep: bool = setting(True, "Sweep lr × steps on train → val and retrain the chosen point; --no-sweep: --lr and --steps (the paper's 0.01, 2500).", PROTOCOL)
    select: str = setting("auto", "How the swept point is chosen: suite (one lr × steps for every task, the best mean val top-1 over the suite: the ViT paper's VTAB protocol) or task (each task its own best: optimistic, not comparable with the paper).", PROTOCOL, choices=SELECT, shown="suite for several tasks")
    lrs: list[float] = setting([0.001, 0.003, 0.01, 0.03], "Sweep learning rates.", PROTOCOL, above=0)
    sweep_steps: list[int] = setting([500, 2500], "Sweep step counts.", PROTOCOL, above=0)
    lr: float = setting(0.01, "Learning rate with --no-sweep.", PROTOCOL, above=0)
    steps: int = setting(2500, "Steps with --no-sweep.", PROTOCOL, above=0)
    seed: int = setting(0, "Seed of the runs (and of the draw of your data's shots).", PROTOCOL, min=0, limit=LIMITS["seed"])
    seeds: list[int] = setting([], "Repeat each task's final run with these seeds, e.g. 0,1,2: results are mean ± s.d. (the sweep and the data's draw use --seed).", PROTOCOL, min=0, shown="--seed alone", example="0,1,2")
    skip_missing: bool = setting(False, "In a suite, skip tasks whose data is unavailable.", PROTOCOL, result=False)
    allow_synthetic: bool = setting(False, "Count VTAB tasks read from vitx's synthetic regeneration (the embedded dSprites) in group and suite means; by default they are listed but left out.", PROTOCOL, result=False)
    augment: bool = setting(False, "Augment training images: a random resized crop (--crop-scale), --hflip and --randaugment; off: the VTAB-1k protocol's resize alone.", DATA)
    crop_scale: float = shared("crop_scale", 0.08)
    hflip: bool = shared("hflip", True)
    randaugment: str = shared("randaugment", "")
    random_erasing: float = shared("random_erasing", 0.0)
    mixup: float = setting(0.0, "Mixup's Beta α on training batches (timm's Mixup; MAE fine-tuning: 0.8); 0: off.", DATA, min=0)
    cutmix: float = setting(0.0, "CutMix's Beta α (MAE fine-tuning: 1.0); 0: off.", DATA, min=0)
    label_smoothing: float = setting(0.0, "Label smoothing of the cross-entropy (MAE fine-tuning: 0.1).", DATA, min=0, below=1)
    optimizer: str = shared("optimizer", "sgd")
    weight_decay: float = shared("weight_decay", 0.0)
    layer_decay: float = shared("layer_decay", 1.0)
    drop_path: float = shared("drop_path", 0.0)
    ema_decay: float = shared("ema_decay", 0.0)
    batch_size: int = setting(512, "Global batch per step.", OPTIMISATION, above=0, limit=LIMITS["batch_size"])
    grad_accum: int = setting(1, "Split each batch into this many accumulated micro-batches (memory).", OPTIMISATION, above=0, limit=LIMITS["grad_accum"], result=False)
    warmup: float = setting(0.1, "Warm-up, as a fraction of each run's steps.", SCHEDULE, min=0, below=1, says="is a fraction of the steps in [0, 1)")
    grad_clip: float = setting(1.0, "Global gradient-norm clip; 0 disables.", OPTIMISATION, min=0, says="must not be negative (0 disables)")
    precision: str = setting("no", "no, bf16 or fp16 (GPU).", OPTIMISATION, choices=CHOICES["precision"])
    test_samples: int = setting(0, "Evaluate on N test images (a registered task's first N; your data's, a seeded sample); 0: all.", EVALUATION, min=0, limit=LIMITS["test_samples"])
    compare: list[str] = setting([], "Print published VTAB-1k results beside the run's, e.g. vit-b16-i21k-full,vit-l16-i21k (vitx/tasks/published.py); a timm start with published rows for the same method gets them unasked.", EVALUATION, shown="none", result=False)
    output_dir: str = setting("runs/transfer", "Results, per-task runs and the final models.", CHECKPOINTS, result=False)
    save_every: int = setting(500, "Checkpoint each run every N steps (for --resume).", CHECKPOINTS, above=0, result=False)
    log_every: int = setting(25, "Log each run's metrics every N steps.", OUTPUT, above=0, result=False)
    log_with: str = shared("log_with", "none")
    log_format: str = setting("auto", "Progress of each run: auto (a bar on a terminal; a plain, flushed line per log step in a log file or pipe), bar, lines or json.", OUTPUT, choices=CHOICES["log_format"], result=False)
    quiet: bool = setting(False, "Print nothing but errors (results are written as always).", OUTPUT, result=False)
    curves: bool = setting(True, "Draw sweep.png (validation top-1 per lr × steps) and the final run's curves.png.", OUTPUT, result=False)
    compile: bool = setting(False, "torch.compile each run's training step.", SYSTEM, result=False)
    tf32: bool = setting(True, "On GPUs that have it, float32 matmuls in TF32.", SYSTEM, result=False)

    def validate(self) -> "TransferConfig":
        check(self)  # every bound and choice, as declared
        if not self.lrs:
            raise VitxError("--lrs is empty: give at least one learning rate to sweep, e.g. --lrs 0.01,0.03")
        if not self.sweep_steps:
            raise VitxError("--sweep-steps is empty: give at least one step count, e.g. --sweep-steps 500,2500")
        check_policy(self.randaugment)
        if self.randaugment and not self.augment:
            raise VitxError("--randaugment acts on augmented training images: add --augment")
        if len(set(self.seeds)) != len(self.seeds):
            raise VitxError(f"--seeds takes distinct non-negative whole numbers, e.g. --seeds 0,1,2; got {self.seeds}")
        from ..tasks.published import published

        for name in self.compare:
            published(name)
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def points(self) -> list[tuple[float, int]]:
        """The (lr, steps) grid to sweep, or the single fixed point."""
        if not self.sweep:
            return [(self.lr, self.steps)]
        return [(lr, steps) for steps in self.sweep_steps for lr in self.lrs]


# Settings that change a task's result (declared so): a resumed transfer must have the same ones.
RESULT_KEYS = tuple(declared_result_settings(TransferConfig))


def result_settings(cfg: TransferConfig) -> dict[str, Any]:
    return {k: getattr(cfg, k) for k in RESULT_KEYS}

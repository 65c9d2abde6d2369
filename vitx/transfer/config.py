"""Transfer configuration as data: the paper's VTAB-1k protocol by default."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..errors import VitxError
from ..runner.config import check_numbers

SELECT = ("auto", "suite", "task")  # auto: suite for more than one task (protocol.py)


@dataclass
class TransferConfig:
    """Defaults are the paper's fine-tuning recipe (Appendix B.1.1) and VTAB-1k protocol: SGD momentum 0.9, no
    weight decay, global-norm clip 1, cosine decay after a linear warm-up, batch 512; sweep lr × steps on
    train800 → val200, choose one point for the whole suite on the mean val200 (`select`), retrain it on all 1000,
    report test accuracy."""

    task: str = "vtab/dsprites_loc"
    start: str = "runs/pretrain"  # --from: a vitx run/checkpoint directory, timm:<name>, or scratch
    model: str | None = None  # the backbone for --from scratch
    adapters: list[str] = field(default_factory=list)  # --adapter; unnamed roles take the defaults
    shots: int = 1000
    image_size: int | None = None  # None: the starting backbone's resolution
    mean: list[float] | None = None  # None: the start's (timm's pretrained_cfg, a vitx run's preprocessing)
    std: list[float] | None = None  # None: the start's
    interpolation: str | None = None  # None: the start's (bicubic, bilinear or nearest)
    batch_size: int = 512
    grad_accum: int = 1
    sweep: bool = True
    select: str = "auto"  # suite: one (lr, steps) for all tasks, on their mean val (the paper's); task: per task
    lrs: list[float] = field(default_factory=lambda: [0.001, 0.003, 0.01, 0.03])
    sweep_steps: list[int] = field(default_factory=lambda: [500, 2500])
    lr: float = 0.01  # --no-sweep: the paper's choice for VTAB
    steps: int = 2500
    warmup: float = 0.1  # fraction of each run's steps spent warming up
    grad_clip: float = 1.0
    precision: str = "no"
    output_dir: str = "runs/transfer"
    data_dir: str | None = None
    label_key: str = ""  # --task PATH: the label's column (or json.<field>); "": found as data/columns.py says
    image_key: str = ""  # --task PATH: the image's column; "": the first image column
    stream: bool = False  # --task PATH|hf:NAME: read the data as a stream (the shots are drawn from it as it is read)
    seed: int = 0
    seeds: list[int] = field(default_factory=list)  # the final run once per seed (mean ± s.d.); []: just --seed
    test_samples: int = 0  # 0: the whole test split
    save_every: int = 500
    log_every: int = 25
    log_format: str = "auto"  # progress of each run: auto (a bar on a terminal, plain lines otherwise), bar, lines, json
    quiet: bool = False  # print nothing but errors
    workers: int = -1
    skip_missing: bool = False  # suites: skip tasks with no data available instead of stopping
    allow_synthetic: bool = False  # count VTAB tasks read from vitx's synthetic regeneration in the means
    compile: bool = False  # torch.compile each run's training step
    tf32: bool = True  # float32 matmuls in TF32 on GPUs that have it
    curves: bool = True  # figures: sweep.png (val top-1 per lr × steps) and the final run's curves.png
    compare: list[str] = field(default_factory=list)  # published VTAB-1k rows beside the results (tasks/published.py)

    def validate(self) -> "TransferConfig":
        check_numbers(self.to_dict())
        for name in ("shots", "batch_size", "grad_accum", "steps", "save_every", "log_every"):
            if getattr(self, name) <= 0:
                raise VitxError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.select not in SELECT:
            raise VitxError(f"--select must be one of {', '.join(SELECT)}, got '{self.select}'")
        if not self.lrs:
            raise VitxError("--lrs is empty: give at least one learning rate to sweep, e.g. --lrs 0.01,0.03")
        if not self.sweep_steps:
            raise VitxError("--sweep-steps is empty: give at least one step count, e.g. --sweep-steps 500,2500")
        if any(lr <= 0 for lr in self.lrs) or self.lr <= 0:
            raise VitxError("learning rates must be positive")
        if any(s <= 0 for s in self.sweep_steps):
            raise VitxError("--sweep-steps must be positive step counts")
        if self.grad_clip < 0:
            raise VitxError(f"--grad-clip must not be negative (0 disables), got {self.grad_clip}")
        if not 0 <= self.warmup < 1:
            raise VitxError(f"--warmup is a fraction of the steps in [0, 1), got {self.warmup}")
        if self.precision not in ("no", "bf16", "fp16"):
            raise VitxError(f"--precision must be one of no, bf16, fp16, got '{self.precision}'")
        if self.image_size is not None and self.image_size <= 0:
            raise VitxError(f"--image-size must be positive, got {self.image_size}")
        for name in ("mean", "std"):
            value = getattr(self, name)
            if value is not None and (len(value) != 3 or (name == "std" and min(value) <= 0)):
                kind = "positive numbers" if name == "std" else "numbers"
                raise VitxError(f"--{name} takes 3 {kind} (one per RGB channel), e.g. --{name} 0.5,0.5,0.5; got {value}")
        from ..data.transforms import INTERPOLATIONS

        if self.interpolation is not None and self.interpolation not in INTERPOLATIONS:
            raise VitxError(f"--interpolation must be one of {', '.join(INTERPOLATIONS)}, got '{self.interpolation}'")
        if len(set(self.seeds)) != len(self.seeds) or any(s < 0 for s in self.seeds):
            raise VitxError(f"--seeds takes distinct non-negative whole numbers, e.g. --seeds 0,1,2; got {self.seeds}")
        from ..tasks.published import published

        for name in self.compare:
            published(name)
        if self.test_samples < 0:
            raise VitxError("--test-samples must not be negative")
        from ..runner.config import CHOICES

        if self.log_format not in CHOICES["log_format"]:
            raise VitxError(f"--log-format must be one of {', '.join(CHOICES['log_format'])}, got '{self.log_format}'")
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def points(self) -> list[tuple[float, int]]:
        """The (lr, steps) grid to sweep, or the single fixed point."""
        if not self.sweep:
            return [(self.lr, self.steps)]
        return [(lr, steps) for steps in self.sweep_steps for lr in self.lrs]


# Settings that change a task's result: a resumed transfer must have the same ones.
RESULT_KEYS = ("start", "model", "adapters", "shots", "image_size", "mean", "std", "interpolation", "batch_size", "sweep", "select", "lrs", "sweep_steps",
               "lr", "steps", "warmup", "grad_clip", "precision", "data_dir", "label_key", "image_key", "stream", "seed", "seeds",
               "test_samples")


def result_settings(cfg: TransferConfig) -> dict[str, Any]:
    return {k: getattr(cfg, k) for k in RESULT_KEYS}


def from_dict(data: dict[str, Any]) -> TransferConfig:
    known = {f.name for f in fields(TransferConfig)}
    return TransferConfig(**{k: v for k, v in data.items() if k in known})

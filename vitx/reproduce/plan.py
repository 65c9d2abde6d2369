"""The small-scale reproduction as data: what is trained, on what, for how long.

`CPU` pre-trains every row with 3 seeds, two runs at a time on one thread each (the costliest first), and
transfers each pre-training with 3 seeds: on a fresh clone (2026-11-27, 2 cores) 91.8 minutes, the 15
pre-trainings 63 of them (DINO 17-19 minutes each, MPP 7-8, SimCLR 6-7, supervised and MAE 4-5), the 75 transfers
23 and the 64px fine-tuning 5, and every non-DINO pre-training and transfer the same to the digit as the plan's
run before it (recipes/reproduction/STUDY.md, "Fitting the plan to 100 minutes"); `GPU` is meant for about 10
minutes on one H100 (a 27× larger model on a 16×16 grid, more steps at twice the batch, an lr sweep, transfers
run side by side; trimmed to one pre-training seed and one lr it ran to its report in 8.8 minutes on an H200,
REPORT-GPU.md); `QUICK` is the
CPU plan with token budgets, for tests. Grids are at least 8×8 tokens: the smallest where masked patch
prediction has context to predict a patch from.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..errors import VitxError
from ..runner.config import CHOICES, LIMITS
from ..settings import DATA, EVALUATION, MODEL, OPTIMISATION, PROTOCOL, SCHEDULE, SYSTEM, check, setting


@dataclass(frozen=True)
class Pretraining:
    """One pre-training of the reproduction: an objective (with options) and its peak learning rate (None: the
    objective's reference recipe sets it, e.g. DINO's 5e-4 × batch / 256)."""

    objective: str
    lr: float | None
    plugin: str = ""  # the package that provides the objective; its rows are skipped (and said so) without it
    steps: int = 0  # 0: the plan's pretrain_steps
    # about how many MPP steps one of its steps costs on the plan's machine: the pre-trainings start costliest
    # first (steps × cost), so that the ones side by side end together (a cheap one last fills the gap)
    cost: float = 1.0
    # other `vitx pretrain` settings of this pre-training, over the objective's reference recipe (each a measured
    # deviation from it at this scale, said where it is set)
    settings: dict[str, Any] = field(default_factory=dict)

    def steps_in(self, plan: "Plan") -> int:
        return self.steps or plan.pretrain_steps


NAMES = ("supervised", "mpp", "mae", "simclr", "dino")  # the plans' pre-trainings

SETTING_DIGITS = (
    "The setting: pre-training reads the 1,437 training images of scikit-learn's handwritten digits "
    "(`embedded:digits`, real handwriting; only supervised pre-training reads their labels), and the low-data "
    "transfer fine-tunes on 50 of them with labels (40 to train, 10 to validate) and tests on the 360 held-out "
    "digits that no pre-training saw. This is the paper's question at a size a CPU can answer: does "
    "self-supervision on plentiful images help when labels are few? Supervised pre-training on all the labels "
    "of the same images is the in-domain reference (as JFT-300M's labels cover ImageNet's classes), so its "
    "lead over MPP is expected to be large. The transfer settings (50 shots; lr 0.1 × 200 steps in the CPU "
    "plan, which the GPU plan's sweep brackets) come from a study of this setting "
    "(recipes/reproduction/STUDY.md), chosen where training from scratch learns well above chance; the same "
    "settings serve every start.")


# DINO's optimisation where it learns on the 1,437 digits (the CPU plan's row, below): deviations from
# main_dino.py's recipe, each named, that the plans' DINO rows share
DINO_SMALL: dict[str, Any] = {"grad_clip": 1.0, "grad_clip_mode": "global", "weight_decay": 0.1,
                              "weight_decay_end": 0.1, "decay_tokens": False, "drop_path": 0.0,
                              "warmup_start": "first-step", "min_lr": 0.0}


@dataclass(frozen=True)
class Plan:
    """Set with `vitx reproduce --set key=value` (no options of their own: `cli=False`); checked as declared."""

    name: str = setting("cpu", "The plan's name.", MODEL, cli=False)
    model: str = setting("vit-nano/4", "The backbone every start shares.", MODEL, cli=False)
    image_size: int = setting(32, "Pre-training resolution: an 8×8 patch grid (one token per digit pixel).", MODEL, above=0, limit=LIMITS["image_size"], cli=False)
    hires: int = setting(64, "The higher fine-tuning resolution: 16×16, position embeddings interpolated.", MODEL, above=0, limit=LIMITS["image_size"], cli=False)
    data: str = setting("embedded:digits", "Pre-training images (labels used by supervised only).", DATA, cli=False)
    batch_size: int = setting(128, "Pre-training batch.", OPTIMISATION, above=0, limit=LIMITS["batch_size"], cli=False)
    pretrain_steps: int = setting(1500, "Pre-training steps (a pre-training may set its own).", SCHEDULE, above=0, limit=LIMITS["steps"], cli=False)
    precision: str = setting("no", "no, bf16 or fp16.", OPTIMISATION, choices=CHOICES["precision"], cli=False)
    pretrainings: dict[str, Pretraining] = field(default_factory=lambda: {
        # costs: minutes a step against MPP's, as the plan's second full run measured them (one thread each, two
        # side by side on 2 cores, 2026-11-27: MPP's 1,500 steps 7.6 minutes; STUDY.md)
        "supervised": Pretraining("supervised", 2e-3, steps=1000,  # in-domain labels: the reference, not the question
                                  cost=0.9),
        "mpp": Pretraining("mpp(corrupt_rate=0.5)", 3e-3),  # the paper's: 3-bit mean colour of 50% corrupted patches
        "mae": Pretraining("mae(decoder_dim=64,decoder_depth=1,decoder_heads=2)", 3e-3, plugin="vitx-mae",
                           cost=0.55),  # a quarter of the tokens through the encoder
        "simclr": Pretraining("simclr(temperature=0.2)", 2e-3, plugin="vitx-simclr", steps=750,
                              cost=1.65),  # 2 views: 2× a step
        # DINO with a head sized for 0.2M parameters, 2 global + 4 local crops and a teacher (about 3× a step),
        # 1,000 steps, trained as it was measured to learn here, not as main_dino.py: main_dino.py's recipe (lr
        # 5e-4 × batch / 256, each parameter clipped to 3.0, weight decay 0.04 → 0.4 on the tokens too, drop path
        # 0.1, warm-up from 0, min_lr 1e-6) with the data-fitted out_dim 1,024 and teacher temperature 0.02
        # collapsed at this size (RankMe 4.6 → 2.5, kNN 58% → 56%, transfer 37.7% against scratch's 45.8%), and
        # with the temperature 0.04 too (recipes/reproduction/DINO.md, "The reference recipe at CPU size"). So: lr
        # 5e-4, the global norm clipped to 1, weight decay 0.1 on matrices only, no drop path, warm-up from lr/W,
        # cosine to 0. Reverting the reference settings one at a time, none alone keeps it alive; with all four
        # reverted, out_dim and the teacher temperature are left to the data-fitted defaults (1,024 and 0.02 for
        # 1,437 images: lightly-train's rule), which did at least as well as the temperature 0.04 the plan ran
        # before (one pre-training: RankMe 15.2 against 9.9, transfer 64.2% ± 0.9 against 63.9% ± 1.1; DINO.md)
        "dino": Pretraining("dino(hidden_dim=256,bottleneck_dim=64,local_crops=4)", 5e-4, plugin="vitx-dino",
                            steps=1000, cost=3.6, settings=dict(DINO_SMALL)),
    })
    compute_points: list[float] = setting([1 / 3], "Fractions of a curve pre-training's steps whose checkpoints are also transferred.", SCHEDULE, above=0, below=1, says="are fractions of a pre-training's steps in (0, 1)", cli=False)
    curve: list[str] = setting(["mpp", "mae", "dino"], "Pre-trainings also transferred from their checkpoints at the compute points: transfer accuracy against pre-training compute, each objective against scratch.", SCHEDULE, choices=NAMES, distinct=True, cli=False)
    monitor: str = setting("embedded:digits", "The representation monitor during MPP pre-training.", EVALUATION, cli=False)
    monitor_features: str = setting("patch-mean", "What MPP trains (the patch tokens); its [class] token is never trained.", EVALUATION, choices=CHOICES["monitor_features"], cli=False)
    task: str = setting("embedded/digits", "Low-data transfer: held-out test digits.", PROTOCOL, cli=False)
    shots: int = setting(50, "Labelled images of the transfer.", PROTOCOL, above=0, cli=False)
    transfer_batch: int = setting(64, "Transfer batch.", PROTOCOL, above=0, limit=LIMITS["batch_size"], cli=False)
    transfer_lrs: list[float] = setting([0.1], "Transfer learning rates (one lr and one step count: no sweep).", PROTOCOL, above=0, limit=LIMITS["lr"], cli=False)
    transfer_steps: list[int] = setting([200], "Transfer step counts.", PROTOCOL, above=0, limit=LIMITS["steps"], cli=False)
    test_samples: int = setting(0, "Test images; 0: the task's whole test split.", EVALUATION, min=0, limit=LIMITS["test_samples"], cli=False)
    seeds: list[int] = setting([0, 1, 2], "Transfer seeds: every pre-training is transferred with each (the report's ± comes from the pre-training seeds; the transfer seeds give each pre-training's mean and the spread within it).", PROTOCOL, min=0, limit=LIMITS["seed"], cli=False, distinct=True)
    pretrain_seeds: list[int] = setting([0, 1, 2], "Pre-training seeds: every row is pre-trained once per seed (the initialisation, data order and every draw), and the report's ± is the spread between these pre-trainings (the s.e. of the mean of their per-pre-training means), not only between transfer seeds.", PROTOCOL, min=0, limit=LIMITS["seed"], cli=False, distinct=True)
    hires_seeds: int = setting(3, "The first N seeds are also fine-tuned at the higher resolution.", PROTOCOL, min=0, cli=False)
    attention_images: int = setting(128, "Images averaged in the attention-distance analysis.", EVALUATION, above=0, cli=False)
    jobs: int = setting(2, "Pre-trainings and transfers run at once, as separate processes with the cores shared out (one thread each on 2 cores: each run repeats bit for bit); one GPU holds several.", SYSTEM, above=0, limit=LIMITS["workers"], cli=False)
    setting: str = SETTING_DIGITS  # the report's paragraph on what is trained on what, and why

    @property
    def sweep(self) -> bool:
        return len(self.transfer_lrs) * len(self.transfer_steps) > 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def validate(self) -> "Plan":
        """One line for a setting that cannot run (a `--set` typo), before anything is trained."""
        check(self, named=lambda f: f"plan: {f.name}")  # every bound and choice, as declared
        for name in ("seeds", "pretrain_seeds", "transfer_lrs", "transfer_steps"):
            if not getattr(self, name):
                raise VitxError(f"plan: {name} must not be empty")
        unknown = [name for name in self.curve if name not in self.pretrainings]
        if unknown:
            raise VitxError(f"plan: curve names {unknown[0]}, which this plan does not pre-train (it pre-trains "
                            f"{', '.join(self.pretrainings)})")
        if not 0 <= self.hires_seeds <= len(self.seeds):
            raise VitxError(f"plan: hires_seeds must be 0 to {len(self.seeds)} (the seeds), got {self.hires_seeds}")
        return self

    def with_settings(self, changes: dict[str, Any]) -> "Plan":
        """The plan with `--set` changes (budgets, model, data); the pre-trainings and the setting text are the
        plan's own and cannot be set."""
        fixed = sorted(set(changes) & {"name", "pretrainings", "setting"})
        if fixed:
            raise VitxError(f"--set {fixed[0]} cannot be changed: it is the plan's own; pick another --plan")
        return replace(self, **changes).validate()


CPU = Plan()
GPU = replace(  # run once, trimmed (benchmarks/gpu_acceptance.py), on an H200: recipes/reproduction/REPORT-GPU.md
    CPU, name="gpu", model="vit-ti/4", image_size=64, hires=96, batch_size=256, pretrain_steps=4000,
    precision="bf16",
    pretrainings={
        "supervised": Pretraining("supervised", 1e-3, steps=2000),
        "mpp": Pretraining("mpp(corrupt_rate=0.5)", 1e-3),
        "mae": Pretraining("mae(decoder_dim=128,decoder_depth=2,decoder_heads=4)", 1.5e-3, plugin="vitx-mae"),
        "simclr": Pretraining("simclr(temperature=0.2)", 1e-3, plugin="vitx-simclr", steps=2000),
        # 2 global + 6 local crops and a teacher: a step costs about 3 of MPP's, so 500 steps fit the GPU
        # acceptance's reproduction budget (benchmarks/gpu_acceptance.py). Its first run (K 4,096, main_dino.py's
        # optimisation) collapsed (21.4%, REPORT-GPU.md); it now trains as the CPU row, which learns on the same
        # 1,437 digits: K and the teacher temperature fitted to them (1,024 and 0.02), DINO_SMALL's optimisation.
        # Its first GPU run so (H200, 2026-11-28) did not learn either: the teacher uniform by step 336, RankMe
        # 3.7 → 5.5, transfer 29.4% against scratch's 34.5% (REPORT-GPU.md); refitting it needs GPU minutes
        "dino": Pretraining("dino(hidden_dim=512,bottleneck_dim=128,local_crops=6)", 5e-4, plugin="vitx-dino",
                            steps=500, cost=3.0, settings=dict(DINO_SMALL)),
    },
    compute_points=[0.1, 0.3], transfer_lrs=[0.03, 0.1], transfer_steps=[300], seeds=list(range(8)),
    hires_seeds=4, jobs=8)
QUICK = replace(CPU, name="quick", pretrain_steps=6, shots=40, test_samples=64, seeds=[0], pretrain_seeds=[0], jobs=1, attention_images=8,
                batch_size=16, transfer_batch=16, transfer_steps=[4], compute_points=[0.5], hires=48, hires_seeds=1,
                pretrainings={k: replace(v, steps=0) for k, v in CPU.pretrainings.items()})
PLANS = {"cpu": CPU, "gpu": GPU, "quick": QUICK}

__all__ = ["CPU", "GPU", "PLANS", "QUICK", "Plan", "Pretraining"]

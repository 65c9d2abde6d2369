"""The small-scale reproduction as data: what is trained, on what, for how long.

`CPU` fits about 20 minutes on 2 cores; `GPU` about 10 minutes on one H100 (a 27× larger model, 5× the
pre-training steps at twice the batch, an lr sweep, transfers run side by side); `QUICK` is the CPU plan
with token budgets, for tests. Both real plans pre-train at 32px with patch 4: an 8×8 token grid, the smallest
where masked patch prediction has context to predict a patch from.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Pretraining:
    """One pre-training of the reproduction: an objective (with options) and its peak learning rate."""

    objective: str
    lr: float
    plugin: str = ""  # the package that provides the objective; its rows are skipped (and said so) without it


@dataclass(frozen=True)
class Plan:
    name: str = "cpu"
    model: str = "vit-nano/4"
    image_size: int = 32  # pre-training resolution: an 8×8 patch grid
    hires: int = 64  # the higher fine-tuning resolution: 16×16, position embeddings interpolated
    data: str = "embedded:shapes"  # pre-training images (labels used by supervised only)
    batch_size: int = 128
    pretrain_steps: int = 300
    precision: str = "no"
    pretrainings: dict[str, Pretraining] = field(default_factory=lambda: {
        "supervised": Pretraining("supervised", 2e-3),
        "mpp": Pretraining("mpp(corrupt_rate=0.5)", 3e-3),  # the paper's: 3-bit mean colour of 50% corrupted patches
        "mae": Pretraining("mae(decoder_dim=64,decoder_depth=1,decoder_heads=2)", 3e-3, plugin="vitx-mae"),
        "simclr": Pretraining("simclr(temperature=0.2)", 2e-3, plugin="vitx-simclr"),
    })
    compute_points: list[float] = field(default_factory=lambda: [1 / 3])  # MPP checkpoints also transferred
    monitor: str = "embedded:digits"  # the representation monitor during MPP pre-training
    task: str = "embedded/shapes"  # low-data transfer: other draws of the shapes
    shots: int = 500
    transfer_batch: int = 64
    transfer_lrs: list[float] = field(default_factory=lambda: [0.03])  # one lr and one step count: no sweep
    transfer_steps: list[int] = field(default_factory=lambda: [200])
    test_samples: int = 1000
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # transfer seeds (pre-training uses seed 0)
    attention_images: int = 128
    jobs: int = 1  # transfers run at once: >1 runs them as separate processes (one GPU holds several)

    @property
    def sweep(self) -> bool:
        return len(self.transfer_lrs) * len(self.transfer_steps) > 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


CPU = Plan()
GPU = replace(  # SimCLR's two views per image halve the rate of the (CPU-bound) procedural data: not in 10 minutes
    CPU, name="gpu", model="vit-ti/4", batch_size=256, pretrain_steps=1500, precision="bf16",
    pretrainings={
        "supervised": Pretraining("supervised", 1e-3),
        "mpp": Pretraining("mpp(corrupt_rate=0.5)", 1e-3),
        "mae": Pretraining("mae(decoder_dim=128,decoder_depth=2,decoder_heads=4)", 1.5e-3, plugin="vitx-mae"),
    },
    compute_points=[0.2], shots=1000, transfer_batch=128, transfer_lrs=[0.01, 0.03], transfer_steps=[500],
    test_samples=1000, jobs=6)
QUICK = replace(CPU, name="quick", pretrain_steps=6, shots=40, test_samples=64, seeds=[0], attention_images=8,
                batch_size=16, transfer_batch=16, transfer_steps=[4], compute_points=[0.5], hires=48)
PLANS = {"cpu": CPU, "gpu": GPU, "quick": QUICK}

__all__ = ["CPU", "GPU", "PLANS", "QUICK", "Plan", "Pretraining"]

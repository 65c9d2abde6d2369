"""The small-scale reproduction as data: what is trained, on what, for how long. `CPU` fits about 12 minutes on
2 cores; `QUICK` is the same pipeline with token budgets, for tests."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Plan:
    model: str = "vit-nano/4"
    image_size: int = 16  # pre-training resolution: a 4×4 patch grid
    hires: int = 32  # the higher fine-tuning resolution: 8×8, position embeddings interpolated
    data: str = "embedded:shapes"  # pre-training images (labels used by supervised only)
    batch_size: int = 128
    pretrain_steps: int = 1500
    supervised_lr: float = 2e-3
    mpp_lr: float = 3e-3
    mpp: str = "mpp(corrupt_rate=0.5)"  # the paper's setting: 3-bit mean colour of 50% corrupted patches
    task: str = "embedded/shapes"  # low-data transfer: other draws of the shapes
    shots: int = 500
    transfer_lrs: list[float] = field(default_factory=lambda: [0.01, 0.03])
    transfer_steps: int = 300
    test_samples: int = 2000
    seeds: list[int] = field(default_factory=lambda: [0, 1])  # transfer seeds (pre-training uses seed 0)
    attention_images: int = 128

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


CPU = Plan()
QUICK = replace(CPU, pretrain_steps=12, transfer_steps=4, transfer_lrs=[0.03], shots=40, test_samples=64,
                seeds=[0], attention_images=8, batch_size=16)

__all__ = ["CPU", "QUICK", "Plan"]

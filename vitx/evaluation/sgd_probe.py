"""Linear probe on frozen, cached features: DINO's `eval_linear` optimiser (SGD momentum 0.9, no weight decay, a
cosine decay to 0, no warm-up) with MAE's BatchNorm without affine before the head (`main_linprobe`), and
DINOv2's grid (learning rates × feature choices trained side by side on the same batches, the point chosen on
validation). MAE's own probe trains with LARS (base lr 0.1 at batch 16,384, 10 warm-up epochs of 90): vitx keeps
DINO's SGD, which needs no batch of thousands, and MAE's BatchNorm, which lets one lr grid serve features of any
scale.

The features are extracted once (`representation.Readouts`: every choice of one forward pass) and held in
memory; each feature choice trains one head per learning rate at once, so the whole grid costs one pass of
SGD per feature choice. The chosen point is retrained on train + validation with each seed and reported on
test: mean and spread over the seeds.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn as nn

from ..data.draws import stratified_split
from ..errors import VitxError
from . import LINEAR_BATCH, LINEAR_EPOCHS, LINEAR_LRS, VAL_FRACTION


class Heads(nn.Module):
    """One linear head per learning rate over the same (optionally batch-normalised) features: (B, D) -> (L, B, K).
    MAE's linear probe: BatchNorm1d(affine=False, eps=1e-6), weights ~ N(0, 0.01²) truncated, zero bias."""

    def __init__(self, dim: int, num_classes: int, count: int, batch_norm: bool, seed: int = 0) -> None:
        super().__init__()
        draws = torch.Generator().manual_seed(seed)  # never the global generator: a monitor runs inside training
        self.norm = nn.BatchNorm1d(dim, affine=False, eps=1e-6) if batch_norm else nn.Identity()
        self.heads = nn.ModuleList()
        for _ in range(count):  # each initialised as it is made: head i draws the same numbers whatever the count
            head = nn.utils.skip_init(nn.Linear, dim, num_classes)  # nn.Linear's own init would draw globally
            nn.init.trunc_normal_(head.weight, std=0.01, generator=draws)
            nn.init.zeros_(head.bias)
            self.heads.append(head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.norm(x)  # (B, D)
        return torch.stack([head(z) for head in self.heads])  # (L, B, K)


def fit_heads(features: np.ndarray, labels: np.ndarray, num_classes: int, lrs: Sequence[float],
              epochs: int = LINEAR_EPOCHS, batch: int = LINEAR_BATCH, batch_norm: bool = True, seed: int = 0,
              device: torch.device | str = "cpu") -> Heads:
    """One head per lr on (N, D) features, SGD with momentum 0.9 and a per-step cosine decay to 0 over `epochs`
    (DINO's `eval_linear`; not MAE's LARS with warm-up); the batches are drawn by a seeded shuffle each epoch (the
    same for every head)."""
    x = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32)).to(device)  # (N, D)
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64)).to(device)  # (N,)
    heads = Heads(x.shape[1], num_classes, len(lrs), batch_norm, seed).to(device).train()
    groups = [{"params": head.parameters(), "lr": lr, "base": lr} for head, lr in zip(heads.heads, lrs)]
    optimiser = torch.optim.SGD(groups, momentum=0.9, weight_decay=0.0)
    batch = min(batch, len(x))
    per_epoch = len(x) // batch  # whole batches only: BatchNorm's statistics need more than one row
    total, order = epochs * per_epoch, torch.Generator().manual_seed(seed)
    for step in range(total):
        if step % per_epoch == 0:
            perm = torch.randperm(len(x), generator=order).to(device)
        rows = perm[(step % per_epoch) * batch:(step % per_epoch + 1) * batch]
        for group in optimiser.param_groups:
            group["lr"] = group["base"] * 0.5 * (1 + math.cos(math.pi * step / total))
        logits = heads(x[rows])  # (L, b, K)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), y[rows].repeat(len(lrs)), reduction="sum") / len(rows)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()  # each head's gradient is its own loss's: the sum keeps them apart
        optimiser.step()
    return heads.eval()


@torch.no_grad()
def head_accuracies(heads: Heads, features: np.ndarray, labels: np.ndarray, device: torch.device | str = "cpu") -> list[float]:
    """Top-1 of each head on (N, D) features."""
    x = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32)).to(device)
    predicted = heads(x).argmax(-1).cpu().numpy()  # (L, N)
    return [float(v) for v in (predicted == np.asarray(labels)[None]).mean(1)]


def linear_probe(train: np.ndarray, train_labels: np.ndarray, test: np.ndarray, test_labels: np.ndarray,
                 num_classes: int, slices: dict[str, slice], features: Sequence[str],
                 lrs: Sequence[float] = LINEAR_LRS, epochs: int = LINEAR_EPOCHS, batch: int = LINEAR_BATCH,
                 batch_norm: bool = True, val_fraction: float = VAL_FRACTION, seeds: Sequence[int] = (0,),
                 device: torch.device | str = "cpu") -> dict[str, Any]:
    """The lr × features grid on a stratified, seeded train → validation split of the (N, ΣD) train features
    (`slices`: each choice's columns), the best validation top-1 chosen (ties: the earlier feature, the smaller
    lr), then retrained on all the train features with each seed and tested."""
    lrs = sorted(set(float(lr) for lr in lrs))  # ties go to the smaller lr; one head per distinct lr
    held = min(max(num_classes, round(len(train) * val_fraction)), len(train) - 2 * num_classes)
    if held < 1:
        raise VitxError(f"a linear probe needs at least {2 * num_classes + 1} training images for {num_classes} "
                        f"classes (two per class to fit, some to validate); this data has {len(train)}")
    kept, val = stratified_split(np.asarray(train_labels), held, [seeds[0], 7919])
    grid: dict[str, dict[str, float]] = {}
    for name in features:
        cols = slices[name]
        heads = fit_heads(train[kept][:, cols], train_labels[kept], num_classes, lrs, epochs, batch, batch_norm,
                          seeds[0], device)
        grid[name] = {str(lr): acc for lr, acc in zip(lrs, head_accuracies(heads, train[val][:, cols],
                                                                             train_labels[val], device))}
    best_val, i, j = max((acc, -i, -j) for i, f in enumerate(features) for j, acc in enumerate(grid[f].values()))
    name, lr = features[-i], lrs[-j]
    tests = []
    for seed in seeds:
        heads = fit_heads(train[:, slices[name]], train_labels, num_classes, [lr], epochs, batch, batch_norm, seed, device)
        tests.append(head_accuracies(heads, test[:, slices[name]], test_labels, device)[0])
    return {"features_chosen": name, "lr_chosen": lr, "val_top1": best_val, "test_top1": float(np.mean(tests)),
            "test_top1_per_seed": tests, "test_top1_std": float(np.std(tests, ddof=1)) if len(tests) > 1 else None,
            "grid": grid, "seeds": list(seeds), "epochs": epochs, "batch": batch, "batch_norm": batch_norm,
            "train_samples": int(len(kept)), "val_samples": int(len(val)), "test_samples": int(len(test)),
            "feature_dim": int(slices[name].stop - slices[name].start), "num_classes": num_classes,
            "protocol": "linear probe on frozen features: DINO's SGD (momentum 0.9, no weight decay, cosine), "
                        + ("MAE's BatchNorm without affine, " if batch_norm else "")
                        + "lr × features chosen on validation"}


__all__ = ["Heads", "fit_heads", "head_accuracies",
           "linear_probe"]

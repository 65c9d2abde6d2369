"""Classification heads on the pooled [class] representation.

Pre-training uses an MLP with one tanh hidden layer; transfer replaces the whole head by a single zero-initialised
linear layer (paper §3.1 and Appendix B.1.1)."""
from __future__ import annotations

import torch
import torch.nn as nn

from .errors import VitxError


class PreTrainingHead(nn.Module):
    """Linear(D, D) → tanh → Linear(D, K): the paper's pre-training head."""

    def __init__(self, dim: int, num_classes: int, hidden: int | None = None) -> None:
        super().__init__()
        hidden = hidden or dim
        self.pre_logits = nn.Sequential()
        self.pre_logits.add_module("fc", nn.Linear(dim, hidden))
        self.pre_logits.add_module("act", nn.Tanh())
        self.fc = nn.Linear(hidden, num_classes)
        nn.init.zeros_(self.fc.weight)  # as the reference JAX code: the output layer starts at zero
        nn.init.zeros_(self.fc.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, D) -> (B, K)
        return self.fc(self.pre_logits(x))


class LinearHead(nn.Linear):
    """A single D×K linear layer, zero-initialised so every logit is exactly 0 before the first step."""

    def __init__(self, dim: int, num_classes: int) -> None:
        super().__init__(dim, num_classes)
        nn.init.zeros_(self.weight)
        nn.init.zeros_(self.bias)


def build_head(kind: str, dim: int, num_classes: int) -> nn.Module:
    """`mlp` (pre-training, tanh hidden layer) or `linear` (zero-init)."""
    heads = {"mlp": PreTrainingHead, "linear": LinearHead}
    if kind not in heads:
        raise VitxError(f"unknown head '{kind}'; choose mlp or linear")
    return heads[kind](dim, num_classes)

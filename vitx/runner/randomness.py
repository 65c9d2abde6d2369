"""The randomness contract of a run: what an objective's random draws depend on.

Inside a training step the runner re-seeds torch's global generators (CPU and every GPU), NumPy's and Python's, before each
micro-batch's forward, from (seed, process, micro-step). So:

- every process draws its own numbers (MPP corruption plans, MAE masks, SimCLR views, drop-path): N processes
  see N times the diversity, not one plan N times;
- a draw depends on where the run is, not on what ran before it: a resumed run, a run whose data loader or
  evaluation drew numbers in between, and the run that was never stopped draw the same numbers at the same
  step, so `--resume` is bit-exact for stochastic objectives too;
- the data pipeline keeps its own per-sample randomness (augmentation from (seed, sample index), see
  `vitx.data.loader`), which is why supervised training is the same on 1 or N processes. An objective's draws
  are per process, so a stochastic objective's run on N processes is a different, equally valid, draw.

Evaluation is seeded the same way from (seed, process, step), so a checkpoint's validation numbers do not
depend on the training history either.
"""
from __future__ import annotations

import random

import numpy as np
import torch

TRAIN, EVAL = 0, 1  # what a seed is for: kept apart so evaluation never replays a training draw


def seed_position(seed: int, process: int, position: int, purpose: int = TRAIN) -> None:
    """Re-seed torch's global generators (CPU and all GPUs), NumPy's and Python's for this process at this
    position of the run: objectives that use library code drawing from NumPy or Python (timm's Mixup, its
    RandomErasing) keep the contract too."""
    # a 63-bit seed for (run seed, process, micro-step or step, purpose), well mixed by NumPy's SeedSequence
    state = np.random.SeedSequence([seed, purpose, process, position]).generate_state(2, np.uint32)
    value = int(state[0]) << 31 ^ int(state[1])
    torch.manual_seed(value)
    np.random.seed(value % 2**32)
    random.seed(value)

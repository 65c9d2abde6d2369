"""Collapse, told without labels: the label-free figures of a representation and the rules that read them.

A self-supervised run can collapse (every image mapped to one point, to a few directions, or a teacher whose
output no longer depends on its input) while its loss falls smoothly. The figures (`label_free`):

- `rankme`: the effective rank of the (N, D) features (RankMe, Garrido et al. 2023: the exponential of the
  entropy of the normalised singular values); at most min(N, D), 1 when every image maps to one direction;
- `feature_std`: the mean per-dimension standard deviation of the L2-normalised features (SimSiam's collapse
  check): about 1/√D when they spread over the sphere, 0 when they collapse to a point.

`Watch` reads them (and an objective's own `collapse` figures, e.g. DINO's teacher entropy against log K)
at every log step and says a collapse once, naming the figure and the step, when a rule holds at two of its
observations in a row. Healthy runs come closer than one would guess: MAE's and MPP's mean patch tokens
(what they train) pass through a near-collapse early on and recover (vit-nano/4 on the digits, MAE: rank
1.19 and spread 1.4% of 1/√D at step 50, 1.29 and 2.2% at step 100, 2.79 and 16% at step 200; MPP: 1.97 and
5% at step 50). The thresholds sit below that (rank 1.1, spread 0.5%), where features that have collapsed to
a point sit (rank 1.01–1.03, spread 0.1%: tests/test_collapse.py's objective), so a warning means the features
have stopped carrying information about the image.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

EPS = 1e-7  # RankMe's ε in p_k = σ_k / Σσ + ε
RANK_FLOOR = 1.1  # rankme at or below: (almost) every image maps to one direction
SPREAD_FLOOR = 0.005  # feature_std · √D at or below: the normalised features sit within 0.5% of one point
CONFIRM = 2  # a rule must hold at this many of its observations in a row: a dip that recovers is no collapse
LABEL_FREE_KEYS = ("rankme", "feature_std")  # what `representation_collapse` reads (taken every --watch-every)


def label_free(features: Any) -> dict[str, float]:
    """RankMe, it as a fraction of min(N, D), and the normalised features' mean per-dimension s.d. (with 1/√D,
    its value for features spread evenly over the sphere) of (N, D) features."""
    import torch

    z = torch.as_tensor(features, dtype=torch.float64)  # (N, D)
    sigma = torch.linalg.svdvals(z)  # (min(N, D),)
    p = sigma / sigma.sum().clamp_min(1e-300) + EPS
    rank = float(torch.exp(-(p * p.log()).sum()))
    unit = torch.nn.functional.normalize(z, dim=1)  # (N, D) on the sphere
    return {"rankme": rank, "rankme_fraction": rank / min(z.shape), "feature_std": float(unit.std(dim=0).mean()),
            "feature_std_spread": 1 / math.sqrt(z.shape[1])}


def representation_collapse(metrics: dict[str, float]) -> str | None:
    """What the label-free figures of a log step say, if they say a collapse: one clause, else None."""
    rank, std, spread = metrics.get("rankme"), metrics.get("feature_std"), metrics.get("feature_std_spread")
    if rank is not None and rank <= RANK_FLOOR:
        return (f"the features' effective rank (RankMe) is {rank:.2f}: every image maps to almost the same "
                "direction")
    if std is not None and spread and std <= SPREAD_FLOOR * spread:
        return (f"the normalised features' s.d. per dimension is {std:.2e} ({std / spread:.1%} of the "
                f"{spread:.3f} of features spread over the sphere): every image maps to almost the same point")
    return None


ADVICE = ("lower the learning rate, lengthen the warm-up, or see the objective's own collapse notes; "
          "--stop-on-collapse stops the run here with a checkpoint")


@dataclass(frozen=True)
class Finding:
    """A collapse seen at a log step: which figure said it and the line that says so."""

    step: int
    said: str

    def line(self) -> str:
        return f"collapse at step {self.step}: {self.said}; {ADVICE}"


Rule = Callable[[dict[str, float]], "str | None"]


class Watch:
    """Reads every log step's figures; the first collapse is kept (and said by the runner), later ones are not
    said again in this session. `rules`: (rule, keys) pairs, a rule a function from a log step's metrics to a
    clause or None (the label-free rule above, the objective's own `collapse`), observed at the steps whose
    metrics hold one of its `keys` (None: every log step)."""

    def __init__(self, rules: list[tuple[Rule, tuple[str, ...] | None]], confirm: int = CONFIRM) -> None:
        self.rules, self.confirm = rules, confirm
        self.streaks = [0] * len(rules)
        self.found: Finding | None = None

    def observe(self, step: int, metrics: dict[str, float]) -> Finding | None:
        """A new finding at this step, or None (nothing seen, not yet confirmed, or a collapse already said)."""
        if self.found is not None:
            return None
        for i, (rule, keys) in enumerate(self.rules):
            if keys is not None and not any(k in metrics for k in keys):
                continue  # not measured at this step
            said = rule(metrics)
            self.streaks[i] = self.streaks[i] + 1 if said else 0
            if said and self.streaks[i] >= self.confirm:
                self.found = Finding(step, said)
                return self.found
        return None


__all__ = ["ADVICE", "CONFIRM", "EPS", "Finding", "LABEL_FREE_KEYS", "RANK_FLOOR", "SPREAD_FLOOR", "Watch", "label_free",
           "representation_collapse"]

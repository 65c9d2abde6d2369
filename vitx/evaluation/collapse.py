"""The collapse watch: tells a representation that collapsed from an objective's head that tired.

Two findings, told apart (docs/collapse.md has the runs behind every threshold here):

- a *representation collapse*: the features stop carrying information about the image. Read on the features
  themselves, for every objective: their effective rank and spread (`label_free`, taken at step 0 and every
  --watch-every steps) at their floors or contracted far below where the random initialisation had them, or
  the --monitor's accuracy at chance. Said as `collapse at step N: ...`; --stop-on-collapse acts on it.
- a *head finding*: an objective's own output in a degenerate state (DINO's teacher uniform, one-hot or the
  same for every image), which the objective declares (`Objective.head_findings`). A head can tire while the
  backbone under it still learns (the CPU plan's DINO: teacher entropy 0.997 of log K, and RankMe doubling, 18
  points above scratch), so it is said as a calmer `head at step N: ...` line naming what to change, and becomes
  a collapse only when the representation stalls with it: the monitor's accuracy no higher than at step 0 at its
  last WINDOW readings, or (where the monitor does not say otherwise) RankMe no higher than at step 0 and not
  rising over the last WINDOW watches.

The label-free figures (`label_free`):

- `rankme`: the effective rank of the (N, D) features (RankMe, Garrido et al. 2023: the exponential of the
  entropy of the normalised singular values); at most min(N, D), 1 when every image maps to one direction;
- `feature_std`: the mean per-dimension standard deviation of the L2-normalised features (SimSiam's collapse
  check): about 1/√D when they spread over the sphere, 0 when they collapse to a point.

RankMe's authors give no absolute threshold ("necessary but not sufficient"; compare runs of one method), so the
relative rule compares a run with its own start.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable


EPS = 1e-7  # RankMe's ε in p_k = σ_k / Σσ + ε
RANK_FLOOR = 1.1  # rankme at or below: (almost) every image maps to one direction
SPREAD_FLOOR = 0.005  # feature_std · √D at or below: the normalised features sit within 0.5% of one point
# contracted towards one point: RankMe and spread both at or below these shares of their step-0 values (healthy
# runs' deepest dips: MPP's mean patch token at 32% of its rank and 15% of its spread, MAE's at 40% and 13%; the
# one-point test objective at 8% and 5% by its second watch)
RANK_SHARE, SPREAD_SHARE = 0.25, 0.25
CHANCE_SE = 3.0  # the monitor at chance: its best accuracy within this many binomial s.e. of the chance rate
CONFIRM = 2  # a rule must hold at this many of its observations in a row: a dip that recovers is no collapse
WINDOW = 3  # a stall: RankMe (or the monitor) not above its step-0 value and not rising over this many watches
RISE = 0.02  # RankMe rises when it grows by more than this share
LABEL_FREE_KEYS = ("rankme", "feature_std")  # taken every --watch-every steps
ADVICE = "lower the learning rate or lengthen the warm-up"
STOPS = "--stop-on-collapse stops the run here with a checkpoint"
ACCURACY = re.compile(r"(knn|linear|fewshot_\d+shot)")  # the monitor's accuracies (evaluators knn, linear, fewshot)


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


def chance_bound(labels: Iterable[int], se: float = CHANCE_SE) -> tuple[float, float]:
    """(chance, bound) for a monitor's test labels: chance is what naming the commonest class scores (1/C when
    balanced), bound that plus `se` binomial standard errors of an accuracy on this many images: an accuracy at
    or below it is not told apart from chance."""
    counts: dict[int, int] = {}
    for y in labels:
        counts[int(y)] = counts.get(int(y), 0) + 1
    n = sum(counts.values())
    chance = max(counts.values()) / n
    return chance, chance + se * math.sqrt(chance * (1 - chance) / n)


@dataclass(frozen=True)
class Reading:
    """What one figure of the representation says: a collapse or a stall, with the value and its bound."""

    figure: str  # the metrics.jsonl key
    value: float
    threshold: float
    said: str  # one clause with the figures


@dataclass(frozen=True)
class Finding:
    """A line of the watch: a head finding (`kind` "head") or a collapse ("collapse"), at a log step. A collapse
    reached through a tired head keeps that head finding in `head` and the stalled figure in `reading`;
    `beside`: the features' figures at that step against step 0 (RankMe, the monitor's accuracy)."""

    kind: str  # "head" | "collapse"
    step: int
    reading: Reading | None  # the representation figure (None: a head finding alone)
    head: Any = None  # an objective's HeadFinding (objectives/base.py, a floor above this one)
    beside: str = ""

    def line(self) -> str:
        """The line the runner says."""
        beside = f" ({self.beside})" if self.beside else ""
        if self.kind == "head":
            assert self.head is not None
            return (f"head at step {self.step}: {self.head.said}; not a collapse unless the features stall too{beside}; "
                    f"to change it: {self.head.advice}")
        assert self.reading is not None
        if self.head is not None:
            return (f"collapse at step {self.step}: {self.head.said}, and {self.reading.said}{beside}; "
                    f"{self.head.advice}; {STOPS}")
        return f"collapse at step {self.step}: {self.reading.said}{beside}; {ADVICE}; {STOPS}"

    def record(self) -> dict[str, Any]:
        """For metrics.jsonl's `watch` entries (what a report page reads): the kind, the figure that said it, its
        value and threshold, the clause, the advice and the whole line; a collapse reached through a tired head
        keeps that head finding under `head`."""
        shown = self.head if self.kind == "head" else self.reading
        advice = self.head.advice if self.head is not None else ADVICE
        out: dict[str, Any] = {"kind": self.kind, "figure": shown.figure, "value": shown.value,
                               "threshold": shown.threshold, "said": shown.said, "advice": advice, "line": self.line()}
        if self.head is not None and self.kind == "collapse":
            out["head"] = asdict(self.head)
        return out


Heads = Callable[[dict[str, float]], list]  # an objective's head_findings: its HeadFinding list


@dataclass
class Watch:
    """Reads every log step's figures and says what it sees: each head state once, a collapse once (after it,
    nothing more). `heads`: the objective's `head_findings`; `chance`: per monitor prefix (`monitor_`,
    `monitor_<tag>_`), the (chance, bound) of its accuracies (`chance_bound`)."""

    heads: Heads = lambda metrics: []
    chance: dict[str, tuple[float, float]] = field(default_factory=dict)
    confirm: int = CONFIRM
    window: int = WINDOW
    found: Finding | None = None  # the collapse, once said
    start: dict[str, float] = field(default_factory=dict)  # step-0 (random initialisation) values
    ranks: list[float] = field(default_factory=list)  # RankMe at every watch, in order
    accuracies: dict[str, list[float]] = field(default_factory=dict)  # per monitor prefix, its best accuracy
    streaks: dict[str, int] = field(default_factory=dict)  # consecutive observations a rule held at
    said_heads: set[str] = field(default_factory=set)  # head states already said
    spread: float | None = None  # 1/√D of the watched features (known once they are read)

    def observe(self, step: int, metrics: dict[str, float]) -> list[Finding]:
        """The new lines at this log step ([] for none); step 0 (the random initialisation) sets the baselines."""
        accuracies = self.keep(step, metrics)
        if step == 0 or self.found is not None:
            return []
        collapse = self.confirmed("representation", self.collapsed(metrics, accuracies))
        if collapse is not None:
            self.found = Finding("collapse", step, collapse, beside=self.beside(collapse.figure))
            return [self.found]
        out, heads = [], self.heads(metrics)
        for state in {k for k in self.streaks if k.startswith("head:")} - {f"head:{h.state}" for h in heads}:
            self.streaks[state] = 0  # not held at this step: its streak starts again
        for head in heads:
            if self.confirmed(f"head:{head.state}", head) is None:
                continue
            stalled = self.stalled()
            if stalled is not None:
                self.found = Finding("collapse", step, stalled, head, self.beside(stalled.figure))
                return [self.found]
            if head.state not in self.said_heads:
                self.said_heads.add(head.state)
                out.append(Finding("head", step, None, head, self.beside()))
        return out

    def keep(self, step: int, metrics: dict[str, float]) -> dict[str, float]:
        """Keeps what the rules compare with: the step-0 values, RankMe at every watch, the monitor's best
        accuracy at every reading (returned: per monitor prefix, where it ran at this step)."""
        self.spread = metrics.get("feature_std_spread", self.spread)
        accuracies = {p: best for p in self.chance if (best := best_accuracy(metrics, p)) is not None}
        if step == 0:
            self.start.update({k: float(v) for k, v in metrics.items() if k in LABEL_FREE_KEYS})
            self.start.update({f"{p}best": v for p, v in accuracies.items()})
        if "rankme" in metrics:
            self.ranks.append(float(metrics["rankme"]))
        for prefix, best in accuracies.items():
            self.accuracies.setdefault(prefix, []).append(best)
        return accuracies

    def replay(self, rows: Iterable[dict[str, Any]]) -> None:
        """The watch as the logged `rows` of a run (its metrics.jsonl up to the checkpoint it resumes from) left
        it: its step-0 baselines and histories kept, its head notes not said again; a collapse said before is
        judged again from here on (and said again if it holds)."""
        for row in sorted(rows, key=lambda r: r["step"]):
            self.observe(int(row["step"]), {k: v for k, v in row.items() if isinstance(v, (int, float))})
        self.found = None

    def confirmed(self, rule: str, seen: Any) -> Any:
        """`seen` once it held at `confirm` observations of `rule` in a row, else None. A step with none of the
        figures a rule reads (`_UNREAD`) is no observation: the streak stands."""
        if seen is _UNREAD:
            return None
        self.streaks[rule] = self.streaks.get(rule, 0) + 1 if seen else 0
        return seen if seen and self.streaks[rule] >= self.confirm else None

    def collapsed(self, metrics: dict[str, float], accuracies: dict[str, float]) -> Any:
        """What the representation's figures at this step say of a collapse: a Reading, None, or _UNREAD when
        this step has none of them (`accuracies`: the monitor's best, per prefix, where it ran)."""
        rank, std = metrics.get("rankme"), metrics.get("feature_std")
        if rank is None and std is None and not accuracies:
            return _UNREAD
        if rank is not None and rank <= RANK_FLOOR:
            return Reading("rankme", rank, RANK_FLOOR, f"the features' effective rank (RankMe) is {rank:.2f}: every "
                           "image maps to almost the same direction")
        if std is not None and self.spread and std <= SPREAD_FLOOR * self.spread:
            return Reading("feature_std", std, SPREAD_FLOOR * self.spread,
                           f"the normalised features' s.d. per dimension is {std:.2e} ({std / self.spread:.1%} of the "
                           f"{self.spread:.3f} of features spread over the sphere): every image maps to almost the "
                           "same point")
        rank0, std0 = self.start.get("rankme"), self.start.get("feature_std")
        if rank is not None and std is not None and rank0 and std0 and rank <= RANK_SHARE * rank0 \
                and std <= SPREAD_SHARE * std0:
            return Reading("rankme", rank, RANK_SHARE * rank0,
                           f"the features contracted towards one point: RankMe {rank:.2f} and spread {std:.2e}, "
                           f"{rank / rank0:.0%} and {std / std0:.0%} of their values at step 0 ({rank0:.2f}, "
                           f"{std0:.2e})")
        for prefix, best in accuracies.items():
            if best <= self.chance[prefix][1]:
                chance, bound = self.chance[prefix]
                return Reading(f"{prefix}best", best, bound, f"the monitor's best accuracy is {best:.1%}, at chance "
                               f"({chance:.1%}; within {CHANCE_SE:g} s.e.: ≤ {bound:.1%})")
        return None

    def stalled(self) -> Reading | None:
        """The representation stalls. The monitor first, where it has read the features since step 0: its best
        accuracy above its step-0 value on any dataset it reads says they learn (whatever RankMe says: SimCLR's is
        4.69 after 300 steps against 4.64 at step 0, its kNN 87.5% against 58.1%); no higher at each of its last
        `window` readings, that they stalled. Otherwise RankMe: no higher than at step 0 and not rising over the
        last `window` watches (a representation that gained on its initialisation and levels off, as every run's
        does as its learning rate decays, has not stalled)."""
        read = {p: accs for p, accs in self.accuracies.items() if f"{p}best" in self.start and len(accs) > 1}
        if any(accs[-1] > self.start[f"{p}best"] for p, accs in read.items()):
            return None
        if read and all(len(accs) > self.window and max(accs[-self.window:]) <= self.start[f"{p}best"]
                        for p, accs in read.items()):
            prefix, accs = next(iter(read.items()))
            now, acc0 = accs[-1], self.start[f"{prefix}best"]
            return Reading(f"{prefix}best", now, acc0, f"the features stopped improving (the monitor's best accuracy "
                           f"{now:.1%}, no higher than at step 0 ({acc0:.1%}) at its last {self.window} readings)")
        ranks, rank0 = self.ranks, self.start.get("rankme")
        if rank0 and len(ranks) > self.window:
            now, before = ranks[-1], ranks[-1 - self.window]
            if now <= (1 + RISE) * rank0 and now <= (1 + RISE) * before:
                return Reading("rankme", now, (1 + RISE) * min(rank0, before),
                               f"the features stopped improving (RankMe {now:.2f}: no higher than at step 0 "
                               f"({rank0:.2f}) nor {self.window} watches before ({before:.2f}))")
        return None

    def beside(self, said: str = "") -> str:
        """The features' latest figures against step 0, but for the figure `said` (a collapse's own): what says
        whether they still learn."""
        parts, rank0 = [], self.start.get("rankme")
        if self.ranks and rank0 and said not in LABEL_FREE_KEYS:
            parts.append(f"RankMe {self.ranks[-1]:.2f}, {rank0:.2f} at step 0")
        for prefix, accs in self.accuracies.items():
            acc0 = self.start.get(f"{prefix}best")
            if said == f"{prefix}best":
                continue
            parts.append(f"the {prefix.rstrip('_').replace('_', ' ')}'s best accuracy {accs[-1]:.1%}"
                         + (f", {acc0:.1%} at step 0" if acc0 is not None else "")
                         + f", chance {self.chance[prefix][0]:.1%}")
        return "; ".join(parts)


_UNREAD = object()  # a step whose metrics hold none of the figures a rule reads


def best_accuracy(metrics: dict[str, float], prefix: str) -> float | None:
    """The best of the monitor's accuracies under `prefix` (`monitor_`: knn, fewshot_<k>shot, linear) at this
    step; None where it did not run."""
    values = [v for k, v in metrics.items() if k.startswith(prefix) and ACCURACY.fullmatch(k[len(prefix):])]
    return max(values) if values else None


__all__ = ["ADVICE", "CONFIRM", "EPS", "Finding", "LABEL_FREE_KEYS", "RANK_FLOOR", "RANK_SHARE", "Reading", "STOPS",
           "SPREAD_FLOOR", "SPREAD_SHARE", "WINDOW", "Watch", "chance_bound", "label_free"]

"""The paper's findings as checks on the measured numbers: each claim gets its criterion, the numbers, and
whether it reproduced. The criteria live here, in code, and the report states them."""
from __future__ import annotations

import math
from typing import Any


def mean_top1(runs: list[dict[str, Any]]) -> float:
    """A start's mean test accuracy over its transfer seeds."""
    return sum(r["test_top1"] for r in runs) / len(runs)


def _stderr(p: float, n: int, seeds: int) -> float:
    """Standard error of a mean test accuracy: binomial over n test images, averaged over seeds."""
    return math.sqrt(max(p * (1 - p), 1e-12) / max(n, 1) / max(seeds, 1))


def start_stderr(runs: list[dict[str, Any]], test_samples: int) -> float:
    """Standard error of a start's mean test accuracy over its transfer seeds: the spread between seeds
    (sample standard deviation / √seeds), and never below the binomial error of the test set."""
    accs = [r["test_top1"] for r in runs]
    mean = sum(accs) / len(accs)
    spread = math.sqrt(sum((a - mean) ** 2 for a in accs) / (len(accs) - 1) / len(accs)) if len(accs) > 1 else 0.0
    return max(spread, _stderr(mean, test_samples, len(accs)))


def start_stats(runs: list[dict[str, Any]], test_samples: int) -> dict[str, Any]:
    """A start's mean test accuracy and its standard error at the level that repeats: with several pre-training
    seeds, the mean of the per-pre-training means (each over its transfer seeds) ± the s.e. of that mean (their
    sample s.d. / √pre-trainings, never below the test set's binomial error over every transfer), and beside it
    the within-pre-training s.e. (the transfer seeds' spread, averaged over pre-trainings); with one pre-training
    (or none: scratch) the transfer seeds' spread, as `start_stderr`."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault(r.get("pretrain_seed"), []).append(r)
    means = [mean_top1(g) for g in groups.values()]
    within = sum(start_stderr(g, test_samples) for g in groups.values()) / len(groups)
    mean = sum(means) / len(means)
    if len(means) > 1:
        spread = math.sqrt(sum((m - mean) ** 2 for m in means) / (len(means) - 1) / len(means))
        stderr, level = max(spread, _stderr(mean, test_samples, len(runs))), "pre-training"
    else:
        stderr, level = within, "transfer"
    return {"mean": mean, "stderr": stderr, "within_stderr": within, "level": level,
            "pretrain_seeds": [k for k in groups], "per_pretraining": means, "transfers": len(runs)}


def test_count(results: dict[str, Any]) -> int:
    """How many test images each transfer was scored on (recorded by the transfers; the plan's cap otherwise)."""
    runs = results["transfer"].get("scratch") or next(iter(results["transfer"].values()))
    return int(runs[0].get("test_samples") or results["plan"]["test_samples"])


def transfer_claim(results: dict[str, Any]) -> dict[str, Any]:
    t, n = results["transfer"], test_count(results)
    stats = {k: start_stats(v, n) for k, v in t.items()}
    acc = {k: v["mean"] for k, v in stats.items()}
    se = {k: v["stderr"] for k, v in stats.items()}
    gap, gap_se = acc["mpp"] - acc["scratch"], math.sqrt(se["mpp"] ** 2 + se["scratch"] ** 2)
    holds = gap > 2 * gap_se and acc["supervised"] > acc["mpp"]
    return {"id": "mpp", "claim": "MPP pre-training beats training from scratch on a low-data task; supervised "
                                  "pre-training is stronger still",
            "paper": "ViT-B/16 on ImageNet: MPP 79.9%, +2 points over scratch, 4 below supervised pre-training",
            "criterion": "mean test top-1 (over pre-training seeds, each the mean of its transfer seeds): MPP above "
                         "scratch by more than 2 standard errors of the difference (MPP's s.e. between "
                         "pre-trainings), and supervised above MPP",
            "numbers": {**{f"{k}_top1": v for k, v in acc.items()}, **{f"{k}_stderr": v for k, v in se.items()},
                        **{f"{k}_within_stderr": v["within_stderr"] for k, v in stats.items()},
                        "gap": gap, "gap_stderr": gap_se, "stderr": gap_se},
            "holds": holds}


def position_claim(results: dict[str, Any], trained: str = "supervised") -> dict[str, Any]:
    ins = results["inspect"]
    pos = {k: ins[k]["position_similarity"] for k in ("init", trained)}
    chance = pos["init"]["nearest_in_row_or_column_chance"]

    def structured(p: dict[str, float]) -> bool:
        return p["nearest_in_row_or_column"] >= 0.75 and p["distance_correlation"] < -0.3

    holds = structured(pos[trained]) and not structured(pos["init"])
    label = {"supervised": "supervised pre-training", "mpp": "MPP pre-training"}[trained]
    return {"id": f"posemb-{trained}",
            "claim": f"learned position embeddings show 2D (row/column) structure after {label}, and not at "
                     "initialisation",
            "paper": "Fig. 7 centre: nearby patches have similar embeddings; row-column structure appears",
            "criterion": f"after {label}: ≥ 75% of patches have their most similar patch in their own row or column "
                         f"(chance {chance:.0%}) and similarity falls with distance (correlation < -0.3); at "
                         "initialisation: not both",
            "numbers": {f"{k}_{m}": pos[k][m] for k in pos for m in
                        ("nearest_in_row_or_column", "distance_correlation", "row_column_gap")},
            "holds": holds}


def distance_claim(results: dict[str, Any]) -> dict[str, Any]:
    att = results["inspect"]["supervised"]["attention_distance"]
    layers, uniform = att["pixels"], att["uniform"]
    first_max = max(layers[0])
    means = att["layer_mean"]
    holds = first_max >= 0.9 * uniform and means[-1] - means[0] >= 0.05 * uniform
    return {"id": "distance", "claim": "some heads attend globally already in the lowest layer; the mean attention "
                                       "distance grows with depth",
            "paper": "Fig. 7 right (ViT-L/16): some lowest-layer heads span most of the image, others are local; "
                     "distance grows with depth",
            "criterion": "supervised backbone: a layer-1 head at ≥ 90% of the uniform-attention distance "
                         f"({uniform:.1f}px), and a last-layer mean at least 5% of that distance above the "
                         "first layer's",
            "numbers": {"layer1_max": first_max, "layer1_min": min(layers[0]), "uniform": uniform,
                        "layer_means": means},
            "holds": holds}


def hires_claim(results: dict[str, Any]) -> dict[str, Any]:
    first = results["plan"].get("pretrain_seeds", [0])[0]  # the pre-training fine-tuned at both resolutions
    low = mean_top1([r for s, r in zip(results["plan"].get("seeds", [0]),
                                       [r for r in results["transfer"]["supervised"]
                                        if r.get("pretrain_seed", first) == first])
                     if str(s) in results["hires"]])  # the same seeds at both resolutions
    high = mean_top1(list(results["hires"].values()))
    n, seeds = test_count(results), len(results["hires"])
    se = max(_stderr(low, n, seeds), _stderr(high, n, seeds))
    plan = results["plan"]
    return {"id": "hires", "claim": "fine-tuning at a higher resolution, with interpolated position embeddings, does "
                                    "not fall below fine-tuning at the pre-training resolution",
            "paper": "§3.2: fine-tuning at higher resolution is often beneficial (224 → 384)",
            "criterion": f"supervised start, same lr and steps: top-1 at {plan['hires']}px ≥ top-1 at "
                         f"{plan['image_size']}px − one standard error",
            "numbers": {"low_top1": low, "high_top1": high, "stderr": se}, "holds": high >= low - se}


INSPECTION_CLAIMS = ("posemb-supervised", "posemb-mpp", "distance")


def judge(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every claim the results can decide: a reproduction stopped before its inspection (results.json's
    `partial`) has only the transfer and resolution claims; the report names the others as not yet judged."""
    inspected = results.get("inspect") or {}
    return [transfer_claim(results),
            *([position_claim(results, "supervised"), position_claim(results, "mpp"), distance_claim(results)]
              if {"init", "supervised", "mpp"} <= set(inspected) else []),
            *([hires_claim(results)] if results.get("hires") else [])]


__all__ = ["INSPECTION_CLAIMS", "judge", "start_stats", "test_count"]

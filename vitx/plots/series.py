"""What a run's curves show: metrics.jsonl read into series, the keys grouped into panels, the runs' names.

Pure Python (no matplotlib, no torch): the drawing in `curves.py` follows this plan, and tests compare the
plan with the keys of metrics.jsonl.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..errors import VitxError

Records = list[dict[str, Any]]

# logged for people watching a run, not curves of what it learns
NOT_DRAWN = frozenset({"step", "images_per_s", "input_wait", "grad_norm", "skipped_images", "skipped_nonfinite",
                       "rankme"})  # (rankme: drawn as its fraction of the most it can be)
LABEL_FREE = ("rankme_fraction", "feature_std")  # the collapse watch's (evaluation/collapse.py), drawn together
SPLITS = ("val_", "test_")  # prefixes of evaluated metrics: drawn with their training metric, in its colour


@dataclass(frozen=True)
class Panel:
    """One axes of the figure: its title and the metrics.jsonl keys drawn on it, in order."""

    title: str
    keys: tuple[str, ...]


def read_metrics(path: str | Path) -> Records:
    """A run's metrics.jsonl (a run directory or the file itself), skipping a line torn by a kill."""
    return read_metrics_counted(path)[0]


def read_metrics_counted(path: str | Path) -> tuple[Records, int]:
    """read_metrics and how many non-blank lines it skipped: a page says so when that is more than a torn last one."""
    path = Path(path)
    if not path.exists():
        raise VitxError(f"no run directory or metrics file {path}")
    file = path / "metrics.jsonl" if path.is_dir() else path
    if not file.is_file():
        raise VitxError(f"no metrics.jsonl in {path}")
    try:  # (a byte that is not UTF-8 spoils its line alone, as the resumed run's cut reads it)
        text = file.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise VitxError(f"cannot read {file} as metrics ({exc})") from None
    records, skipped = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            skipped += 1
            continue
        if isinstance(record, dict) and _finite(record.get("step")):  # (a step of 1e400 reads as inf: no step)
            records.append(_with_nonfinite(record))
        else:
            skipped += 1
    return records, skipped


def _with_nonfinite(record: dict[str, Any]) -> dict[str, Any]:
    """A record as logged: the figures `reporting.strict_json` wrote as null (named in `nonfinite`) are NaN again
    (older runs wrote NaN itself, which json reads as it is)."""
    named = record.pop("nonfinite", None)
    if isinstance(named, list):
        record.update({k: float("nan") for k in named if isinstance(k, str) and record.get(k) is None})
    return record


def _finite(value: Any) -> bool:
    """A finite number (not a bool): what a curve can draw."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def series(records: Records, key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of one key over the records that hold a finite number for it."""
    points = [(float(r["step"]), float(r[key])) for r in records if _finite(r.get(key))]
    return [step for step, _ in points], [value for _, value in points]


def base_name(key: str) -> str:
    """`val_top1` → `top1`: a metric and its evaluated versions share a colour and a panel."""
    return next((key[len(prefix):] for prefix in SPLITS if key.startswith(prefix)), key)


def drawable_keys(records: Iterable[dict[str, Any]]) -> list[str]:
    """Every key with at least one finite number, in the order they first appear."""
    return list(dict.fromkeys(k for r in records for k, v in r.items() if k not in NOT_DRAWN and _finite(v)))


def plan_panels(records: Records) -> list[Panel]:
    """The panels for these records (one run's, or several runs' together): loss; accuracy (the objective's
    metrics in [0, 1]: top1, MPP's colour_acc against its baseline_acc, ...; each other metric on its own);
    the representation monitor (`monitor_*`); the collapse watch's label-free figures; the learning rate. Empty groups are left out."""
    keys = drawable_keys(records)
    ordered = sorted(keys, key=lambda k: (base_name(k), k))  # train, then its val_/test_ versions
    loss = [k for k in ordered if base_name(k).endswith("loss")]
    monitor = [k for k in keys if k.startswith("monitor_")]
    watch = [k for k in LABEL_FREE if k in keys]
    rest = [k for k in ordered if k not in loss and k not in monitor and k not in watch and k != "lr"]
    fractions = [k for k in rest if all(0.0 <= v <= 1.0 for v in series(records, k)[1])]
    by_base: dict[str, list[str]] = {}
    for k in rest:
        if k not in fractions:
            by_base.setdefault(base_name(k), []).append(k)
    titled = [("loss", loss), ("accuracy", fractions), *by_base.items(), ("representation monitor", monitor),
              ("collapse watch (label-free)", watch),
              ("learning rate", ["lr"] if "lr" in keys else [])]
    return [Panel(title, tuple(group)) for title, group in titled if group]


def labels(paths: Sequence[str | Path]) -> list[str]:
    """The shortest trailing parts of each path that tell the runs apart (`sweep/lr0.01_steps500` → its name)."""
    parts = [Path(p).resolve().parts for p in paths]
    parts = [p[:-1] if p and p[-1] == "metrics.jsonl" else p for p in parts]
    for i, part in enumerate(parts):  # (`r2`, `./r2/`, a link to it: one folder, however it is typed)
        if part in parts[:i]:
            raise VitxError(f"{paths[parts.index(part)]} and {paths[i]} are the same folder; name each once")
    for n in range(1, max(len(p) for p in parts)):
        names = ["/".join(p[-n:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    return [str(Path(*p)) for p in parts]  # (whole paths: distinct, as checked above)

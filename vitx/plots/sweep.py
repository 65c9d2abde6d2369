"""A transfer's sweep as one figure (`sweep.png`): validation top-1 against the learning rate (log scale), one
line per step count, the chosen point ringed. What the protocol chose, and how close the others came."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..errors import VitxError
from .canvas import new_figure, save, styled

SWEEP = "sweep.png"


def sweep_lines(points: Sequence[dict[str, Any]]) -> dict[int, list[tuple[float, float]]]:
    """steps → [(lr, val_top1)] in lr order: the lines of the figure."""
    lines: dict[int, list[tuple[float, float]]] = {}
    for p in points:
        lines.setdefault(int(p["steps"]), []).append((float(p["lr"]), float(p["val_top1"])))
    return {steps: sorted(line) for steps, line in sorted(lines.items())}


def draw_sweep(points: Sequence[dict[str, Any]], chosen: dict[str, Any] | None, path: str | Path,
               title: str = "") -> dict[int, list[tuple[float, float]]]:
    """Draw the sweep points (dicts with lr, steps, val_top1, as result.json's `sweep`) to `path`; returns the
    lines drawn (`sweep_lines`)."""
    lines = sweep_lines(points)
    if not lines:
        raise VitxError("no sweep points to draw")

    def render() -> None:
        from matplotlib.ticker import NullFormatter, PercentFormatter

        fig, (ax,) = new_figure(1, extra_height=0.3)
        for i, (steps, line) in enumerate(lines.items()):
            lrs, accs = zip(*line)
            ax.plot(lrs, accs, marker="o", markersize=4, color=f"C{i % 10}", label=f"{steps} steps")
        if chosen is not None:
            best = lines.get(int(chosen["steps"]), [])
            acc = dict(best).get(float(chosen["lr"]))
            if acc is not None:
                ax.plot([chosen["lr"]], [acc], marker="o", markersize=11, markerfacecolor="none",
                        markeredgecolor="black", linestyle="none",
                        label=f"chosen: lr {float(chosen['lr']):g} × {int(chosen['steps'])}")
        ax.set_xscale("log")
        lrs = sorted({lr for line in lines.values() for lr, _ in line})
        ax.set_xticks(lrs, [f"{lr:g}" for lr in lrs])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set(xlabel="learning rate", ylabel="validation top-1", title=title or "transfer sweep")
        ax.legend(loc="best", frameon=False)
        fig.subplots_adjust(left=0.18, right=0.96, bottom=0.18, top=0.88)
        save(fig, path)

    styled(render)
    return lines


__all__ = ["SWEEP", "draw_sweep", "sweep_lines"]

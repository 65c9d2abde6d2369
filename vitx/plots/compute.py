"""Transfer accuracy against pre-training compute as one figure (`compute.png`): one line per objective (mean ±
standard error over the transfer seeds at each checkpoint), training from scratch as a band. Where, if anywhere,
an objective's pre-training starts to pay off, and how its cost compares with another's."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..errors import VitxError
from .canvas import new_figure, save, styled

COMPUTE = "compute.png"
Point = tuple[float, float, float]  # (pre-training compute, mean test top-1, its standard error)


def draw_compute(curves: dict[str, Sequence[Point]], scratch: tuple[float, float], path: str | Path,
                 xlabel: str = "pre-training minutes", title: str = "") -> dict[str, list[Point]]:
    """Draw each objective's points (compute, mean, s.e.) to `path`, with scratch's (mean, s.e.) as a band
    (± 2 s.e.); returns the lines drawn, each in compute order."""
    lines = {name: sorted(points) for name, points in curves.items() if points}
    if not lines:
        raise VitxError("no compute points to draw")

    def render() -> None:
        from matplotlib.ticker import PercentFormatter

        fig, (ax,) = new_figure(1, extra_height=0.3)
        mean, se = scratch
        ax.axhline(mean, color="grey", linewidth=1.0, label=f"scratch {100 * mean:.1f}%")
        ax.axhspan(mean - 2 * se, mean + 2 * se, color="grey", alpha=0.15, linewidth=0)
        for i, (name, points) in enumerate(lines.items()):
            xs, ys, errs = zip(*points)
            ax.errorbar(xs, ys, yerr=errs, marker="o", markersize=3, capsize=2, color=f"C{i % 10}", label=name)
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set(xlabel=xlabel, ylabel="test top-1 (mean ± s.e.)", title=title or "transfer against pre-training compute")
        ax.set_xlim(left=0)
        ax.legend(loc="best", frameon=False)
        fig.subplots_adjust(left=0.18, right=0.96, bottom=0.18, top=0.88)
        save(fig, path)

    styled(render)
    return lines


__all__ = ["COMPUTE", "draw_compute"]

"""Training curves from metrics.jsonl: one run's `curves.png`, and several runs overlaid (`vitx plot`).

One run: a colour per metric, its val_/test_ versions dashed in the same colour. Several runs: a colour per
run (the figure's legend names them), line styles per metric. Panels follow `series.plan_panels`.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..errors import VitxError
from .canvas import figure_format, new_figure, save, styled
from .series import SPLITS, Panel, Records, base_name, labels, plan_panels, read_metrics, read_metrics_counted, series

if TYPE_CHECKING:
    from matplotlib.axes import Axes

CURVES = "curves.png"
SPARSE = 25  # series with at most this many points get markers (checkpoint evaluations, the monitor)
LINESTYLES = ("-", ":", "-.")


def _style(key: str, panel: Panel, overlay: bool) -> dict:
    """Dashed with dots for evaluated metrics; in overlays, where colour is the run, a line style per metric."""
    if key.startswith(SPLITS):
        return {"linestyle": "--", "marker": "o"}
    bases = list(dict.fromkeys(base_name(k) for k in panel.keys))
    return {"linestyle": LINESTYLES[bases.index(base_name(key)) % len(LINESTYLES)] if overlay else "-",
            "marker": None}


def _draw_panel(ax: "Axes", panel: Panel, runs: dict[str, Records], colours: dict[str, str]) -> None:
    from matplotlib.ticker import MaxNLocator

    overlay = len(runs) > 1
    for run, records in runs.items():
        for key in panel.keys:
            xs, ys = series(records, key)
            if not xs:
                continue
            style = _style(key, panel, overlay)
            if len(xs) <= SPARSE and style["marker"] is None:
                style["marker"] = "."
            colour = colours[run] if overlay else colours[base_name(key)]
            ax.plot(xs, ys, color=colour, markersize=3, label=None if overlay else key, **style)
    ax.set_title(panel.title, y=1.0)  # a fixed place: matplotlib need not measure the tick labels for it
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))  # few ticks: each is drawn separately
    ax.yaxis.set_major_locator(MaxNLocator(nbins=5))
    if panel.title == "learning rate":
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
    if overlay and len(panel.keys) > 1:  # which line style is which metric (colours are the runs)
        for key in panel.keys:
            ax.plot([], [], color="0.3", markersize=3, label=key, **_style(key, panel, overlay))
    if len(panel.keys) > 1:  # matplotlib's search for the emptiest corner is slow over long runs
        ax.legend(loc="best" if sum(len(r) for r in runs.values()) < 2000 else "upper right", frameon=False)


def draw(runs: dict[str, Records], path: str | Path, title: str = "") -> list[Panel]:
    """Draw the runs' curves (name → metrics records) into one figure at `path`; returns the panels drawn,
    each with the metrics.jsonl keys on it."""
    everything = [r for records in runs.values() for r in records]
    panels = plan_panels(everything)
    if not panels:
        raise VitxError(f"nothing to plot in {', '.join(runs) or 'no runs'}: no metrics with numbers")

    def render() -> None:
        fig, axes = new_figure(len(panels), extra_height=0.4 if len(runs) == 1 else 0.7)
        coloured = dict.fromkeys(base_name(k) for p in panels for k in p.keys) if len(runs) == 1 else runs
        colours = {name: f"C{i % 10}" for i, name in enumerate(coloured)}  # a colour per metric, or per run
        for ax, panel in zip(axes, panels):
            _draw_panel(ax, panel, runs, colours)
        if len(runs) > 1:
            handles = [ax.plot([], [], color=colours[name], label=name)[0] for name in runs]
            fig.legend(handles=handles, loc="upper center", ncol=min(len(runs), 4), frameon=False,
                       bbox_to_anchor=(0.5, 0.99 if not title else 0.95))
        if title:
            fig.suptitle(title, y=0.995)
        height = fig.get_figheight()  # margins in inches: the same room for labels at any number of rows
        fig.subplots_adjust(left=0.08, right=0.98, bottom=0.4 / height,
                            top=1 - (0.45 if len(runs) == 1 else 0.75) / height, hspace=0.55, wspace=0.3)
        save(fig, path)

    styled(render)
    return panels


def draw_run(run: str | Path, path: str | Path | None = None, title: str = "") -> list[Panel]:
    """A run directory's `curves.png` (or `path`) from its metrics.jsonl; returns the panels drawn."""
    run = Path(run)
    return draw({run.name: read_metrics(run)}, path or run / CURVES, title)


def draw_runs(paths: Sequence[str | Path], output: str | Path) -> list[Panel]:
    """Several runs overlaid in one figure (panels for the keys any of them has); returns the panels drawn."""
    if not paths:
        raise VitxError("name at least one run directory to plot")
    figure_format(output)  # a wrong suffix fails before any run is read
    names = labels(paths)
    counted = {name: read_metrics_counted(p) for name, p in zip(names, paths)}
    empty = [(name, skipped) for name, (records, skipped) in counted.items() if not records]
    if empty:
        name, skipped = empty[0]
        raise VitxError(f"nothing to plot in {name}: " + (f"its metrics.jsonl holds {skipped:,} line{'s' * (skipped != 1)} "
                                                         "and none is a metrics record (damaged, or not vitx's)"
                                                         if skipped else "no metrics records"))
    runs = {name: records for name, (records, _) in counted.items()}
    return draw(runs, output, title=names[0] if len(names) == 1 else "")


__all__ = ["CURVES", "draw", "draw_run", "draw_runs"]

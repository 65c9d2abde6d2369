"""Figures of training, drawn from what runs write: a run's `curves.png` (metrics.jsonl), several runs overlaid
(`vitx plot`), a transfer's `sweep.png`, the reproduction's `compute.png`. Importing this package is cheap:
matplotlib loads at the first figure.

The figures of `vitx inspect` (what a trained ViT looks like inside) are in `vitx.analysis.figures`.
"""
from .canvas import try_draw
from .compute import COMPUTE, draw_compute
from .curves import CURVES, draw, draw_run, draw_runs
from .series import Panel, plan_panels, read_metrics
from .sweep import SWEEP, draw_sweep, sweep_lines

__all__ = ["COMPUTE", "CURVES", "SWEEP", "Panel", "draw", "draw_compute", "draw_run", "draw_runs", "draw_sweep",
           "plan_panels", "read_metrics", "sweep_lines", "try_draw"]

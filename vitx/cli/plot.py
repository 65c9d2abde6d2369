"""`vitx plot`: several runs' training curves overlaid in one figure, from their metrics.jsonl."""
from __future__ import annotations

from typing import List

import typer


def plot(
    runs: List[str] = typer.Argument(..., metavar="RUN...", help="Run directories (or their metrics.jsonl files): pre-training runs, a transfer's sweep/* points or final/."),
    output: str = typer.Option("plot.png", "--output", "-o", help="The figure to write (.png, .pdf or .svg). A file there is replaced only when it is a figure vitx drew."),
    force: bool = typer.Option(False, "--force", help="Replace the --output file even when it is not a figure vitx drew (never a run's own files)."),
) -> None:
    """Overlay runs' curves: loss, accuracy (or the objective's metrics), the representation monitor, learning
    rate; one colour per run."""
    from ..plots import draw_runs  # matplotlib loads at the first figure, not here
    from ..plots.canvas import figure_format, is_vitx_figure
    from ..settings.paths import writable_file

    figure_format(output)  # (a wrong suffix: its own line first)
    writable_file(output, "--output", force, example="plot.png", ours=is_vitx_figure, what="a figure vitx drew")
    panels = draw_runs(runs, output)
    typer.echo(f"wrote {output}: {len(runs)} run(s); panels: {', '.join(p.title for p in panels)}")

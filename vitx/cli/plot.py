"""`vitx plot`: several runs' training curves overlaid in one figure, from their metrics.jsonl."""
from __future__ import annotations

from typing import List

import typer


def plot(
    runs: List[str] = typer.Argument(..., metavar="RUN...", help="Run directories (or their metrics.jsonl files): pre-training runs, a transfer's sweep/* points or final/."),
    output: str = typer.Option("plot.png", "--output", "-o", help="The figure to write (.png, .pdf or .svg)."),
) -> None:
    """Overlay runs' curves: loss, accuracy (or the objective's metrics), the representation monitor, learning
    rate; one colour per run."""
    from ..plots import draw_runs  # matplotlib loads at the first figure, not here

    panels = draw_runs(runs, output)
    typer.echo(f"wrote {output}: {len(runs)} run(s); panels: {', '.join(p.title for p in panels)}")

"""`vitx report`: one self-contained HTML page for a run, a transfer or a reproduction, or one comparing several."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer


def report(
    paths: List[str] = typer.Argument(..., metavar="PATH...", help="A pre-training run, a transfer's --output-dir (one task or a suite, or a task's folder) or a reproduction's output folder; several runs (or several transfers) for one page comparing them."),
    output: Optional[str] = typer.Option(None, "--output", "-o", metavar="FILE", help="The page to write. Default: PATH/report.html for one folder (what the run itself writes at its end), comparison.html here for several. A file there is replaced only when it is a vitx page."),
    force: bool = typer.Option(False, "--force", help="Replace the --output file even when it is not a vitx page."),
) -> None:
    """Write one HTML page: figures inline, no network, no scripts; it opens anywhere and prints."""
    from ..pages import page, replaceable, write  # (matplotlib loads at the first figure)

    folders = [Path(p).expanduser() for p in paths]
    target = Path(output).expanduser() if output else \
        folders[0] / "report.html" if len(folders) == 1 else Path("comparison.html")
    # before the page is built: nothing is lost
    replaceable(target, "--output" if output else "the page", force, folders)
    kind, html = page(folders)
    write(html, target)
    what = f"a comparison of {len(folders)} folders" if kind == "comparison" else \
        {"run": "a run", "suite": "a transfer", "reproduction": "a reproduction"}[kind]
    typer.echo(f"wrote {target} ({len(html.encode()) / 1024:,.0f} KB): {what}")

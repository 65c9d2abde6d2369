"""`vitx reproduce`: the paper's Section 4.5/4.6 findings at small scale, with a Markdown report."""
from __future__ import annotations

import typer

from ..reproduce import CPU, QUICK


def reproduce(
    output_dir: str = typer.Option("runs/reproduce", help="Runs, figures, results.json and REPORT.md. A second call resumes."),
    quick: bool = typer.Option(False, "--quick", help="A few steps of everything (a smoke test; the numbers mean nothing)."),
) -> None:
    """Pre-train (supervised, MPP), transfer (scratch / MPP / supervised; higher resolution), inspect, and report
    which of the paper's findings reproduce. About 12 minutes on 2 CPU cores."""
    from ..reproduce import reproduce as run_reproduce

    results = run_reproduce(output_dir, QUICK if quick else CPU)
    for c in results["claims"]:
        typer.echo(f"{'reproduces' if c['holds'] else 'does not reproduce'}: {c['claim']}")
    typer.echo(f"report: {output_dir}/REPORT.md ({results['seconds'] / 60:.1f} minutes)")

"""`vitx reproduce`: the paper's Section 4.5/4.6 findings at small scale, with a Markdown report."""
from __future__ import annotations

from typing import List, Optional

import typer

from ..errors import VitxError
from .options import SET


def reproduce(
    output_dir: str = typer.Option("runs/reproduce", help="Runs, figures, results.json and REPORT.md. A second call resumes."),
    plan: Optional[str] = typer.Option(None, help="cpu (about an hour on 2 cores), gpu (meant for about 10 minutes on one H100: vit-ti/4 at 64px, a 16x16 grid, 8 seeds, an lr sweep; not yet run in this setting) or quick (a smoke test; the numbers mean nothing). \\[default: cpu]"),
    quick: bool = typer.Option(False, "--quick", help="Same as --plan quick."),
    set_: List[str] = SET,
) -> None:
    """Pre-train (supervised, MPP; MAE, SimCLR and DINO when their plugins are installed), transfer (scratch, each
    pre-training, MPP part-way; higher resolution), inspect, and report which of the paper's findings reproduce."""
    from ..recipe import parse_sets
    from ..reproduce import PLANS, Plan, reproduce as run_reproduce

    if quick and plan not in (None, "quick"):
        raise VitxError(f"--quick is --plan quick, which contradicts --plan {plan}; give one of them")
    name = "quick" if quick else plan or "cpu"
    if name not in PLANS:
        raise VitxError(f"--plan must be one of {', '.join(PLANS)}, got '{plan}'")
    chosen = PLANS[name].with_settings(parse_sets(set_, Plan))  # e.g. --set seeds=[0,1,2] --set jobs=4
    results = run_reproduce(output_dir, chosen)
    for c in results["claims"]:
        typer.echo(f"{'reproduces' if c['holds'] else 'does not reproduce'}: {c['claim']}")
    typer.echo(f"report: {output_dir}/REPORT.md ({results['seconds'] / 60:.1f} minutes)")

"""`vitx reproduce`: the paper's Section 4.5/4.6 findings at small scale, with a Markdown report."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..errors import Interrupted, Preempted, VitxError
from ..runner.preemption import Stop, adopted
from .options import SET


def reproduce(
    output_dir: str = typer.Option("runs/reproduce", help="Runs, figures, results.json and REPORT.md. A second call resumes."),
    plan: Optional[str] = typer.Option(None, help="cpu (3 pre-training seeds per row, 3 transfer seeds each: 92 minutes on 2 cores), gpu (vit-ti/4 at 64px, a 16x16 grid, 8 seeds, an lr sweep, 3 pre-training seeds; trimmed to one seed and one lr it ran to its report in 8.8 minutes on one H200: recipes/reproduction/REPORT-GPU.md) or quick (a smoke test; the numbers mean nothing). \\[default: cpu]"),
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
    chosen = PLANS[name].with_settings(parse_sets(set_, Plan))  # e.g. --set seeds=[0,1,2,3,4] --set jobs=4
    try:
        results = run_reproduce(output_dir, chosen)
    except (Stop, Preempted, Interrupted) as caught:
        raise stopped(caught, Path(output_dir).expanduser()) from None
    for c in results["claims"]:
        typer.echo(f"{'reproduces' if c['holds'] else 'does not reproduce'}: {c['claim']}")
    typer.echo(f"report: {output_dir}/REPORT.md ({results['seconds'] / 60:.1f} minutes)")


def stopped(caught: Stop | Preempted | Interrupted, out: Path) -> VitxError:
    """A stop signal or Ctrl-C, once the jobs it was passed on to (runner/preemption.py's `adopt`) have stopped
    too (each checkpoints or stops at once, as a run does): one line, with the stop's status, of what is on disk
    and that a second call continues from there."""
    from ..transfer.jobs import stop_children

    error = caught.error if isinstance(caught, Stop) else caught
    jobs = adopted()
    stop_children(jobs)  # (a pool's jobs have exited already: it waited for them)
    jobs = [job for job in jobs if getattr(job, "vitx_stopped", False)]  # (those running when it came)
    first = str(error).split(" ", 1)[0].rstrip(":;")
    name = "Ctrl-C" if isinstance(error, Interrupted) else first if first.startswith("SIG") else "a stop signal"
    with_jobs = f", and its {len(jobs)} job(s) with it" if jobs else ""
    return type(error)(f"{name}: the reproduction stopped{with_jobs}; {on_disk(out)}; run the same command again to "
                       "continue from there")


def on_disk(out: Path) -> str:
    """Where a reproduction stands in `out`: each pre-training's last checkpoint, and the transfers complete."""
    from ..runs.rundir import RunDir, step_number
    from ..safe_io import read_json_object

    runs, complete = [], 0
    for folder in sorted(p for p in out.glob("pretrain-*") if p.is_dir()):
        name, latest = folder.name.removeprefix("pretrain-"), RunDir(folder).latest()
        steps = ((read_json_object(folder / "config.json") or {}).get("run") or {}).get("steps")
        if latest is not None and step_number(latest) == steps:
            complete += 1
            continue
        of = f" of {steps}" if isinstance(steps, int) else ""
        runs.append(f"{name} at step {step_number(latest)}{of}" if latest else f"{name} without a checkpoint yet")
    if not runs and not complete:
        return f"nothing was trained in {out} yet"
    done = len([*out.glob("transfer/*/summary.json"), *out.glob("hires/*/summary.json")])
    parts = ([f"{complete} pre-training(s) complete"] if complete else []) + \
        ([f"pre-training {', '.join(runs)}"] if runs else [])
    return f"in {out}: {'; '.join(parts)}; {done} transfer(s) complete"

"""`vitx transfer`: the VTAB-1k protocol (or any N-shot transfer) from a checkpoint, timm, or scratch."""
from __future__ import annotations

from typing import List, Optional

import typer

from ..errors import VitxError
from ..transfer import TransferConfig
from ..transfer import transfer as run_transfer

D = TransferConfig()


def number_list(text: str, kind: type, flag: str) -> list:
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise VitxError(f"{flag} takes comma-separated {kind.__name__}s, e.g. {flag} "
                        f"{','.join(map(str, getattr(D, flag.strip('-').replace('-', '_'), [1, 2])))}") from None
    if not values:
        raise VitxError(f"{flag} is empty")
    return values


def transfer(
    task: str = typer.Option(D.task, help="Task (see `vitx tasks`), vtab/all, vtab/natural|specialized|structured, or a pattern like 'vtab/dsprites_*'."),
    start: str = typer.Option(D.start, "--from", help="A vitx run or checkpoint directory, timm:<name> (pretrained, online), or scratch."),
    model: Optional[str] = typer.Option(None, help="Backbone for --from scratch (see `vitx models`)."),
    adapter: List[str] = typer.Option([], help="Adapter with options, repeatable, e.g. linear-probe or 'resize-posemb(mode=\"bilinear\")' (see `vitx adapters`)."),
    shots: int = typer.Option(D.shots, help="Training images: 4/5 train, 1/5 validation (VTAB-1k: 1000 = 800 + 200)."),
    image_size: Optional[int] = typer.Option(None, help="Fine-tuning resolution; position embeddings are interpolated. [default: the checkpoint's]"),
    batch_size: int = typer.Option(D.batch_size, help="Global batch per step."),
    grad_accum: int = typer.Option(D.grad_accum, help="Split each batch into this many accumulated micro-batches (memory)."),
    sweep: bool = typer.Option(D.sweep, "--sweep/--no-sweep", help="Sweep lr × steps on train → val and retrain the best; --no-sweep: --lr and --steps (the paper's 0.01, 2500)."),
    lrs: str = typer.Option(",".join(map(str, D.lrs)), help="Sweep learning rates."),
    sweep_steps: str = typer.Option(",".join(map(str, D.sweep_steps)), help="Sweep step counts."),
    lr: float = typer.Option(D.lr, help="Learning rate with --no-sweep."),
    steps: int = typer.Option(D.steps, help="Steps with --no-sweep."),
    warmup: float = typer.Option(D.warmup, help="Warm-up, as a fraction of each run's steps."),
    precision: str = typer.Option(D.precision, help="no, bf16 or fp16 (GPU)."),
    data_dir: Optional[str] = typer.Option(None, help="A local copy of the task's data (hub WebDataset layout or save_to_disk)."),
    output_dir: str = typer.Option(D.output_dir, help="Results, per-task runs and the final models."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted transfer in --output-dir."),
    seed: int = typer.Option(D.seed),
    test_samples: int = typer.Option(D.test_samples, help="Evaluate on the first N test images; 0: all."),
    save_every: int = typer.Option(D.save_every, help="Checkpoint each run every N steps (for --resume)."),
    workers: int = typer.Option(D.workers, help="Data worker processes; -1: cores - 1, at most 4."),
    skip_missing: bool = typer.Option(False, "--skip-missing", help="In a suite, skip tasks whose data is unavailable."),
) -> None:
    """Transfer a pre-trained ViT: sweep, retrain, test (VTAB-1k protocol), print and save the results."""
    cfg = TransferConfig(
        task=task, start=start, model=model, adapters=list(adapter), shots=shots, image_size=image_size,
        batch_size=batch_size, grad_accum=grad_accum, sweep=sweep, lrs=number_list(lrs, float, "--lrs"),
        sweep_steps=number_list(sweep_steps, int, "--sweep-steps"), lr=lr, steps=steps, warmup=warmup,
        precision=precision, output_dir=output_dir, data_dir=data_dir, seed=seed, test_samples=test_samples,
        save_every=save_every, workers=workers, skip_missing=skip_missing,
    )
    run_transfer(cfg, resume=resume)

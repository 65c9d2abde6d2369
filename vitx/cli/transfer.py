"""`vitx transfer`: the VTAB-1k protocol (or any N-shot transfer) from a checkpoint, timm, or scratch."""
from __future__ import annotations

from typing import List, Optional

import typer

from ..errors import VitxError
from ..recipe import resolve
from ..transfer.config import TransferConfig
from .options import RECIPE, SET

D = TransferConfig()


def number_list(text: str, kind: type, flag: str, example: str) -> list:
    """`--lrs 0.01,0.03`-style values; `example` shows the form in the error."""
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        what = "whole numbers" if kind is int else "numbers"
        raise VitxError(f"{flag} takes comma-separated {what}, e.g. {flag} {example}; got '{text}'") from None
    if not values:
        raise VitxError(f"{flag} is empty: give at least one value, e.g. {flag} {example}")
    return values


def transfer(
    task: Optional[str] = typer.Option(None, help=f"Task (see `vitx tasks`), vtab/all, vtab/natural|specialized|structured, a pattern like 'vtab/dsprites_*', or your labelled data: an image folder, save_to_disk/parquet folder, hf:owner/name or WebDataset shards. \\[default: {D.task}]"),
    start: Optional[str] = typer.Option(None, "--from", help=f"A vitx run or checkpoint directory, timm:<name> (pretrained, online), or scratch. \\[default: {D.start}]"),
    model: Optional[str] = typer.Option(None, help="Backbone for --from scratch (see `vitx models`)."),
    adapter: List[str] = typer.Option([], help="Adapter with options, repeatable, e.g. linear-probe or 'resize-posemb(mode=\"bilinear\")' (see `vitx adapters`)."),
    shots: Optional[int] = typer.Option(None, help=f"Training images: 4/5 train, 1/5 validation (VTAB-1k: 1000 = 800 + 200); from your data, a seeded, class-balanced draw. \\[default: {D.shots}]"),
    label_key: Optional[str] = typer.Option(None, help="Your data's label column (or json.<field> of WebDataset shards). \\[default: a ClassLabel column, else label, labels, cls, class, fine_label, target, category or txt]"),
    image_key: Optional[str] = typer.Option(None, help="Your data's image column. \\[default: the first image column]"),
    stream: Optional[bool] = typer.Option(None, "--stream/--no-stream", help="Your data (hf:NAME, parquet, shards) read as a stream: the shots are drawn as it is read, nothing is downloaded or cached whole."),
    image_size: Optional[int] = typer.Option(None, help="Fine-tuning resolution; position embeddings are interpolated. \\[default: the checkpoint's]"),
    mean: Optional[str] = typer.Option(None, help="Input normalisation mean, per RGB channel, e.g. 0.485,0.456,0.406. \\[default: the start's: timm's pretrained_cfg, a vitx run's preprocessing, 0.5 for scratch]"),
    std: Optional[str] = typer.Option(None, help="Input normalisation std, per RGB channel. \\[default: the start's]"),
    interpolation: Optional[str] = typer.Option(None, help="Resize interpolation: bicubic, bilinear or nearest. \\[default: the start's]"),
    batch_size: Optional[int] = typer.Option(None, help=f"Global batch per step. \\[default: {D.batch_size}]"),
    grad_accum: Optional[int] = typer.Option(None, help=f"Split each batch into this many accumulated micro-batches (memory). \\[default: {D.grad_accum}]"),
    sweep: Optional[bool] = typer.Option(None, "--sweep/--no-sweep", help="Sweep lr × steps on train → val and retrain the chosen point; --no-sweep: --lr and --steps (the paper's 0.01, 2500). \\[default: sweep]"),
    select: Optional[str] = typer.Option(None, help="How the swept point is chosen: suite (one lr × steps for every task, the best mean val top-1 over the suite: the ViT paper's VTAB protocol) or task (each task its own best: optimistic, not comparable with the paper). \\[default: suite for several tasks]"),
    lrs: Optional[str] = typer.Option(None, help=f"Sweep learning rates. \\[default: {','.join(map(str, D.lrs))}]"),
    sweep_steps: Optional[str] = typer.Option(None, help=f"Sweep step counts. \\[default: {','.join(map(str, D.sweep_steps))}]"),
    lr: Optional[float] = typer.Option(None, help=f"Learning rate with --no-sweep. \\[default: {D.lr}]"),
    steps: Optional[int] = typer.Option(None, help=f"Steps with --no-sweep. \\[default: {D.steps}]"),
    warmup: Optional[float] = typer.Option(None, help=f"Warm-up, as a fraction of each run's steps. \\[default: {D.warmup}]"),
    precision: Optional[str] = typer.Option(None, help=f"no, bf16 or fp16 (GPU). \\[default: {D.precision}]"),
    data_dir: Optional[str] = typer.Option(None, help="A local copy of the task's data: the VTAB-1k folder release, the hub's WebDataset layout, or save_to_disk; for a suite, their root."),
    output_dir: Optional[str] = typer.Option(None, help=f"Results, per-task runs and the final models. \\[default: {D.output_dir}]"),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted transfer in --output-dir."),
    seed: Optional[int] = typer.Option(None, help=f"Seed of the runs (and of the draw of your data's shots). \\[default: {D.seed}]"),
    seeds: Optional[str] = typer.Option(None, help="Repeat each task's final run with these seeds, e.g. 0,1,2: results are mean ± s.d. (the sweep and the data's draw use --seed). \\[default: --seed alone]"),
    test_samples: Optional[int] = typer.Option(None, help="Evaluate on N test images (a registered task's first N; your data's, a seeded sample); 0: all. \\[default: 0]"),
    save_every: Optional[int] = typer.Option(None, help=f"Checkpoint each run every N steps (for --resume). \\[default: {D.save_every}]"),
    workers: Optional[int] = typer.Option(None, help="Data worker processes; -1: cores - 1, at most 4. \\[default: -1]"),
    skip_missing: Optional[bool] = typer.Option(None, "--skip-missing", help="In a suite, skip tasks whose data is unavailable."),
    allow_synthetic: Optional[bool] = typer.Option(None, "--allow-synthetic", help="Count VTAB tasks read from vitx's synthetic regeneration (the embedded dSprites) in group and suite means; by default they are listed but left out."),
    compile: Optional[bool] = typer.Option(None, "--compile/--no-compile", help="torch.compile each run's training step."),
    tf32: Optional[bool] = typer.Option(None, "--tf32/--no-tf32", help="On GPUs that have it, float32 matmuls in TF32. \\[default: on]"),
    log_format: Optional[str] = typer.Option(None, help="Progress of each run: auto (a bar on a terminal; a plain, flushed line per log step in a log file or pipe), bar, lines or json. \\[default: auto]"),
    quiet: Optional[bool] = typer.Option(None, "--quiet/--no-quiet", help="Print nothing but errors (results are written as always)."),
    curves: Optional[bool] = typer.Option(None, "--curves/--no-curves", help="Draw sweep.png (validation top-1 per lr × steps) and the final run's curves.png. \\[default: on]"),
    compare: Optional[str] = typer.Option(None, help="Print published VTAB-1k results beside the run's, e.g. vit-b16-i21k-full,vit-l16-i21k (see tasks/published.py); a timm start with published rows for the same method gets them unasked."),
    recipe: Optional[str] = RECIPE,
    set_: List[str] = SET,
) -> None:
    """Transfer a pre-trained ViT: sweep, retrain, test (VTAB-1k protocol), print and save the results."""
    options = {k: v for k, v in locals().items() if k not in ("resume", "recipe", "set_", "adapter") and v is not None}
    if adapter:
        options["adapters"] = list(adapter)
    for name, value in (("mean", mean), ("std", std)):
        if value is not None:
            options[name] = number_list(value, float, f"--{name}", "0.5,0.5,0.5")
    if seeds is not None:
        options["seeds"] = number_list(seeds, int, "--seeds", "0,1,2")
    if compare is not None:
        from ..spec import split_specs

        options["compare"] = split_specs(compare, "--compare")
    if lrs is not None:
        options["lrs"] = number_list(lrs, float, "--lrs", ",".join(map(str, D.lrs)))
    if sweep_steps is not None:
        options["sweep_steps"] = number_list(sweep_steps, int, "--sweep-steps", ",".join(map(str, D.sweep_steps)))
    chosen = resolve(TransferConfig, "transfer", recipe, set_, options)
    from ..transfer import transfer as run_transfer  # torch, timm, accelerate: seconds, so only here

    run_transfer(TransferConfig(**chosen), resume=resume)

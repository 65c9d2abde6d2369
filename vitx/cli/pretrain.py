"""`vitx pretrain`: pre-train a backbone with an objective through Accelerate."""
from __future__ import annotations

from typing import List, Optional

import typer

from ..recipe import resolve
from ..runner.config import PretrainConfig
from .options import RECIPE, SET

D = PretrainConfig()  # defaults shown in --help


def pretrain(
    objective: Optional[str] = typer.Option(None, help=f"Objective, with options: 'supervised(label_smoothing=0.1)'. \\[default: {D.objective}]"),
    model: Optional[str] = typer.Option(None, help=f"Backbone name (see `vitx models`) or timm:<name>. \\[default: {D.model}]"),
    data: Optional[str] = typer.Option(None, help=f"embedded:leaves|shapes|digits; an image folder (class subfolders, or metadata.csv); a save_to_disk, parquet or VTAB-1k release folder; hf:owner/name; or WebDataset shards ('shards/train-{{0000..0099}}.tar', a folder of .tar, URLs). \\[default: {D.data}]"),
    image_size: Optional[int] = typer.Option(None, help="Input resolution; a multiple of the patch size. \\[default: the model's]"),
    batch_size: Optional[int] = typer.Option(None, help=f"Global batch per optimiser step. \\[default: {D.batch_size}]"),
    steps: Optional[int] = typer.Option(None, help=f"Optimiser steps. \\[default: {D.steps}]"),
    lr: Optional[float] = typer.Option(None, help=f"Peak learning rate. \\[default: {D.lr}]"),
    warmup_steps: Optional[int] = typer.Option(None, help=f"Linear warm-up steps. \\[default: {D.warmup_steps}]"),
    schedule: Optional[str] = typer.Option(None, help=f"Decay after warm-up: cosine or linear. \\[default: {D.schedule}]"),
    optimizer: Optional[str] = typer.Option(None, help=f"adamw, adam or sgd (momentum 0.9). \\[default: {D.optimizer}]"),
    weight_decay: Optional[float] = typer.Option(None, help=f"\\[default: {D.weight_decay}]"),
    grad_clip: Optional[float] = typer.Option(None, help=f"Global gradient-norm clip; 0 disables. \\[default: {D.grad_clip}]"),
    precision: Optional[str] = typer.Option(None, help=f"Mixed precision: no, bf16 or fp16 (GPU). \\[default: {D.precision}]"),
    grad_accum: Optional[int] = typer.Option(None, help=f"Gradient accumulation steps. \\[default: {D.grad_accum}]"),
    output_dir: Optional[str] = typer.Option(None, help=f"Run directory. \\[default: {D.output_dir}]"),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --output-dir from its last checkpoint."),
    seed: Optional[int] = typer.Option(None, help=f"\\[default: {D.seed}]"),
    save_every: Optional[int] = typer.Option(None, help=f"Checkpoint every N steps (and at the end). \\[default: {D.save_every}]"),
    save_every_minutes: Optional[float] = typer.Option(None, help="Also checkpoint when this many minutes have passed since the last save; 0: off. \\[default: 0]"),
    stop_signals: Optional[str] = typer.Option(None, help=f"On these signals, checkpoint at the next step and exit 75 (a second one exits at once); '' to leave them alone. \\[default: {D.stop_signals}]"),
    keep_checkpoints: Optional[int] = typer.Option(None, help=f"How many checkpoints to keep. \\[default: {D.keep_checkpoints}]"),
    log_every: Optional[int] = typer.Option(None, help=f"Log metrics every N steps. \\[default: {D.log_every}]"),
    log_format: Optional[str] = typer.Option(None, help="Progress: auto (a bar on a terminal; a plain, flushed line every --log-every steps in a log file or pipe), bar, lines or json (a JSON object per line). \\[default: auto]"),
    quiet: Optional[bool] = typer.Option(None, "--quiet/--no-quiet", help="Print nothing but errors (metrics.jsonl is written as always)."),
    eval_samples: Optional[int] = typer.Option(None, help=f"Validation images evaluated at each checkpoint; 0 disables. \\[default: {D.eval_samples}]"),
    workers: Optional[int] = typer.Option(None, help="Loader worker processes per process. \\[default: the cores available / local processes - 1; at most 4 when training on the CPU]"),
    skip_corrupt: Optional[bool] = typer.Option(None, "--skip-corrupt/--no-skip-corrupt", help="Skip (and count) undecodable images instead of stopping."),
    monitor: Optional[str] = typer.Option(None, help="Labelled data, one or several comma-separated (e.g. embedded:digits,embedded:shapes): log few-shot linear and kNN accuracy of the features at each checkpoint."),
    monitor_every: Optional[int] = typer.Option(None, help="Also run the --monitor every N steps; 0: at checkpoints only. \\[default: 0]"),
    monitor_features: Optional[str] = typer.Option(None, help="What the --monitor reads: pre-logits (the paper's few-shot features), backbone (\\[class] token) or patch-mean (the mean patch token: what masked modelling trains). \\[default: pre-logits]"),
    compile: Optional[bool] = typer.Option(None, "--compile/--no-compile", help="torch.compile the training step's forward and backward (minutes of compilation first; pays off on long GPU runs)."),
    tf32: Optional[bool] = typer.Option(None, "--tf32/--no-tf32", help="On GPUs that have it, float32 matmuls in TF32 (10-bit mantissa, ~8x the float32 rate). \\[default: on]"),
    stream: Optional[bool] = typer.Option(None, "--stream/--no-stream", help="Stream a hub dataset (or a local copy of one) instead of downloading it whole; tar shards always stream."),
    label_key: Optional[str] = typer.Option(None, help="The column (or json.<field> of WebDataset shards) that holds the labels. \\[default: a ClassLabel column, else label, labels, cls, class, fine_label, target, category or txt]"),
    image_key: Optional[str] = typer.Option(None, help="The column that holds the images. \\[default: the first image column]"),
    shuffle_buffer: Optional[int] = typer.Option(None, help=f"Streams: shuffle through a seeded buffer of this many encoded images per process; 0: read in order. \\[default: {D.shuffle_buffer}]"),
    grad_checkpointing: Optional[bool] = typer.Option(None, "--grad-checkpointing/--no-grad-checkpointing", help="Trade compute for memory."),
    crop_scale: Optional[float] = typer.Option(None, help=f"Smallest random-crop area fraction. \\[default: {D.crop_scale}]"),
    hflip: Optional[bool] = typer.Option(None, "--hflip/--no-hflip", help="Random horizontal flips of training images; off where a mirror image is another class (digits, text). \\[default: on]"),
    randaugment: Optional[str] = typer.Option(None, help="timm RandAugment policy for training images, e.g. rand-m9-mstd0.5-inc1. \\[default: none]"),
    random_erasing: Optional[float] = typer.Option(None, help="Probability of timm's RandomErasing per training image. \\[default: 0]"),
    curves: Optional[bool] = typer.Option(None, "--curves/--no-curves", help="At each checkpoint, draw curves.png (loss, accuracy, monitor, learning rate) from metrics.jsonl. \\[default: on]"),
    log_with: Optional[str] = typer.Option(None, help="Accelerate tracker: auto (tensorboard if installed), none, wandb, ..."),
    max_nonfinite_steps: Optional[int] = typer.Option(None, help=f"Steps with a non-finite loss or gradient are skipped; stop after this many in a row. \\[default: {D.max_nonfinite_steps}]"),
    recipe: Optional[str] = RECIPE,
    set_: List[str] = SET,
) -> None:
    """Pre-train a ViT. Defaults: a 2-minute CPU demo (vit-nano/4, supervised, embedded shapes at 16px)."""
    options = {k: v for k, v in locals().items() if k not in ("resume", "recipe", "set_") and v is not None}
    chosen = resolve(PretrainConfig, "pretrain", recipe, set_, options)
    from ..runner import pretrain as run_pretrain  # torch, timm, accelerate: seconds, so only here

    run_pretrain(chosen, resume=resume)

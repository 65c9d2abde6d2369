"""`vitx predict`: the top-k classes of image files with a transfer's (or a supervised pre-training's) classifier."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, List, Sequence

import typer

from ..errors import VitxError

if TYPE_CHECKING:
    from ..predict import Prediction


def predict(
    run: str = typer.Argument(..., metavar="RUN", help="A transfer: its --output-dir (one task), a task's directory or its final/ model; or a supervised pre-training run or checkpoint."),
    images: List[str] = typer.Argument(..., metavar="IMAGE|FOLDER...", help="Image files, or folders (searched recursively, sorted)."),
    top_k: int = typer.Option(5, help="Classes to show per image (at most the class count)."),
    batch_size: int = typer.Option(64, help="Images per forward pass."),
    json_: bool = typer.Option(False, "--json", help="Print JSON to stdout instead of a table."),
    csv_: bool = typer.Option(False, "--csv", help="Print CSV (image, rank, class, label, probability) to stdout."),
    use_ema: bool = typer.Option(False, "--use-ema", help="Classify with the run's moving average of its weights (saved with --ema-decay)."),
    skip_corrupt: bool = typer.Option(False, "--skip-corrupt", help="Go on past unreadable images (each named in one line on stderr)."),
) -> None:
    """Classify images, preprocessed exactly as the run's evaluation was; on the device Accelerate picks."""
    if json_ and csv_:
        raise VitxError("--json and --csv each print everything; choose one")
    from ..predict import list_images, predict as run_predict, to_csv, to_json
    from ..runner.launch import is_main_process, process_device
    from ..runs.trained import resolve_run

    if not is_main_process():  # under a launcher: one process predicts, on its own device
        return
    trained = resolve_run(run, use_ema)
    predictions = run_predict(trained, list_images(images), top_k=top_k, batch_size=batch_size,
                              skip_corrupt=skip_corrupt, device=process_device(),
                              on_skip=lambda line: print(f"skipped: {line}", file=sys.stderr))
    names, recorded = trained.class_names()
    if not recorded:
        print(f"note: {trained.path} records no class names; labels are the class indices", file=sys.stderr)
    if json_:
        sys.stdout.write(to_json(predictions, names) + "\n")
    elif csv_:
        sys.stdout.write(to_csv(predictions, names))
    else:
        _table(predictions, names)


def _table(predictions: Sequence["Prediction"], names: Sequence[str]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    k = max(len(p.classes) for p in predictions)
    table = Table(title=f"top-{k} predictions")
    table.add_column("image", overflow="fold")
    for rank in range(1, k + 1):
        table.add_column(f"#{rank}", justify="left")
    for p in predictions:
        table.add_row(escape(p.image), *(f"{escape(str(names[c]))} {prob:.1%}"  # (a class folder [b]: as written)
                                         for c, prob in zip(p.classes, p.probabilities)))
    Console().print(table)

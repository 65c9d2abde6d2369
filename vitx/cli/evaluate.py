"""`vitx eval fewshot`: few-shot linear evaluation of frozen features (the paper's §4 / big_vision)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..errors import VitxError
from ..spec import split_specs
from ..runner.config import check_numbers, default_workers
from ..evaluation import FEWSHOT_REG
from .options import number_list

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Evaluate frozen features.")


@app.command("fewshot")
def fewshot(
    start: str = typer.Option("runs/pretrain", "--from", help="A vitx run or checkpoint directory, timm:<name>, or scratch."),
    model: Optional[str] = typer.Option(None, help="Backbone for --from scratch."),
    data: Optional[str] = typer.Option(None, help="Labelled data, one or several comma-separated: embedded:digits|shapes, an image folder, a save_to_disk or parquet folder, hf:owner/name, WebDataset shards. \\[default: embedded:digits]"),
    label_key: Optional[str] = typer.Option(None, help="--data's label column (or json.<field>). \\[default: found]"),
    image_key: Optional[str] = typer.Option(None, help="--data's image column. \\[default: the first image column]"),
    task: Optional[str] = typer.Option(None, help="Or registered tasks, comma-separated, e.g. vtab/dsprites_loc,vtab/dsprites_ori (their train and test splits)."),
    data_dir: Optional[str] = typer.Option(None, help="Local copy of the task's data."),
    shots: str = typer.Option("1,5,10,25", help="Images per class."),
    seeds: int = typer.Option(3, help="Draws of the shots per count (seeds 0..N-1)."),
    reg: float = typer.Option(FEWSHOT_REG, help="L2 regularisation of the least-squares head."),
    image_size: Optional[int] = typer.Option(None, help="Resolution; position embeddings are interpolated. \\[default: the checkpoint's]"),
    mean: Optional[str] = typer.Option(None, help="Input normalisation mean per RGB channel, e.g. 0.485,0.456,0.406. \\[default: the start's]"),
    std: Optional[str] = typer.Option(None, help="Input normalisation std per RGB channel. \\[default: the start's]"),
    interpolation: Optional[str] = typer.Option(None, help="bicubic, bilinear or nearest. \\[default: the start's]"),
    preprocess_as: str = typer.Option("start", "--preprocess", help="Image geometry: start (the start's eval transform: timm's for a timm start, a centre crop otherwise; a task's images squashed whole, as VTAB does) or big_vision (its few-shot evaluator's: short side to S·256/224, centre crop S, for every dataset)."),
    test_samples: int = typer.Option(0, help="Evaluate on the first N test images; 0: all."),
    output: Optional[str] = typer.Option(None, help="Write the numbers as JSON here."),
    seed: int = typer.Option(0, help="Initialisation of --from scratch (the shots are drawn with seeds 0..N-1)."),
    features: str = typer.Option("pre-logits", help="pre-logits (the paper's: after the pre-training head's tanh "
                                 "layer when it has one), backbone (the \\[class] token after the final norm) or "
                                 "patch-mean (the mean of the patch tokens: what masked modelling trains)."),
) -> None:
    """Regularised least squares on frozen pre-logit features: accuracy at 1/5/10/25 shots over seeds."""
    from ..adapters import resize_backbone
    from ..checkpoint import atomic_write_text
    from ..data import Preprocess
    from ..data.opener import DataOptions, looks_like_data, open_labelled
    from ..tasks import get_task, open_full_splits
    from ..runner.launch import is_main_process, process_device
    from ..evaluation.fewshot import evaluate_sources
    from ..transfer.config import TransferConfig
    from ..runs.start import load_start, representation, start_input

    if not is_main_process():  # under a launcher: one process does the (small) work, on its own device
        return

    shot_list = number_list(shots, int, "--shots", "1,5,10,25")
    if min(shot_list) <= 0:
        raise VitxError(f"--shots are images per class and must be positive, got {shots}")
    if seeds <= 0:
        raise VitxError(f"--seeds must be positive, got {seeds}")
    check_numbers({"reg": reg, "image_size": image_size, "test_samples": test_samples, "seed": seed})
    if reg <= 0:  # 0 leaves the least-squares system singular; below 0 it solves for nonsense
        raise VitxError(f"--reg must be positive (the paper's is {FEWSHOT_REG:g}), got {reg:g}")
    if image_size is not None and image_size <= 0:
        raise VitxError(f"--image-size must be positive, got {image_size}")
    if test_samples < 0 or seed < 0:
        raise VitxError("--test-samples and --seed must not be negative")
    backbone = load_start(start, model, seed)
    size = image_size or int(backbone.patch_embed.img_size[0])
    given = start_input(start, backbone)  # the start's mean, std and interpolation; the flags override them
    check = TransferConfig(mean=number_list(mean, float, "--mean", "0.5,0.5,0.5") if mean else None,
                           std=number_list(std, float, "--std", "0.5,0.5,0.5") if std else None,
                           interpolation=interpolation).validate()
    normal = dict(mean=tuple(check.mean or given["mean"]), std=tuple(check.std or given["std"]),
                  interpolation=check.interpolation or given["interpolation"])
    if mean or std or interpolation:
        given["source"] = "--mean/--std/--interpolation"
    backbone = resize_backbone(backbone, size)
    model = representation(backbone, start, features)
    if task and data:
        raise VitxError("give --data or --task, not both")
    if preprocess_as not in ("start", "big_vision"):
        raise VitxError(f"--preprocess must be start or big_vision, got '{preprocess_as}'")
    results = []
    for item in split_specs(task, "--task") if task else split_specs(data or "embedded:digits", "--data"):
        as_task = bool(task) and not looks_like_data(item)  # your own data given as --task: the same as --data
        if as_task:
            train, test, _ = open_full_splits(get_task(item), data_dir)
            preprocess = Preprocess(image_size=size, squash=True, **normal)
        else:
            train, test = open_labelled(item, "eval fewshot", DataOptions(label_key=label_key, image_key=image_key,
                                                                         image_size=size))
            preprocess = Preprocess(image_size=size, eval_crop_pct=given["crop_pct"],
                                    eval_resize=given["eval_resize"], **normal)
        if preprocess_as == "big_vision":  # one geometry for every dataset, as big_vision's evaluator has
            preprocess = Preprocess(image_size=size, eval_resize="big_vision", **normal)
        result = evaluate_sources(model, train, test, preprocess, shot_list, range(seeds), reg, test_samples,
                                  workers=default_workers(), device=process_device())
        result = {"from": start, "data": item, "image_size": size, "features": model.kind,
                  "input": {**normal, "crop_pct": preprocess.eval_crop_pct, "eval_resize": preprocess.eval_resize,
                            "squash": preprocess.squash, "from": given["source"]}, **result}
        _print_table(result, start, reg, model.kind)
        results.append(result)
    result = results[0] if len(results) == 1 else {"from": start, "datasets": results}
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(output), json.dumps(result, indent=2))


def _print_table(result: dict, start: str, reg: float, kind: str) -> None:
    table = Table(title=f"few-shot linear evaluation: {result['data']} from {start}")
    table.add_column("shots", justify="right")
    table.add_column("mean top-1", justify="right")
    table.add_column("per seed", justify="right")
    for k, row in result["shots"].items():
        table.add_row(k, f"{row['mean']:.2%}", "  ".join(f"{a:.1%}" for a in row["per_seed"]))
    table.caption = (f"{result['num_classes']} classes, chance {1 / result['num_classes']:.1%}; "
                     f"{result['test_samples']} test images; L2 {reg:g}; {result['feature_dim']}-d features: "
                     f"{escape(kind)}")
    Console().print(table)

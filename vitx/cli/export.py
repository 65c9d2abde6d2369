"""`vitx export`: a run as a Hugging Face hub folder (config.json, model.safetensors, README.md) for timm."""
from __future__ import annotations

from typing import Optional

import typer


def export(
    run: str = typer.Argument(..., metavar="RUN|CHECKPOINT", help="A pre-training run or checkpoint directory, or a transfer: its --output-dir (one task), a task's directory or its final/ model."),
    to: str = typer.Option(..., "--to", metavar="DIR", help="The folder to write: new or empty (outside the run)."),
    push: Optional[str] = typer.Option(None, "--push", metavar="OWNER/NAME", help="Also upload the export to this Hugging Face model repo (created if needed; needs a token)."),
    use_ema: bool = typer.Option(False, "--use-ema", help="Export the run's moving average of its weights (ema.safetensors, saved with --ema-decay) instead of its live weights."),
    export_teacher: bool = typer.Option(False, "--export-teacher", help="Export the objective's teacher backbone (teacher.safetensors: DINO's moving average of the student, which DINO evaluates) instead of the student."),
    force: bool = typer.Option(False, "--force", help="Write into a folder that holds other files (an earlier export, a repo clone): replace only the export's own files (config.json, model.safetensors, README.md, curves.png), keep everything else."),
) -> None:
    """Write RUN for timm: `timm.create_model("local-dir:DIR", pretrained=True)`, or hf-hub:OWNER/NAME once pushed."""
    from ..export import export_run, push_folder
    from ..export.push import check_repo_id
    from ..runner.launch import is_main_process

    if not is_main_process():  # under a launcher: one process writes (and pushes) the folder
        return
    if push:
        check_repo_id(push)
    done = export_run(run, to, repo_id=push, force=force, ema=use_ema, teacher=export_teacher)
    what = f"a classifier of {done.num_classes} classes" if done.num_classes else \
        "the teacher's backbone" if export_teacher else "the backbone"
    typer.echo(f"exported {done.run.path} ({what}) → {done.folder}: "
               f"timm.create_model(\"local-dir:{done.folder}\", pretrained=True)")
    if push:
        url = push_folder(done.folder, push, done.files)
        typer.echo(f"pushed → {url}: timm.create_model(\"hf-hub:{push}\", pretrained=True)")

"""`vitx eval fewshot`: few-shot linear evaluation of frozen features (the paper's §4 / big_vision). Its options
are `FewshotConfig`'s declared settings; the work is `transfer/frozen.py`'s."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from ..evaluation.config import FewshotConfig
from .options import command

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Evaluate frozen features.")


def _run(options: dict[str, Any], resume: bool, recipe: Optional[str], sets: list[str]) -> None:
    from ..runner.launch import is_main_process

    cfg = FewshotConfig(**options).validate()
    if not is_main_process():  # under a launcher: one process does the (small) work, on its own device
        return
    from ..checkpoint import atomic_write_text
    from ..transfer.frozen import evaluate_fewshot
    from ..transfer.report import print_fewshot

    results = evaluate_fewshot(cfg, each=lambda result: print_fewshot(result, cfg.start, cfg.reg))
    if cfg.output:
        Path(cfg.output).parent.mkdir(parents=True, exist_ok=True)
        body = results[0] if len(results) == 1 else {"from": cfg.start, "datasets": results}
        atomic_write_text(Path(cfg.output), json.dumps(body, indent=2))


app.command("fewshot")(command(
    FewshotConfig, _run, "fewshot", "Regularised least squares on frozen pre-logit features: accuracy at 1/5/10/25 "
    "shots over seeds.", training=False))

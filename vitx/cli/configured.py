"""The commands whose options are their config's declared settings (vitx/settings/, through `options.command`):
`vitx pretrain` (`PretrainConfig`), `vitx transfer` (`TransferConfig`) and `vitx eval NAME` for every registered
evaluator (`vitx/evaluators/`: its config, its work and its table in one file; the driver is `evaluators/frozen.py`)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from ..console import say
from ..recipe import resolve
from ..runner.preemption import continues_with
from ..runner.config import PretrainConfig
from ..transfer.config import TransferConfig, with_protocol
from .options import command


def _pretrain(options: dict[str, Any], resume: bool, recipe: Optional[str], sets: list[str]) -> None:
    continues_with("given --resume, the run continues from what is on disk")  # (a stop's line)
    chosen = resolve(PretrainConfig, "pretrain", recipe, sets, options)
    from ..pages import write_run_page
    from ..runner import pretrain as run_pretrain  # torch, timm, accelerate: seconds, so only here

    run_pretrain(chosen, resume=resume, page=write_run_page)  # the run's report.html at its end or stop


def _transfer(options: dict[str, Any], resume: bool, recipe: Optional[str], sets: list[str]) -> None:
    continues_with("given --resume, the suite continues from what is on disk")  # (a stop's line)
    chosen = with_protocol(resolve(TransferConfig, "transfer", recipe, sets, options))
    from ..pages import write_transfer_page
    from ..transfer import transfer as run_transfer  # torch, timm, accelerate: seconds, so only here

    run_transfer(TransferConfig(**chosen), resume=resume, page=write_transfer_page)  # its report.html


def _evaluation(name: str) -> Any:
    """`vitx eval NAME`'s work: the evaluator's config checked, the evaluator run on one process by the driver
    (`evaluators/frozen.py`), each dataset's table printed as soon as it is done, the numbers written as JSON."""
    def run(options: dict[str, Any], resume: bool, recipe: Optional[str], sets: list[str]) -> None:
        from ..evaluators import create_evaluator
        from ..runner.launch import is_main_process

        evaluator = create_evaluator(name)
        evaluator.cfg = type(evaluator.cfg)(**options).validate()
        if not is_main_process():  # under a launcher: one process does the (small) work, on its own device
            return
        from rich.console import Console

        from ..safe_io import atomic_write_text
        from ..evaluators.frozen import evaluate
        from ..runs.trained import stopped_early

        stopped = stopped_early(evaluator.cfg.start)
        if stopped:
            say(Console(), stopped)
        results = evaluate(evaluator, each=lambda result: evaluator.table(result, Console()))
        cfg = evaluator.cfg
        if cfg.output:
            Path(cfg.output).parent.mkdir(parents=True, exist_ok=True)
            body = results[0] if len(results) == 1 else {"from": cfg.start, "datasets": results}
            atomic_write_text(Path(cfg.output), json.dumps(body, indent=2))
    return run


pretrain = command(PretrainConfig, _pretrain, "pretrain",
                   "Pre-train a ViT. Defaults: a 2-minute CPU demo on 2 cores (vit-nano/4, supervised, embedded shapes at 16px).")
transfer = command(TransferConfig, _transfer, "transfer",
                   "Transfer a pre-trained ViT: sweep, retrain, test (VTAB-1k protocol), print and save the results.")
eval_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Evaluate frozen features.")


def add_evaluators() -> None:
    """`vitx eval NAME` for every registered evaluator (vitx/evaluators/, and plugins': called after they load),
    its options its config's settings."""
    import sys

    from ..registry import EVALUATORS

    eval_app.registered_commands.clear()
    for name in EVALUATORS.names():  # names(): installed plugins' evaluators (entry points) too
        entry = EVALUATORS.get(name)
        try:
            made = command(entry.obj.config, _evaluation(name), name, entry.obj.summary or entry.description,
                           training=False)
        except Exception as exc:  # a plugin's broken evaluator: said in one line, the other commands still work
            print(f"warning: evaluator {name} ({entry.source}) has no usable settings and no command: "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        eval_app.command(name)(made)

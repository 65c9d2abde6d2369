"""`vitx pretrain`'s entry: a run's config resolved (new, or resumed from its folder), built, announced and trained."""
from __future__ import annotations

from typing import Any

from rich.console import Console

from .loop import Trainer
from .preemption import doing
from .reporting import announce, finished, make_console, write_run_page
from .setup import build, resolve_config


def pretrain(explicit: dict[str, Any], resume: bool = False, console: Console | None = None) -> dict[str, Any]:
    """Run (or resume) a pre-training from explicitly given options; returns the last logged metrics."""
    with doing("during start-up, before the first step"):  # a stop signal meanwhile: stopped at once, one line
        cfg, resume_from = resolve_config(explicit, resume)
        setup = build(cfg, resume_from)
    console = console or make_console(cfg.quiet, cfg.log_format)
    main = setup.accelerator.is_main_process
    if main:
        announce(setup, resume, console)
    if setup.start_step >= cfg.steps:
        if main:
            setup.run.repair()  # the top-level files a kill may have left at an older step
            console.print(f"{cfg.output_dir} is already complete at step {setup.start_step}; nothing to do",
                          soft_wrap=True)
        return {"step": setup.start_step}
    trainer = Trainer(setup, console)
    try:
        last = trainer.fit()
    except BaseException as exc:  # a stop, a collapse, a failure: the page says where the run stands, then on
        if main and trainer.step_count > setup.start_step:  # (this process trained here: the folder is its own)
            write_run_page(cfg, console, exc)
        raise
    if main:
        finished(last, cfg.output_dir, console)
        write_run_page(cfg, console)
    return last


__all__ = ["pretrain"]

"""`vitx pretrain`'s entry: a run's config resolved (new, or resumed from its folder), built, announced and trained."""
from __future__ import annotations

from typing import Any, Callable

from rich.console import Console

from .loop import Trainer
from .preemption import doing
from ..console import make_console, say
from .reporting import announce, finished
from .setup import build, resolve_config
from .threads import kept_threads


@kept_threads()  # the caller's torch threads back afterwards (the run fits them to its cores)
def pretrain(explicit: dict[str, Any], resume: bool = False, console: Console | None = None,
             page: Callable[..., None] | None = None) -> dict[str, Any]:
    """Run (or resume) a pre-training from explicitly given options; returns the last logged metrics. `page`:
    called as page(cfg, console[, the exception]) at the end or a stop, on the main process (`vitx pretrain`
    passes vitx.pages.write_run_page: the run's report.html, which the pages built above the runner write)."""
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
            say(console, f"{cfg.output_dir} is already complete at step {setup.start_step}; nothing to do")
            if page and not (setup.run.path / "report.html").exists():  # a stop after its last line took it
                page(cfg, console)
        return {"step": setup.start_step}
    trainer = Trainer(setup, console)
    try:
        last = trainer.fit()
    except BaseException as exc:  # a stop, a collapse, a failure: the page says where the run stands, then on
        if page and main and trainer.step_count > setup.start_step:  # (trained here: the folder is its own)
            page(cfg, console, exc)
        raise
    if main:
        finished(last, cfg.output_dir, console)
        if page:
            page(cfg, console)
    return last


__all__ = ["pretrain"]

"""The runner: one Accelerate training loop that drives any objective through the `Objective` contract.

Read top to bottom, `Trainer._fit` is the loop: a step (`stepping.py`: accumulation, clipping, the skip of a
non-finite update), then what is due after it, decided in one place (`due`): log, validate, monitor, watch for a
collapse, save, stop.
Validation and the monitor are `evaluating.py`'s, a checkpoint is `saving.py`'s (the run-folder layout:
`runs/rundir.py`), progress lines, metrics.jsonl and the start and end lines `reporting.py`'s. It knows nothing
about what the objective computes. What it runs is built in `setup.py`; where it runs, in `launch.py`; what its
random draws depend on, in `randomness.py`.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
from accelerate.utils import DistributedType
from rich.console import Console

from ..data.views import expand
from ..errors import Collapsed, DISK_STATE_ERRNOS, Preempted, VitxError, cannot_write
from ..evaluation.monitor import Probe
from .agreement import Agreement
from .config import default_workers, micro_batch
from .evaluating import Evaluating, watch_figures
from .launch import end_run, tracker_kwargs
from .preemption import StopRequests, Waiting, doing, parse_signals, writing
from ..console import make_console
from .reporting import MetricsLog, Progress
from .saving import Saving
from .setup import Setup
from .stepping import Stepping

COMPILE_BACKEND = "inductor"


def compiled(model: torch.nn.Module) -> torch.nn.Module:
    """`torch.compile(model)` drawing the same random numbers as eager (inductor's `fallback_random`): MPP's
    corruption plans, MAE's masks and SimCLR's views are unchanged, so --compile changes the speed, not the
    run, and a resumed compiled run stays exact."""
    import torch._inductor.config

    torch._inductor.config.fallback_random = True
    return torch.compile(model, backend=COMPILE_BACKEND)


@dataclass(frozen=True)
class Due:
    """What comes after a step."""

    log: bool  # metrics to metrics.jsonl, the trackers and the progress line
    validate: bool  # the validation split (and the EMA's)
    monitor: bool  # the --monitor's evaluators
    watch: bool  # the collapse watch's label-free figures (evaluation/collapse.py)
    save: bool  # a checkpoint
    stop: bool  # a stop signal: save, then exit 75


class Trainer(Stepping, Evaluating, Saving):
    """Runs the steps of a `Setup`: `step()` for one optimiser step, `fit()` for the whole run."""

    def __init__(self, setup: Setup, console: Console | None = None, label: str = "pretrain") -> None:
        self.setup = setup
        self.label = label
        self.console = console or make_console(setup.cfg.quiet, setup.cfg.log_format)
        cfg, acc = setup.cfg, setup.accelerator
        self.micro = micro_batch(cfg, acc.num_processes)  # per process, per micro-step
        self.workers = default_workers() if cfg.workers < 0 else cfg.workers
        self.step_count = setup.start_step
        self._batches: Iterator[dict[str, Any]] | None = None
        # metric sums since the last log, all on the device: nothing in a step waits to read them
        self._sums: dict[str, torch.Tensor] = {}
        zero = torch.zeros((), device=acc.device)
        self._kept = zero.clone()  # micro-steps whose update was applied
        self._lr_total = zero.clone()  # Σ learning rate over applied updates (a Python float times a flag)
        self._nonfinite_total = zero.clone()  # optimiser steps skipped for a non-finite loss or gradient, this session
        self._nonfinite_streak = zero.clone()  # of them, consecutive up to now
        # with a fused Adam(W) the skip itself happens on the device (the kernel's found_inf): no step waits
        self.inner_optimizer = getattr(setup.optimizer, "optimizer", setup.optimizer)
        self.skip_on_device = (bool(getattr(self.inner_optimizer, "defaults", {}).get("fused"))
                               and cfg.precision != "fp16" and acc.distributed_type != DistributedType.DEEPSPEED
                               and isinstance(self.inner_optimizer, (torch.optim.Adam, torch.optim.AdamW)))
        self._monitor: Probe | None = None  # the --monitor probes (evaluation/monitor.py), built at first use
        # --compile: the training forward runs through a compiled handle on the same module (same parameters;
        # Accelerate keeps preparing, accumulating and saving the module itself). Evaluation stays eager: its
        # batch sizes vary and it runs in eval mode, each of which would be another compilation.
        self.forward = compiled(setup.model) if cfg.compile else setup.model
        # DeepSpeed holds the weights in --precision's type and, unlike Accelerate's autocast, expects the inputs
        # in it too (as Hugging Face's Trainer casts them); everywhere else the images stay float32
        self.input_dtype = (next(setup.model.parameters()).dtype if acc.distributed_type == DistributedType.DEEPSPEED
                            else torch.float32)
        # the objective's crops (data/views.py), one entry per crop; none: one random resized crop per image
        self.views = expand(setup.objective.views(), setup.preprocess.image_size)
        self.corrupt_images = torch.zeros((), dtype=torch.long)
        self.nonfinite_steps = 0  # optimiser steps skipped for a non-finite loss or gradient norm (read at log steps)
        self.agreement = Agreement(acc, cfg.save_every_minutes)  # skip / stop / save, the same on every process
        self.stop_requested = False  # a stop signal reached some process: every process stops after this step
        self.saved_step = self.step_count  # the step of the last checkpoint (0: none yet)
        self.save_due = False  # --save-every-minutes has passed (by the main process's clock)
        self._tick = (0.0, self.step_count)  # (time, step) of the last log step: images per second since then
        self.input_wait = 0.0  # seconds the loop waited for the loader since then (its share: input_wait)
        self.watch = None  # the collapse watch (evaluation/collapse.py), built before the first step (`start_watch`)
        self._watch_images: torch.Tensor | bool | None = None  # decoded at the first watch (False: none to be had)
        self.collapse_stop = False  # --stop-on-collapse and a collapse was seen: save and stop after this step

    def due(self) -> Due:
        """What is due after the step just taken: the one place these decisions are made."""
        cfg, step = self.setup.cfg, self.step_count
        stop = self.stop_requested and step < cfg.steps  # at the last step: just finish
        save = step % cfg.save_every == 0 or step == cfg.steps or self.save_due or stop
        monitor = bool(cfg.monitor) and not stop and (save or (cfg.monitor_every > 0 and step % cfg.monitor_every == 0))
        watch = self.watching() and not stop and step % cfg.watch_every == 0
        log = save or monitor or watch or step % cfg.log_every == 0  # checkpoints are always logged, with validation
        return Due(log=log, validate=save and not stop, monitor=monitor, watch=watch, save=save, stop=stop)

    def fit(self) -> dict[str, Any]:
        setup, acc = self.setup, self.setup.accelerator
        main = acc.is_main_process
        with setup.run.exclusive() if main else contextlib.nullcontext(True) as owned:
            # checked under the lock: another run may have checkpointed here since this one looked (setup can
            # take minutes), and this one must not overwrite it
            latest = setup.run.latest() if main and owned else None
            moved = main and owned and (latest and latest.name) != (setup.resumed_from and setup.resumed_from.name)
            refused = acc.reduce(torch.tensor([0.0 if owned else 1.0, float(moved)], device=acc.device),
                                 reduction="sum")
            if refused[0] > 0:
                raise VitxError(f"another vitx process (pid {setup.run.holder()}) is writing {setup.run.path}; wait for it "
                                "to finish, or choose another --output-dir")
            if refused[1] > 0:
                now = f"its last checkpoint is now {latest.name}" if latest else \
                    "its checkpoints are gone" if main else "see the main process"
                raise VitxError(f"another vitx process wrote to {setup.run.path} after this run started ({now}); nothing "
                                "was overwritten: run the command again (with --resume to continue that run), or "
                                "choose another --output-dir")
            if latest is not None:
                setup.run.mirror(latest)  # a kill between a checkpoint and its top-level files left older ones there
            try:
                with writing(setup.run):  # a stop acted on at once names the last checkpoint here, or none
                    return self._fit()
            except OSError as exc:  # the disk filled up (or went read-only) under metrics.jsonl, say
                if exc.errno not in DISK_STATE_ERRNOS:
                    raise
                raise VitxError(f"{cannot_write(exc.filename or setup.run.path, exc)}; {setup.run.kept()}") from None
            finally:
                self.close()

    def _fit(self) -> dict[str, Any]:
        """The loop: a step's input, the step, then whatever is due after it."""
        cfg = self.setup.cfg
        with doing("during start-up, before the first step"):
            log = self._begin()
        last: dict[str, float] = {}
        due, saved = Due(False, False, False, False, False, False), None
        with Progress(self.console, cfg.log_format, self.setup.accelerator.is_main_process) as progress, \
                StopRequests(parse_signals(cfg.stop_signals)) as requests:
            self.agreement.requests = requests
            progress.start(f"{self.label} (resumed)" if self.setup.start_step else self.label, cfg.steps,
                           self.step_count)
            while self.step_count < cfg.steps:
                try:
                    batches = self._input(requests)
                except Waiting:  # a stop signal while it waited: at a step boundary, answered there
                    self.stop_requested = True
                    due = Due(log=False, validate=False, monitor=False, watch=False, stop=True,
                              save=self.step_count > self.saved_step)
                    saved = self.save() if due.save else None
                    break
                self.step(batches)
                due = self.due()
                if due.log:
                    last = self._report(due, log, progress)
                # --stop-on-collapse saw a collapse, or a stop was agreed during the step's evaluation: a checkpoint
                # of this step, then stop
                if self.collapse_stop or (self.stop_requested and not due.stop):
                    due = Due(log=due.log, validate=False, monitor=False, watch=False, save=True, stop=True)
                if due.save:
                    saved = self.save()
                progress.advance(self.step_count)
                if due.stop:
                    break
        self.agreement.requests = None
        self._end(log)
        if due.stop and self.collapse_stop:
            raise Collapsed(self.collapse_line(saved or self.setup.run.latest()))
        if due.stop:
            requests.answered()
            raise Preempted(self._stopped_line(requests.received or "a stop signal (on another process)", saved,
                                               due.save))
        return last

    def _input(self, requests: StopRequests) -> list[dict[str, Any]]:
        """The next step's micro-batches. The wait for them is a step boundary: a stop signal meanwhile is answered
        at once (`Waiting`), however long the batch would take, where every process can answer it there (one
        process alone, or before a launch's first step, when there is nothing to save together)."""
        acc = self.setup.accelerator
        waiting = time.perf_counter()
        with requests.at_once(acc.num_processes == 1 or self.step_count == self.setup.start_step):
            batches = [next(self.batches()) for _ in range(self.setup.cfg.grad_accum)]
        self.input_wait += time.perf_counter() - waiting  # the loop idle for its input (read at log steps)
        return batches

    def _stopped_line(self, signame: str, saved: Path | None, written: bool) -> str:
        """A stop request answered: where the run stands on disk, and how to continue. `written`: a checkpoint of
        this step was written at the stop (`saved`, its path, is the main process's alone)."""
        step, latest = self.step_count, saved or self.setup.run.latest()
        if written:
            name = f"checkpoint {latest}" if latest is not None else "the main process's checkpoint"
            return f"{signame} at step {step}: {name} written; run the same command with --resume to continue"
        if latest is not None:
            return (f"{signame} at step {step}, before its next step began: checkpoint {latest} holds it; run the "
                    "same command with --resume to continue")
        return (f"{signame} before the first step: nothing was trained; run the same command with --resume to "
                "start it")

    def _begin(self) -> MetricsLog | None:
        """Before the first step: leftovers of a killed save removed, metrics.jsonl opened (on resume, cut back
        to the checkpoint), trackers started, the objective told where the run stands, and the monitor's data
        read (at step 0 logged as the starting point): a bad --monitor fails before any training."""
        setup, cfg, acc = self.setup, self.setup.cfg, self.setup.accelerator
        main, resumed = acc.is_main_process, self.step_count > 0
        if main:
            setup.run.clean_partial()
        log = MetricsLog(setup.run.path / "metrics.jsonl", self.step_count if resumed else None) if main else None
        if acc.log_with:
            acc.init_trackers("vitx", config={k: ",".join(map(str, v)) if isinstance(v, (list, tuple)) else v
                                              for k, v in cfg.to_dict().items() if v is not None},  # hparams: scalars
                              init_kwargs=tracker_kwargs(cfg))
        setup.objective.epoch_steps = epoch_steps(setup.train_source, cfg.batch_size)
        setup.objective.on_fit_start(self.step_count, cfg.steps)
        figures = self.watched() if self.watching() and not resumed else {}
        start = {**(self.monitored() if cfg.monitor and not resumed else {}), **watch_figures(figures)}  # the start
        if start and log:
            log.write({"step": 0, **start})
        if cfg.monitor and resumed:
            self.monitor()
        self.start_watch({**start, **figures}, resumed)
        self._tick, self.input_wait = (time.perf_counter(), self.step_count), 0.0
        self.agreement.saved()
        return log

    def _report(self, due: Due, log: MetricsLog | None, progress: Progress) -> dict[str, float]:
        """A log step: the means since the last one, throughput, skips, and what `due` asks (validation, the
        monitor), to metrics.jsonl, the trackers and the progress line. Returns the logged record."""
        setup, cfg, acc, step = self.setup, self.setup.cfg, self.setup.accelerator, self.step_count
        metrics = self.pop_metrics()
        now = time.perf_counter()
        metrics["images_per_s"] = (step - self._tick[1]) * cfg.batch_size / max(now - self._tick[0], 1e-9)
        metrics["input_wait"] = min(1.0, self.input_wait / max(now - self._tick[0], 1e-9))  # of this process
        self._tick, self.input_wait = (now, step), 0.0
        if cfg.skip_corrupt:
            metrics["skipped_images"] = float(acc.reduce(self.corrupt_images.to(acc.device), "sum"))
        self.check_divergence()
        if self.nonfinite_steps:
            metrics["skipped_nonfinite"] = float(self.nonfinite_steps)  # one decision: the same on every process
        if due.validate:
            metrics.update(self.evaluate())
            if setup.ema is not None:
                metrics.update(self.evaluate(prefix="ema_val_", model=setup.ema.module))
        if due.monitor and not self.stop_pending():
            metrics.update(self.monitored())
        figures = self.watched() if due.watch and not self.stop_pending() else {}
        metrics.update(watch_figures(figures))
        if cfg.weight_decay_end is not None:
            metrics["weight_decay"] = self.weight_decay(step - 1)  # the last update's, as lr is
        said = self.watch_step(step, {**metrics, **figures})
        if log:
            log.write({"step": step, **metrics, **({"watch": said} if said else {})})
        acc.log(metrics, step=step)
        progress.log(step, metrics)
        return {"step": step, **metrics}

    def _end(self, log: MetricsLog | None) -> None:
        if log:
            log.close()
        end_run(self.setup.accelerator)  # trackers finished; the process group stays up for the next run


def epoch_steps(source: Any, batch_size: int) -> int | None:
    """Optimiser steps per pass over `source` (at least 1); None for a stream, whose length is unknown."""
    try:
        return max(1, len(source) // batch_size)
    except TypeError:
        return None


__all__ = ["Due", "Trainer", "compiled", "epoch_steps"]

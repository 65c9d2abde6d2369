"""The runner: one Accelerate training loop that drives any objective through the `Objective` contract.

It owns precision, accumulation, clipping, the per-step decisions (non-finite updates, stop signals, timed
saves), logging, evaluation and checkpoints; it knows nothing about what the objective computes. What it runs
is built in `setup.py`; where it runs, in `launch.py`; what its random draws depend on, in `randomness.py`.
"""
from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from accelerate.utils import DistributedType
from rich.console import Console
from safetensors import SafetensorError

from .. import __version__
from ..checkpoint import cannot_write, export_state, save_weights
from ..data import TensorSplit, eval_loader, first_sample_batch, train_loader
from ..data.loader import close, iterate
from ..data.views import expand
from ..errors import DISK_STATE_ERRNOS, Preempted, VitxError
from ..evaluation import AUTO
from ..evaluation.monitor import Evaluator, Monitors
from ..evaluation.representation import read_as
from .config import default_workers
from .launch import tracker_kwargs
from .agreement import Agreement
from .ema import RAW as EMA_RAW
from .preemption import StopRequests, parse_signals
from .randomness import EVAL, TRAIN, seed_position
from .reporting import MetricsLog, Progress, make_console
from .rundir import PREFIX, TEACHER, RunDir, step_number
from .setup import Setup, build, config_record, resolve_config


COMPILE_BACKEND = "inductor"


def compiled(model: torch.nn.Module) -> torch.nn.Module:
    """`torch.compile(model)` drawing the same random numbers as eager (inductor's `fallback_random`): MPP's
    corruption plans, MAE's masks and SimCLR's views are unchanged, so --compile changes the speed, not the
    run, and a resumed compiled run stays exact."""
    import torch._inductor.config

    torch._inductor.config.fallback_random = True
    return torch.compile(model, backend=COMPILE_BACKEND)


class Trainer:
    """Runs the steps of a `Setup`: `step()` for one optimiser step, `fit()` for the whole run."""

    def __init__(self, setup: Setup, console: Console | None = None, label: str = "pretrain") -> None:
        self.s = setup
        self.label = label
        self.console = console or make_console(setup.cfg.quiet)
        cfg, acc = setup.cfg, setup.accelerator
        self.micro = cfg.batch_size // (acc.num_processes * cfg.grad_accum)  # per process, per micro-step
        self.workers = default_workers() if cfg.workers < 0 else cfg.workers
        self.step_count = setup.start_step
        self._batches: Iterator[dict[str, Any]] | None = None
        # metric sums since the last log, all on the device: nothing in a step waits to read them
        self._sums: dict[str, torch.Tensor] = {}
        zero = torch.zeros((), device=acc.device)
        self._kept = zero.clone()  # micro-steps whose update was applied
        self._lr_total = zero.clone()  # Σ learning rate over applied updates (a Python float times a flag)
        self._skips = zero.clone()  # optimiser steps skipped for a non-finite loss or gradient, this session
        self._streak = zero.clone()  # of them, consecutive up to now
        # with a fused Adam(W) the skip itself happens on the device (the kernel's found_inf): no step waits
        self.inner_optimizer = getattr(setup.optimizer, "optimizer", setup.optimizer)
        self.skip_on_device = (bool(getattr(self.inner_optimizer, "defaults", {}).get("fused"))
                               and cfg.precision != "fp16" and acc.distributed_type != DistributedType.DEEPSPEED
                               and isinstance(self.inner_optimizer, (torch.optim.Adam, torch.optim.AdamW)))
        self._monitor: Evaluator | None = None  # the --monitor probes (evaluation/monitor.py), built at first use
        # --compile: the training forward runs through a compiled handle on the same module (same parameters;
        # Accelerate keeps preparing, accumulating and saving the module itself). Evaluation stays eager: its
        # batch sizes vary and it runs in eval mode, each of which would be another compilation.
        self.forward = compiled(setup.model) if cfg.compile else setup.model
        # the objective's crops (data/views.py), one entry per crop; none: one random resized crop per image
        self.views = expand(setup.objective.views(), setup.preprocess.image_size)
        self.skipped = torch.zeros((), dtype=torch.long)
        self.nonfinite = 0  # optimiser steps skipped for a non-finite loss or gradient norm (read at log steps)
        self.agreement = Agreement(acc, cfg.save_every_minutes)  # skip / stop / save, the same on every process
        self.stop_requested = False  # a stop signal reached some process: every process stops after this step
        self.save_due = False  # --save-every-minutes has passed (by the main process's clock)

    # ---- one optimiser step ------------------------------------------------------------------------------
    def batches(self) -> Iterator[dict[str, Any]]:
        """This process's micro-batches, uint8 on the host (pinned for a GPU); in-memory splits need no workers."""
        if self._batches is None:
            cfg, acc = self.s.cfg, self.s.accelerator
            source = self.s.train_source
            loader = train_loader(source, self.s.preprocess, global_micro_batch=self.micro * acc.num_processes,
                                  rank=acc.process_index, world=acc.num_processes, seed=cfg.seed,
                                  start_micro_step=self.step_count * cfg.grad_accum,
                                  workers=self._workers(source), skip_corrupt=cfg.skip_corrupt,
                                  pin=acc.device.type == "cuda", views=self.views)
            self._batches = iter(loader)
        return self._batches

    def _workers(self, source: Any) -> int:
        """Loader workers for `source`: none for a split held in memory (nothing to decode), unless the
        objective's crops are to be made (multi-crop augmentation is the work workers exist for)."""
        return 0 if isinstance(source, TensorSplit) and not self.views else self.workers

    def close(self) -> None:
        """Stop the training stream's loader workers (the end of every run, sweep point and failure)."""
        if self._batches is not None:
            close(self._batches)
            self._batches = None

    def to_device(self, batch: dict[str, Any], train: bool = False) -> dict[str, torch.Tensor]:
        """Host uint8 batch → the model's input on the device: images normalised there (a quarter of float32's
        transfer, and no float image on the host), then randomly erased when training asks for it."""
        device, pre = self.s.accelerator.device, self.s.preprocess
        label = batch["label"].to(device, non_blocking=True)
        if "views" in batch:  # the objective's crops: [(B, 3, S_v, S_v) float32, one per crop]
            return {"views": [pre.normalise(v.to(device, non_blocking=True)) for v in batch["views"]], "label": label}
        image = pre.normalise(batch["image"].to(device, non_blocking=True))  # (B, 3, S, S) float32
        if train:
            image = pre.erase(image)
        return {"image": image, "label": label}

    def step(self, micro_batches: list[dict[str, Any]] | None = None) -> None:
        """One optimiser step over `grad_accum` micro-batches (drawn from the stream when not given).

        A non-finite loss on any micro-batch, or a non-finite gradient norm, on any process, skips the update on
        every process (one decision, like AMP's loss scaler): the weights stay as they were, the schedule and
        the data move on, and the step is counted in `skipped_nonfinite`."""
        s, acc = self.s, self.s.accelerator
        batches = micro_batches or [next(self.batches()) for _ in range(s.cfg.grad_accum)]
        outs, bad = [], torch.zeros((), device=acc.device)
        ok: torch.Tensor | None = None  # 1.0: the update was applied on every process; 0.0: skipped everywhere
        for j, batch in enumerate(batches):
            # the randomness contract (randomness.py): draws depend on (seed, process, micro-step) only
            seed_position(s.cfg.seed, acc.process_index, self.step_count * s.cfg.grad_accum + j, TRAIN)
            self.skipped += batch["skipped"].sum()
            batch = self.to_device(batch, train=True)
            with acc.accumulate(s.model):
                out = self.forward(batch)
                bad = bad + (~torch.isfinite(out["loss"].detach())).float()
                acc.backward(out["loss"])
                if acc.sync_gradients:
                    s.objective.on_after_backward()
                    out["grad_norm"] = self._clip_gradients()
                    step_lr = self._peak_lr()  # the rate this update uses
                    bad = bad + (~torch.isfinite(out["grad_norm"])).float()
                    ok = self._decide_and_step(bad)
                    s.scheduler.step()
                s.optimizer.zero_grad(set_to_none=True)
            outs.append(out)
        self.step_count += 1
        keep = ok > 0
        for out in outs:  # a skipped step leaves no trace in the means (NaN × 0 is NaN: select, not weight)
            for k, v in out.items():
                v = torch.where(keep, v.detach().float().reshape(()).to(acc.device), 0.0)
                self._sums[k] = self._sums[k] + v if k in self._sums else v
        self._kept += ok * len(outs)
        self._lr_total += ok * step_lr
        self._skips += 1 - ok
        self._streak = (self._streak + 1) * (1 - ok)
        if not self.skip_on_device and not bool(keep):  # decided on the host anyway: check the streak now
            self.check_divergence()
        if s.ema is not None:  # a skipped update left the weights as they were: the average moves towards them
            s.ema.update(s.objective, step=self.step_count)
        s.objective.on_step_end(self.step_count)

    def _decide_and_step(self, nonfinite: torch.Tensor) -> torch.Tensor:
        """Skip or apply this update, the same on every process, and agree on stopping and saving after it
        (agreement.py). Returns the device flag ok (1.0 applied, 0.0 skipped)."""
        s, acc = self.s, self.s.accelerator
        if self.skip_on_device:
            ok = self.agreement.skip_on_device(nonfinite)
            self.inner_optimizer.found_inf = 1.0 - ok  # the fused kernel leaves weights, moments and step as they were
            s.optimizer.step()
            self.stop_requested, self.save_due = self.agreement.on_host()
            return ok
        skip, self.stop_requested, self.save_due = self.agreement.with_skip(nonfinite)
        if not skip:
            s.optimizer.step()
        return torch.full((), 0.0 if skip else 1.0, device=acc.device)

    def _peak_lr(self) -> Any:
        """The learning rate of the update about to be made, at full scale (layer decay scales the groups)."""
        group = self.s.optimizer.param_groups[0]
        return group["lr"] / group.get("lr_scale", 1.0) if group.get("lr_scale", 1.0) != 1.0 else group["lr"]

    def _clip_gradients(self) -> torch.Tensor:
        """The global gradient norm before clipping; clipped to --grad-clip (0: measured, not clipped)."""
        s, acc = self.s, self.s.accelerator
        norm = acc.clip_grad_norm_(s.model.parameters(), s.cfg.grad_clip if s.cfg.grad_clip > 0 else float("inf"))
        if norm is None:  # DeepSpeed clips inside its engine and reports nothing here: the loss check remains
            return torch.zeros((), device=acc.device)
        return torch.as_tensor(norm, dtype=torch.float32, device=acc.device)

    def check_divergence(self) -> None:
        """Read the skip counters (a wait for the device: at log steps, or after a skip decided on the host);
        stop the run when too many non-finite steps came in a row (it has diverged)."""
        skips, streak = (int(v) for v in torch.stack([self._skips, self._streak]).tolist())
        self.nonfinite = skips
        if streak >= self.s.cfg.max_nonfinite_steps:
            raise VitxError(f"{streak} optimiser steps in a row (up to step {self.step_count}) had a non-finite loss "
                            f"or gradient and were skipped: the run has diverged; {self.rescue(streak)} (or check "
                            "the data, or raise --max-nonfinite-steps)")

    def rescue(self, streak: int) -> str:
        """Where to go back to after a divergence. The weights of the last applied step are what went non-finite
        (skipped steps keep them: checkpoints written since hold them too), so the last good checkpoint is one
        from before that step: its weights were trained on, with a finite loss and gradient."""
        run = self.s.run
        good = run.latest(before=self.step_count - streak)
        if good is None:
            return "no checkpoint was written before that: start again with a lower --lr in another --output-dir"
        later = [p.name for p in run.steps() if step_number(p) > step_number(good)]
        if not later:
            return f"the last good checkpoint is {good}: continue it with --resume and a lower --lr"
        return (f"the last good checkpoint is {good}: delete the later ones ({', '.join(later)}), then continue "
                "with --resume and a lower --lr")

    def pop_metrics(self) -> dict[str, float]:
        """Means since the last call over applied updates, averaged over processes (the one wait for the device,
        at log steps). grad_norm and lr are per optimiser step, the rest per micro-step."""
        acc, accum = self.s.accelerator, self.s.cfg.grad_accum
        keys = sorted(self._sums)
        kept = self._kept
        totals = torch.stack([self._sums[k] for k in keys] + [self._lr_total * accum, kept])
        counts = torch.stack([kept / accum if k == "grad_norm" else kept for k in keys] + [kept, kept.new_ones(())])
        values = (acc.reduce(totals / counts.clamp(min=1), reduction="mean")).tolist()
        self._sums = {}
        self._kept, self._lr_total = torch.zeros_like(kept), torch.zeros_like(kept)
        if values[-1] == 0:  # every update since the last log was skipped: no means
            return {}
        return dict(sorted(zip(keys + ["lr"], values[:-1])))

    # ---- evaluation and checkpoints ----------------------------------------------------------------------
    def monitored(self) -> dict[str, float]:
        """The --monitor probes on the student, the objective's teacher (`teacher_monitor_*`) and the EMA
        (`ema_monitor_*`)."""
        s = self.s
        metrics = self.monitor()
        teacher = s.objective.teacher_backbone()
        if teacher is not None:
            metrics.update({f"teacher_{k}": v for k, v in self.monitor(s.objective, teacher).items()})
        if s.ema is not None:
            metrics.update({f"ema_{k}": v for k, v in self.monitor(s.ema.module).items()})
        return metrics

    def monitor(self, objective: torch.nn.Module | None = None,
                backbone: torch.nn.Module | None = None) -> dict[str, float]:
        """The --monitor probes on the current backbone, or on `objective`'s (the EMA's), or on `backbone` read
        as `objective` reads its own (a teacher) (their data decoded at the first call; `fit` makes that call
        before the first step, so a bad --monitor fails at once)."""
        if self._monitor is None:
            pre = self.s.preprocess
            self._monitor = Monitors(self.s.cfg.monitor, pre.image_size, mean=pre.mean, std=pre.std,
                                     probes=tuple(self.s.cfg.monitor_probes))
        objective = objective or self.s.accelerator.unwrap_model(self.s.model)
        chosen = self.s.cfg.monitor_features
        features = read_as(backbone or objective.backbone, objective.features if chosen == AUTO else chosen,
                           objective.representation_layer())
        return self._monitor(features, self.s.accelerator.device)

    @torch.no_grad()
    def evaluate(self, source: Any = None, limit: int | None = None, prefix: str = "val_",
                 model: torch.nn.Module | None = None) -> dict[str, float]:
        """Mean metrics of `model` (default: the live one) over the first `limit` samples of `source` (default:
        the validation split and --eval-samples), keyed `<prefix><metric>`."""
        s, acc = self.s, self.s.accelerator
        net = s.model if model is None else model
        source = s.val_source if source is None else source
        limit = s.cfg.eval_samples if limit is None else limit
        if source is None or limit <= 0:
            return {}
        loader = eval_loader(source, s.preprocess, batch=max(self.micro, 256) if isinstance(source, TensorSplit)
                             else self.micro, rank=acc.process_index, world=acc.num_processes, limit=limit,
                             workers=self._workers(source), skip_corrupt=s.cfg.skip_corrupt,
                             pin=acc.device.type == "cuda", seed=s.cfg.seed, views=self.views)
        net.eval()
        seed_position(s.cfg.seed, acc.process_index, self.step_count, EVAL)  # e.g. MPP's corruption at evaluation
        sums: dict[str, torch.Tensor] = {}
        count = torch.zeros((), device=acc.device)

        def forward(batch: dict[str, torch.Tensor], weight: int) -> None:
            with acc.autocast():
                out = net(self.to_device(batch))
            for k, v in out.items():  # objectives report batch means: weighted by the batch's real samples
                sums[k] = sums.get(k, 0) + v.detach().float() * weight

        forwards = 0
        with iterate(loader) as batches:
            for batch in batches:
                n = batch["label"].shape[0]
                forward(batch, n)
                count += n
                forwards += 1
        # shards differ by a sample, and a process may have none (--eval-samples 1): every process runs as many
        # forwards as the busiest one, the extra ones on a filler counted for nothing (FSDP needs each forward
        # on every process); the weighted sums then equal a 1-process evaluation
        most = int(acc.gather(torch.tensor([forwards], device=acc.device)).max())
        if most > forwards:
            filler = first_sample_batch(source, s.preprocess, self.views)
            for _ in range(most - forwards):
                forward(filler, 0)
        s.model.train()  # (the EMA's module stays in eval mode)
        if not sums:
            return {}
        keys = sorted(sums)
        totals = acc.reduce(torch.stack([sums[k] for k in keys] + [count]), reduction="sum")
        return {f"{prefix}{k}": float(v / totals[-1]) for k, v in zip(keys, totals[:-1])}

    def save(self) -> Path | None:
        """Write a checkpoint for the current step (all processes take part; the main process publishes). A write
        that fails (a full disk, a folder made read-only) stops every process together, none left waiting for
        another, with one line; the earlier checkpoints stay as they are."""
        s, acc = self.s, self.s.accelerator
        main, step = acc.is_main_process, self.step_count
        failed: list[OSError | SafetensorError] = []

        def attempt(write: Callable[[], Any]) -> Any:
            if not failed:
                try:
                    return write()
                except (OSError, SafetensorError) as exc:
                    failed.append(exc)
            return None

        def stop_if_failed() -> None:  # every process learns of a failure on any one
            if acc.reduce(torch.tensor(float(len(failed)), device=acc.device), reduction="sum") > 0:
                if main:
                    shutil.rmtree(target, ignore_errors=True)  # give back the space the attempt took
                where = s.run.checkpoints / f"{PREFIX}{step:08d}"
                said = cannot_write(where, failed[0]) if failed else VitxError(f"cannot write {where} (see the "
                                                                               "main process)")
                raise VitxError(f"{said}; the earlier checkpoints are intact: fix that, then continue with --resume")

        acc.wait_for_everyone()
        target = s.run.checkpoints / f".{PREFIX}{step:08d}.partial"
        staged = attempt(lambda: s.run.staging(step)) if main else None
        stop_if_failed()
        attempt(lambda: acc.save_state(str(target / "accelerate"), safe_serialization=True))
        stop_if_failed()
        state = acc.get_state_dict(s.model)  # full weights, gathered when sharded
        state = export_state(acc.unwrap_model(s.model), state)  # e.g. LoRA factors merged into their layers
        broken = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())] \
            if main else []
        if acc.reduce(torch.tensor(float(len(broken)), device=acc.device), reduction="sum") > 0:
            # never publish non-finite weights (every process stops here together); earlier checkpoints stay
            if main:
                shutil.rmtree(target, ignore_errors=True)
            raise VitxError(f"step {step}: weights are not finite ({', '.join(broken[:2]) or 'see rank 0'});"
                            f" no checkpoint written; {self.rescue(int(self._streak))}")

        def write() -> Path:  # the main process's part
            back = {k[len("backbone."):]: v for k, v in state.items() if k.startswith("backbone.")}
            heads = {k: v for k, v in state.items() if not k.startswith("backbone.")}
            meta = {"vitx_step": str(step)}
            save_weights(back, staged / "model.safetensors", meta)
            teacher = s.objective.teacher_backbone()
            if teacher is not None:  # laid out as model.safetensors: `vitx export --export-teacher` reads it
                save_weights(teacher.state_dict(), staged / TEACHER, meta)
            if heads:
                save_weights(heads, staged / "heads.safetensors", meta)
            if s.ema is not None:  # as it is (for --resume), and laid out as the live weights (for --use-ema)
                save_weights(s.ema.module.state_dict(), staged / "accelerate" / EMA_RAW, meta)
                average = export_state(s.ema.module, s.ema.module.state_dict())
                save_weights({k[len("backbone."):]: v for k, v in average.items() if k.startswith("backbone.")},
                             staged / "ema.safetensors", meta)
                if heads:
                    save_weights({k: v for k, v in average.items() if not k.startswith("backbone.")},
                                 staged / "ema_heads.safetensors", meta)
            if s.cfg.curves and not self.stop_requested:  # a preempted job has seconds: no figure
                self.draw_curves(staged / "curves.png")
            return s.run.publish(staged, step, config_record(s, step), s.cfg.keep_checkpoints)
        final = attempt(write) if main else None
        stop_if_failed()
        self.agreement.saved()
        return final

    def draw_curves(self, path: Path) -> None:
        """curves.png from metrics.jsonl as it stands (main process); a failure is a warning, never a crash."""
        from ..plots import draw_run, try_draw

        cfg = self.s.cfg
        title = f"{Path(cfg.output_dir).name}: {cfg.objective}, {cfg.data}, step {self.step_count}"
        try_draw("curves.png", draw_run, self.s.run.path, path, title,
                 warn=lambda line: self.console.print(line, markup=False, soft_wrap=True))

    # ---- the whole run -----------------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        s, acc = self.s, self.s.accelerator
        main = acc.is_main_process
        with s.run.exclusive() if main else contextlib.nullcontext(True) as owned:
            # checked under the lock: another run may have checkpointed here since this one looked (setup can
            # take minutes), and this one must not overwrite it
            latest = s.run.latest() if main and owned else None
            moved = main and owned and (latest and latest.name) != (s.resumed_from and s.resumed_from.name)
            refused = acc.reduce(torch.tensor([0.0 if owned else 1.0, float(moved)], device=acc.device),
                                 reduction="sum")
            if refused[0] > 0:
                raise VitxError(f"another vitx process (pid {s.run.holder()}) is writing {s.run.path}; wait for it "
                                "to finish, or choose another --output-dir")
            if refused[1] > 0:
                now = f"its last checkpoint is now {latest.name}" if latest else \
                    "its checkpoints are gone" if main else "see the main process"
                raise VitxError(f"another vitx process wrote to {s.run.path} after this run started ({now}); nothing "
                                "was overwritten: run the command again (with --resume to continue that run), or "
                                "choose another --output-dir")
            if latest is not None:
                s.run.mirror(latest)  # a kill between a checkpoint and its top-level files left older ones there
            try:
                return self._fit()
            except OSError as exc:  # the disk filled up (or went read-only) under metrics.jsonl, say
                if exc.errno not in DISK_STATE_ERRNOS:
                    raise
                raise VitxError(f"{cannot_write(exc.filename or s.run.path, exc)}; the earlier checkpoints are "
                                "intact: fix that, then continue with --resume") from None
            finally:
                self.close()

    def _fit(self) -> dict[str, Any]:
        s, cfg, acc = self.s, self.s.cfg, self.s.accelerator
        main = acc.is_main_process
        if main:
            s.run.clean_partial()
        resumed = self.step_count > 0
        log = MetricsLog(s.run.path / "metrics.jsonl", self.step_count if resumed else None) if main else None
        if acc.log_with:
            acc.init_trackers("vitx", config={k: ",".join(map(str, v)) if isinstance(v, (list, tuple)) else v
                                              for k, v in cfg.to_dict().items() if v is not None},  # hparams: scalars
                              init_kwargs=tracker_kwargs(cfg))
        last: dict[str, float] = {}
        s.objective.on_fit_start(self.step_count, cfg.steps)
        if cfg.monitor and not resumed and log:  # the starting point: what the monitor reads before any training
            log.write({"step": 0, **self.monitored()})
        elif cfg.monitor:
            self.monitor()  # decode its data now: a bad --monitor fails before the first step
        tick, done_at_tick = time.perf_counter(), self.step_count
        self.agreement.saved()
        stopping, saved = False, None
        with Progress(self.console, cfg.log_format, main) as progress, \
                StopRequests(parse_signals(cfg.stop_signals)) as requests:
            self.agreement.requests = requests
            progress.start(f"{self.label} (resumed)" if resumed else self.label, cfg.steps, self.step_count)
            while self.step_count < cfg.steps:
                self.step()
                step = self.step_count
                stopping = self.stop_requested and step < cfg.steps  # at the last step: just finish
                saving = step % cfg.save_every == 0 or step == cfg.steps or self.save_due or stopping
                monitoring = bool(cfg.monitor) and not stopping and (
                    saving or (cfg.monitor_every > 0 and step % cfg.monitor_every == 0))
                if saving or monitoring or step % cfg.log_every == 0:  # checkpoints: always logged, with validation
                    metrics = self.pop_metrics()
                    now = time.perf_counter()
                    metrics["images_per_s"] = (step - done_at_tick) * cfg.batch_size / max(now - tick, 1e-9)
                    tick, done_at_tick = now, step
                    if cfg.skip_corrupt:
                        metrics["skipped_images"] = float(acc.reduce(self.skipped.to(acc.device), "sum"))
                    self.check_divergence()
                    if self.nonfinite:
                        metrics["skipped_nonfinite"] = float(self.nonfinite)  # one decision: the same on every process
                    if saving and not stopping:  # a preempted job has seconds: no validation pass
                        metrics.update(self.evaluate())
                        if s.ema is not None:
                            metrics.update(self.evaluate(prefix="ema_val_", model=s.ema.module))
                    if monitoring:
                        metrics.update(self.monitored())
                    last = {"step": step, **metrics}
                    if log:
                        log.write(last)
                    acc.log(metrics, step=step)
                    progress.log(step, metrics)
                if saving:
                    saved = self.save()
                progress.advance(step)
                if stopping:
                    break
        self.agreement.requests = None
        if log:
            log.close()
        acc.end_training()
        if stopping:
            signame = requests.received or "a stop signal (on another process)"
            raise Preempted(f"{signame} at step {step}: checkpoint {saved or RunDir(cfg.output_dir).latest()} "
                            "written; run the same command with --resume to continue")
        return last


def pretrain(explicit: dict[str, Any], resume: bool = False, console: Console | None = None) -> dict[str, Any]:
    """Run (or resume) a pre-training from explicitly given options; returns the last logged metrics."""
    cfg, resume_from = resolve_config(explicit, resume)
    setup = build(cfg, resume_from)
    console = console or make_console(cfg.quiet)
    if setup.accelerator.is_main_process:
        n_params = sum(p.numel() for p in setup.objective.backbone.parameters())
        src = setup.train_source
        size = f"streamed, {src.num_shards} shard(s)" if hasattr(src, "micro_batches") else f"{len(src)} images"
        what = f"resuming {cfg.output_dir} at step {setup.start_step}" if resume_from else f"run {cfg.output_dir}"
        console.print(f"vitx {__version__}: {what} | {cfg.objective} on {cfg.model} ({n_params / 1e6:.2f}M) "
                      f"| {cfg.data} ({size}, {setup.preprocess.image_size}px) "
                      f"| {setup.accelerator.num_processes} process(es) on {setup.accelerator.device}", soft_wrap=True)
        validation = setup.data_info.get("validation") or {}
        if validation:
            console.print(f"data: {setup.data_info.get('layout', 'data')}, labels {setup.data_info.get('labels')} | "
                          f"validation: {validation['how']}", soft_wrap=True)
        note = getattr(setup.train_source, "sharding_note", lambda world: None)(setup.accelerator.num_processes)
        if note:
            console.print(f"note: {note}", soft_wrap=True)
        if resume and resume_from is None:
            console.print(f"nothing to resume in {cfg.output_dir}; starting a new run", soft_wrap=True)
        changed = setup.record.get("lr_changes", [])
        if changed and changed[-1]["step"] == setup.start_step:
            console.print(f"note: --lr {cfg.lr:g} from step {setup.start_step} (the run had {changed[-1]['from']:g}); "
                          "the schedule goes on with the new peak (config.json: lr_changes)", soft_wrap=True)
    if setup.start_step >= cfg.steps:
        if setup.accelerator.is_main_process:
            setup.run.repair()  # the top-level files a kill may have left at an older step
            console.print(f"{cfg.output_dir} is already complete at step {setup.start_step}; nothing to do",
                          soft_wrap=True)
        return {"step": setup.start_step}
    last = Trainer(setup, console).fit()
    if setup.accelerator.is_main_process:
        shown = ", ".join(f"{k} {last[k]:.4g}" for k in ("loss", "top1", "val_loss", "val_top1") if k in last)
        console.print(f"done: step {last.get('step')}: {shown} → {cfg.output_dir}/model.safetensors", soft_wrap=True)
    return last

"""The runner: one Accelerate training loop that drives any objective through the `Objective` contract.

It owns precision, accumulation, clipping, the per-step decisions (non-finite updates, stop signals, timed
saves), logging, evaluation and checkpoints; it knows nothing about what the objective computes. What it runs
is built in `setup.py`; where it runs, in `launch.py`; what its random draws depend on, in `randomness.py`.
"""
from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Iterator

import torch
from rich.console import Console

from .. import __version__
from ..checkpoint import export_state, save_weights
from ..data import TensorSplit, eval_loader, first_sample_batch, train_loader
from ..errors import Preempted, VitxError
from .config import default_workers
from .preemption import StopRequests, parse_signals
from .randomness import EVAL, TRAIN, seed_position
from .reporting import MetricsLog, make_console, progress_bar
from .rundir import RunDir
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
        self.console = console or make_console()
        cfg, acc = setup.cfg, setup.accelerator
        self.micro = cfg.batch_size // (acc.num_processes * cfg.grad_accum)  # per process, per micro-step
        self.workers = default_workers() if cfg.workers < 0 else cfg.workers
        self.step_count = setup.start_step
        self._batches: Iterator[dict[str, Any]] | None = None
        self._sums: dict[str, torch.Tensor] = {}  # metric sums since the last log, on the device
        self._n = 0
        self._lr_sum = 0.0  # the learning rate is a Python float: summed on the host, never copied to the device
        # --compile: the training forward runs through a compiled handle on the same module (same parameters;
        # Accelerate keeps preparing, accumulating and saving the module itself). Evaluation stays eager: its
        # batch sizes vary and it runs in eval mode, each of which would be another compilation.
        self.forward = compiled(setup.model) if cfg.compile else setup.model
        self.skipped = torch.zeros((), dtype=torch.long)
        self.nonfinite = 0  # optimiser steps skipped for a non-finite loss or gradient norm, this session
        self.nonfinite_streak = 0  # of them, consecutive up to now
        self.requests: StopRequests | None = None  # set while fit() runs
        self.stop_requested = False  # a stop signal reached some process: every process stops after this step
        self.save_due = False  # --save-every-minutes has passed (by the main process's clock)
        self._last_save = time.monotonic()

    # ---- one optimiser step ------------------------------------------------------------------------------
    def batches(self) -> Iterator[dict[str, Any]]:
        """This process's micro-batches, uint8 on the host (pinned for a GPU); in-memory splits need no workers."""
        if self._batches is None:
            cfg, acc = self.s.cfg, self.s.accelerator
            source = self.s.train_source
            loader = train_loader(source, self.s.preprocess, global_micro_batch=self.micro * acc.num_processes,
                                  rank=acc.process_index, world=acc.num_processes, seed=cfg.seed,
                                  start_micro_step=self.step_count * cfg.grad_accum,
                                  workers=0 if isinstance(source, TensorSplit) else self.workers,
                                  skip_corrupt=cfg.skip_corrupt, pin=acc.device.type == "cuda")
            self._batches = iter(loader)
        return self._batches

    def to_device(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Host uint8 batch → the model's input on the device: images normalised there (a quarter of float32's
        transfer, and no float image on the host)."""
        device = self.s.accelerator.device
        image = batch["image"].to(device, non_blocking=True)
        return {"image": self.s.preprocess.normalise(image), "label": batch["label"].to(device, non_blocking=True)}

    def step(self, micro_batches: list[dict[str, Any]] | None = None) -> None:
        """One optimiser step over `grad_accum` micro-batches (drawn from the stream when not given).

        A non-finite loss on any micro-batch, or a non-finite gradient norm, on any process, skips the update on
        every process (one decision, like AMP's loss scaler): the weights stay as they were, the schedule and
        the data move on, and the step is counted in `skipped_nonfinite`."""
        s, acc = self.s, self.s.accelerator
        batches = micro_batches or [next(self.batches()) for _ in range(s.cfg.grad_accum)]
        outs, bad, skip = [], torch.zeros((), device=acc.device), False
        for j, batch in enumerate(batches):
            # the randomness contract (randomness.py): draws depend on (seed, process, micro-step) only
            seed_position(s.cfg.seed, acc.process_index, self.step_count * s.cfg.grad_accum + j, TRAIN)
            self.skipped += batch["skipped"].sum()
            batch = self.to_device(batch)
            with acc.accumulate(s.model):
                out = self.forward(batch)
                bad = bad + (~torch.isfinite(out["loss"].detach())).float()
                acc.backward(out["loss"])
                if acc.sync_gradients:
                    s.objective.on_after_backward()
                    out["grad_norm"] = self._clip_gradients()
                    step_lr = s.optimizer.param_groups[0]["lr"]  # the rate this update uses
                    bad = bad + (~torch.isfinite(out["grad_norm"])).float()
                    skip = self._agree(bad)
                    if not skip:
                        s.optimizer.step()
                    s.scheduler.step()
                s.optimizer.zero_grad(set_to_none=True)
            outs.append(out)
        self.step_count += 1
        if skip:
            self._nonfinite_step()
        else:
            self.nonfinite_streak = 0
            self._lr_sum += step_lr
            for out in outs:
                for k, v in out.items():
                    v = v.detach().float().reshape(()).to(acc.device)
                    self._sums[k] = self._sums[k] + v if k in self._sums else v
                self._n += 1
        s.objective.on_step_end(self.step_count)

    def _agree(self, nonfinite: torch.Tensor) -> bool:
        """One collective per optimiser step makes the run's decisions the same on every process: skip this
        update (a non-finite loss or gradient anywhere), stop after it (a stop signal anywhere), save after it
        (--save-every-minutes on the main process's clock). Returns whether to skip."""
        s, acc = self.s, self.s.accelerator
        asked = self.requests is not None and self.requests.received is not None
        minutes = s.cfg.save_every_minutes
        due = acc.is_main_process and minutes > 0 and time.monotonic() - self._last_save >= minutes * 60
        local = torch.stack([nonfinite, torch.tensor(float(asked), device=acc.device),
                             torch.tensor(float(due), device=acc.device)])
        skip, stop, save = (v > 0 for v in acc.reduce(local, reduction="sum").tolist())
        self.stop_requested, self.save_due = stop, save
        return skip

    def _clip_gradients(self) -> torch.Tensor:
        """The global gradient norm before clipping; clipped to --grad-clip (0: measured, not clipped)."""
        s, acc = self.s, self.s.accelerator
        norm = acc.clip_grad_norm_(s.model.parameters(), s.cfg.grad_clip if s.cfg.grad_clip > 0 else float("inf"))
        if norm is None:  # DeepSpeed clips inside its engine and reports nothing here: the loss check remains
            return torch.zeros((), device=acc.device)
        return torch.as_tensor(norm, dtype=torch.float32, device=acc.device)

    def _nonfinite_step(self) -> None:
        """Count a skipped step; stop the run when too many come in a row (it has diverged)."""
        self.nonfinite += 1
        self.nonfinite_streak += 1
        limit = self.s.cfg.max_nonfinite_steps
        if self.nonfinite_streak >= limit:
            latest = self.s.run.latest()
            where = f"the last good checkpoint is {latest}" if latest else "no checkpoint was written"
            raise VitxError(f"{limit} optimiser steps in a row (up to step {self.step_count}) had a non-finite loss "
                            f"or gradient and were skipped: the run has diverged; {where} (lower --lr, check the "
                            f"data, or raise --max-nonfinite-steps)")

    def pop_metrics(self) -> dict[str, float]:
        """Means since the last call, averaged over processes. grad_norm and lr are per step, not per micro-step."""
        acc, accum = self.s.accelerator, self.s.cfg.grad_accum
        keys = sorted(self._sums)
        if not keys:
            return {}
        totals = torch.stack([self._sums[k] for k in keys])
        counts = torch.tensor([self._n / (accum if k == "grad_norm" else 1) for k in keys], device=totals.device)
        means = acc.reduce(totals / counts, reduction="mean")  # the one host-device sync: at logging steps only
        metrics = {k: float(v) for k, v in zip(keys, means.tolist())}
        metrics["lr"] = self._lr_sum / (self._n / accum)  # the same on every process
        self._sums, self._n, self._lr_sum = {}, 0, 0.0
        return dict(sorted(metrics.items()))

    # ---- evaluation and checkpoints ----------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, source: Any = None, limit: int | None = None, prefix: str = "val_") -> dict[str, float]:
        """Mean metrics over the first `limit` samples of `source` (default: the validation split and
        --eval-samples), keyed `<prefix><metric>`."""
        s, acc = self.s, self.s.accelerator
        source = s.val_source if source is None else source
        limit = s.cfg.eval_samples if limit is None else limit
        if source is None or limit <= 0:
            return {}
        loader = eval_loader(source, s.preprocess, batch=max(self.micro, 256) if isinstance(source, TensorSplit)
                             else self.micro, rank=acc.process_index, world=acc.num_processes, limit=limit,
                             workers=0 if isinstance(source, TensorSplit) else self.workers,
                             skip_corrupt=s.cfg.skip_corrupt, pin=acc.device.type == "cuda")
        s.model.eval()
        seed_position(s.cfg.seed, acc.process_index, self.step_count, EVAL)  # e.g. MPP's corruption at evaluation
        sums: dict[str, torch.Tensor] = {}
        count = torch.zeros((), device=acc.device)

        def forward(batch: dict[str, torch.Tensor], weight: int) -> None:
            with acc.autocast():
                out = s.model(self.to_device(batch))
            for k, v in out.items():  # objectives report batch means: weighted by the batch's real samples
                sums[k] = sums.get(k, 0) + v.detach().float() * weight

        forwards = 0
        for batch in loader:
            n = batch["image"].shape[0]
            forward(batch, n)
            count += n
            forwards += 1
        # shards differ by a sample, and a process may have none (--eval-samples 1): every process runs as many
        # forwards as the busiest one, the extra ones on a filler counted for nothing (FSDP needs each forward
        # on every process); the weighted sums then equal a 1-process evaluation
        most = int(acc.gather(torch.tensor([forwards], device=acc.device)).max())
        if most > forwards:
            filler = first_sample_batch(source, s.preprocess)
            for _ in range(most - forwards):
                forward(filler, 0)
        s.model.train()
        if not sums:
            return {}
        keys = sorted(sums)
        totals = acc.reduce(torch.stack([sums[k] for k in keys] + [count]), reduction="sum")
        return {f"{prefix}{k}": float(v / totals[-1]) for k, v in zip(keys, totals[:-1])}

    def save(self) -> Path | None:
        """Write a checkpoint for the current step (all processes take part; the main process publishes)."""
        s, acc = self.s, self.s.accelerator
        acc.wait_for_everyone()
        staged = s.run.staging(self.step_count) if acc.is_main_process else None
        acc.wait_for_everyone()
        target = s.run.checkpoints / f".step_{self.step_count:08d}.partial"
        acc.save_state(str(target / "accelerate"), safe_serialization=True)
        state = acc.get_state_dict(s.model)  # full weights, gathered when sharded
        state = export_state(acc.unwrap_model(s.model), state)  # e.g. LoRA factors merged into their layers
        final = None
        broken = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())] \
            if acc.is_main_process else []
        if acc.reduce(torch.tensor(float(len(broken)), device=acc.device), reduction="sum") > 0:
            # never publish non-finite weights (every process stops here together); earlier checkpoints stay
            raise VitxError(f"step {self.step_count}: weights are not finite ({', '.join(broken[:2]) or 'see rank 0'});"
                            f" no checkpoint written. The last good one is {s.run.latest() or 'none'}; lower --lr "
                            "and resume from it")
        if acc.is_main_process:
            back = {k[len("backbone."):]: v for k, v in state.items() if k.startswith("backbone.")}
            heads = {k: v for k, v in state.items() if not k.startswith("backbone.")}
            meta = {"vitx_step": str(self.step_count)}
            save_weights(back, staged / "model.safetensors", meta)
            if heads:
                save_weights(heads, staged / "heads.safetensors", meta)
            final = s.run.publish(staged, self.step_count, config_record(s, self.step_count), s.cfg.keep_checkpoints)
        acc.wait_for_everyone()
        self._last_save = time.monotonic()
        return final

    # ---- the whole run -----------------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        s, acc = self.s, self.s.accelerator
        with s.run.exclusive() if acc.is_main_process else contextlib.nullcontext(True) as owned:
            if acc.reduce(torch.tensor(0.0 if owned else 1.0, device=acc.device), reduction="sum") > 0:
                raise VitxError(f"another vitx process (pid {s.run.holder()}) is writing {s.run.path}; wait for it "
                                "to finish, or choose another --output-dir")
            return self._fit()

    def _fit(self) -> dict[str, Any]:
        s, cfg, acc = self.s, self.s.cfg, self.s.accelerator
        main = acc.is_main_process
        if main:
            s.run.clean_partial()
        resumed = self.step_count > 0
        log = MetricsLog(s.run.path / "metrics.jsonl", self.step_count if resumed else None) if main else None
        if acc.log_with:
            acc.init_trackers("vitx", config={k: v for k, v in cfg.to_dict().items() if v is not None})
        last: dict[str, float] = {}
        tick, done_at_tick = time.perf_counter(), self.step_count
        self._last_save = time.monotonic()
        stopping, saved = False, None
        with progress_bar(self.console, main) as bar, StopRequests(parse_signals(cfg.stop_signals)) as requests:
            self.requests = requests
            task = bar.add_task(f"{self.label} (resumed)" if resumed else self.label, total=cfg.steps, completed=self.step_count,
                                loss="-", lr="-", speed="-")
            while self.step_count < cfg.steps:
                self.step()
                step = self.step_count
                stopping = self.stop_requested and step < cfg.steps  # at the last step: just finish
                saving = step % cfg.save_every == 0 or step == cfg.steps or self.save_due or stopping
                if saving or step % cfg.log_every == 0:  # checkpoint steps are always logged, with validation
                    metrics = self.pop_metrics()
                    now = time.perf_counter()
                    metrics["images_per_s"] = (step - done_at_tick) * cfg.batch_size / max(now - tick, 1e-9)
                    tick, done_at_tick = now, step
                    if cfg.skip_corrupt:
                        metrics["skipped_images"] = float(acc.reduce(self.skipped.to(acc.device), "sum"))
                    if self.nonfinite:
                        metrics["skipped_nonfinite"] = float(self.nonfinite)  # one decision: the same on every process
                    if saving and not stopping:  # a preempted job has seconds: no validation pass
                        metrics.update(self.evaluate())
                    last = {"step": step, **metrics}
                    if log:
                        log.write(last)
                    acc.log(metrics, step=step)
                    bar.update(task, loss=f"{metrics.get('loss', float('nan')):.4f}", lr=f"{metrics.get('lr', 0):.2e}",
                               speed=f"{metrics['images_per_s']:.1f}")
                if saving:
                    saved = self.save()
                bar.update(task, completed=step)
                if stopping:
                    break
        self.requests = None
        if log:
            log.close()
        acc.end_training()
        if stopping:
            signame = requests.received or "a stop signal (on another process)"
            raise Preempted(f"{signame} at step {step}: checkpoint {saved or RunDir(cfg.output_dir).latest()} "
                            "written; run the same command with --resume to continue")
        return last


def describe(source: Any) -> str:
    if hasattr(source, "micro_batches"):
        return f"streamed, {source.num_shards} shard(s)"
    return f"{len(source)} images"


def pretrain(explicit: dict[str, Any], resume: bool = False, console: Console | None = None) -> dict[str, Any]:
    """Run (or resume) a pre-training from explicitly given options; returns the last logged metrics."""
    cfg, resume_from = resolve_config(explicit, resume)
    setup = build(cfg, resume_from)
    console = console or make_console()
    if setup.accelerator.is_main_process:
        n_params = sum(p.numel() for p in setup.objective.backbone.parameters())
        what = f"resuming {cfg.output_dir} at step {setup.start_step}" if resume_from else f"run {cfg.output_dir}"
        console.print(f"vitx {__version__}: {what} | {cfg.objective} on {cfg.model} ({n_params / 1e6:.2f}M) "
                      f"| {cfg.data} ({describe(setup.train_source)}, {setup.preprocess.image_size}px) "
                      f"| {setup.accelerator.num_processes} process(es) on {setup.accelerator.device}", soft_wrap=True)
        note = getattr(setup.train_source, "sharding_note", lambda world: None)(setup.accelerator.num_processes)
        if note:
            console.print(f"note: {note}", soft_wrap=True)
        if resume and resume_from is None:
            console.print(f"nothing to resume in {cfg.output_dir}; starting a new run", soft_wrap=True)
    if setup.start_step >= cfg.steps:
        if setup.accelerator.is_main_process:
            console.print(f"{cfg.output_dir} is already complete at step {setup.start_step}; nothing to do",
                          soft_wrap=True)
        return {"step": setup.start_step}
    last = Trainer(setup, console).fit()
    if setup.accelerator.is_main_process:
        shown = ", ".join(f"{k} {last[k]:.4g}" for k in ("loss", "top1", "val_loss", "val_top1") if k in last)
        console.print(f"done: step {last.get('step')}: {shown} → {cfg.output_dir}/model.safetensors", soft_wrap=True)
    return last

"""One optimiser step, and what it leaves to report: accumulation over micro-batches, the gradient clip, the
skip of a non-finite update (decided the same on every process, on the device where the optimiser allows),
metric sums kept on the device until a log step reads them, and the divergence stop with its rescue advice.

A mixin of `loop.Trainer`, whose `__init__` sets the state these methods share (the setup, the step count,
the device-side sums and counters).
"""
from __future__ import annotations

import time
from typing import Any, Iterator

import torch

from ..data import train_loader
from ..data.loader import close
from ..data.photometry import Params, apply
from ..errors import VitxError
from ..runs.rundir import MARKER, step_number
from .optim import clip_per_parameter, cosine_from, set_weight_decay
from .randomness import TRAIN, seed_position
from .threads import training_workers


class Stepping:
    """`step()`: one optimiser step; `pop_metrics()`: the means since the last log."""

    def batches(self) -> Iterator[dict[str, Any]]:
        """This process's micro-batches, uint8 on the host (pinned for a GPU); in-memory splits need no workers."""
        if self._batches is None:
            cfg, acc = self.setup.cfg, self.setup.accelerator
            source = self.setup.train_source
            loader = train_loader(source, self.setup.preprocess, global_micro_batch=self.micro * acc.num_processes,
                                  rank=acc.process_index, world=acc.num_processes, seed=cfg.seed,
                                  start_micro_step=self.step_count * cfg.grad_accum,
                                  workers=self.loader_workers(source), skip_corrupt=cfg.skip_corrupt,
                                  pin=acc.device.type == "cuda", views=self.views)
            self._batches = iter(loader)
        return self._batches

    def loader_workers(self, source: Any, training: bool = True) -> int:
        """Loader workers for `source` (`threads.training_workers`): none for a split held in memory without the
        objective's crops to make, on a CPU, and when evaluating one anywhere (its images are held at the
        evaluation's geometry: nothing to crop)."""
        return training_workers(self.workers, source, self.views,
                                on_gpu=training and self.setup.accelerator.device.type == "cuda")

    def close(self) -> None:
        """Stop the training stream's loader workers (the end of every run, sweep point and failure)."""
        if self._batches is not None:
            close(self._batches)
            self._batches = None

    def to_device(self, batch: dict[str, Any], train: bool = False) -> dict[str, torch.Tensor]:
        """Host uint8 batch → the model's input on the device: images normalised there (a quarter of float32's
        transfer, and no float image on the host), then randomly erased when training asks for it; a multi-crop
        batch's photometry applied there first when the workers left it to the device (data/photometry.py)."""
        device, pre = self.setup.accelerator.device, self.setup.preprocess
        label = batch["label"].to(device, non_blocking=True)
        if "views" in batch:  # the objective's crops: [(B, 3, S_v, S_v) uint8, one per crop]
            views = [v.to(device, non_blocking=True) for v in batch["views"]]
            if "photometry" in batch:  # a GPU run: the workers made the geometry, the device makes the colours
                views = [apply(v, Params(**p)) for v, p in zip(views, batch["photometry"])]
            return {"views": [pre.normalise(v).to(self.input_dtype) for v in views], "label": label}
        image = pre.normalise(batch["image"].to(device, non_blocking=True))  # (B, 3, S, S) float32
        if train:
            image = pre.erase(image)
        return {"image": image.to(self.input_dtype), "label": label}

    def _check_output(self, out: Any) -> None:
        """An objective's forward returns a dict with a scalar tensor `loss` (the contract, `objectives/base.py`):
        a plugin's that does not is one line naming it, not an AttributeError deep in the step."""
        loss = out.get("loss") if isinstance(out, dict) else None
        if not (isinstance(loss, torch.Tensor) and loss.ndim == 0 and loss.is_floating_point()):
            name = getattr(self.setup.objective, "name", type(self.setup.objective).__name__)
            got = f"a {type(out).__name__}" if not isinstance(out, dict) else "no 'loss'" if loss is None else \
                f"loss {loss!r:.60}" if not isinstance(loss, torch.Tensor) else \
                f"a {loss.dtype} loss of shape {tuple(loss.shape)}"
            raise VitxError(f"objective '{name}': its forward must return a dict with a scalar float tensor 'loss', "
                            f"got {got}")

    def step(self, micro_batches: list[dict[str, Any]] | None = None) -> None:
        """One optimiser step over `grad_accum` micro-batches (drawn from the stream when not given).

        A non-finite loss on any micro-batch, or a non-finite gradient norm, on any process, skips the update on
        every process (one decision, like AMP's loss scaler): the weights stay as they were, the schedule and
        the data move on, and the step is counted in `skipped_nonfinite`."""
        setup, acc = self.setup, self.setup.accelerator
        if setup.cfg.weight_decay_end is not None:  # a function of the step: a resumed run follows it exactly
            set_weight_decay(setup.optimizer, self.weight_decay(self.step_count))
        waiting = time.perf_counter()
        batches = micro_batches or [next(self.batches()) for _ in range(setup.cfg.grad_accum)]
        self.input_wait += time.perf_counter() - waiting  # the loop idle for its input (read at log steps)
        outs, bad = [], torch.zeros((), device=acc.device)
        ok: torch.Tensor | None = None  # 1.0: the update was applied on every process; 0.0: skipped everywhere
        for j, batch in enumerate(batches):
            # the randomness contract (randomness.py): draws depend on (seed, process, micro-step) only
            seed_position(setup.cfg.seed, acc.process_index, self.step_count * setup.cfg.grad_accum + j, TRAIN)
            self.corrupt_images += batch["skipped"].sum()
            batch = self.to_device(batch, train=True)
            with acc.accumulate(setup.model):
                out = self.forward(batch)
                self._check_output(out)
                bad = bad + (~torch.isfinite(out["loss"].detach())).float()
                acc.backward(out["loss"])
                if acc.sync_gradients:
                    setup.objective.on_after_backward()
                    out["grad_norm"] = self._clip_gradients()
                    step_lr = self._peak_lr()  # the rate this update uses
                    bad = bad + (~torch.isfinite(out["grad_norm"])).float()
                    ok = self._decide_and_step(bad)
                    setup.scheduler.step()
                setup.optimizer.zero_grad(set_to_none=True)
            outs.append(out)
        self.step_count += 1
        keep = ok > 0
        for out in outs:  # a skipped step leaves no trace in the means (NaN × 0 is NaN: select, not weight)
            for k, v in out.items():
                v = torch.where(keep, v.detach().float().reshape(()).to(acc.device), 0.0)
                self._sums[k] = self._sums[k] + v if k in self._sums else v
        self._kept += ok * len(outs)
        self._lr_total += ok * step_lr
        self._nonfinite_total += 1 - ok
        self._nonfinite_streak = (self._nonfinite_streak + 1) * (1 - ok)
        if not self.skip_on_device and not bool(keep):  # decided on the host anyway: check the streak now
            self.check_divergence()
        if setup.ema is not None:  # a skipped update left the weights as they were: the average moves towards them
            setup.ema.update(setup.objective, step=self.step_count)
        setup.objective.on_step_end(self.step_count)

    def weight_decay(self, step: int) -> float:
        """The decayed groups' weight decay for the update at 0-based `step` (--weight-decay-end's schedule)."""
        cfg = self.setup.cfg
        end = cfg.weight_decay if cfg.weight_decay_end is None else cfg.weight_decay_end
        return cosine_from(step, cfg.steps, cfg.weight_decay, end)

    def _decide_and_step(self, nonfinite: torch.Tensor) -> torch.Tensor:
        """Skip or apply this update, the same on every process, and agree on stopping and saving after it
        (agreement.py). Returns the device flag ok (1.0 applied, 0.0 skipped)."""
        setup, acc = self.setup, self.setup.accelerator
        if self.skip_on_device:
            ok = self.agreement.skip_on_device(nonfinite)
            self.inner_optimizer.found_inf = 1.0 - ok  # the fused kernel leaves weights, moments and step as they were
            setup.optimizer.step()
            self.stop_requested, self.save_due = self.agreement.on_host()
            return ok
        skip, self.stop_requested, self.save_due = self.agreement.with_skip(nonfinite)
        if not skip:
            setup.optimizer.step()
        return torch.full((), 0.0 if skip else 1.0, device=acc.device)

    def _peak_lr(self) -> float:
        """The learning rate of the update about to be made: --lr times the schedule's factor at this step (the
        groups' own rates are that times layer decay's scale)."""
        inner = getattr(self.setup.scheduler, "scheduler", self.setup.scheduler)  # Accelerate's wrapper
        return self.setup.cfg.lr * inner.lr_lambdas[0](inner.last_epoch)

    def _clip_gradients(self) -> torch.Tensor:
        """The global gradient norm before clipping (what grad_norm logs whatever the rule); the gradients clipped
        as --grad-clip-mode says: their global norm to --grad-clip, or each parameter's separately (DINO's
        `clip_gradients`, `optim.clip_per_parameter`); --grad-clip 0: measured, not clipped."""
        setup, acc = self.setup, self.setup.accelerator
        clip = setup.cfg.grad_clip
        if setup.cfg.grad_clip_mode == "per-parameter":
            acc.unscale_gradients()  # fp16: the loss scale off the gradients before their norms are read
            norms = clip_per_parameter(setup.model.parameters(), clip)  # (P,) before clipping
            return torch.linalg.vector_norm(norms).to(device=acc.device, dtype=torch.float32)
        norm = acc.clip_grad_norm_(setup.model.parameters(), clip if clip > 0 else float("inf"))
        if norm is None:  # DeepSpeed clips inside its engine and reports nothing here: the loss check remains
            return torch.zeros((), device=acc.device)
        return torch.as_tensor(norm, dtype=torch.float32, device=acc.device)

    def check_divergence(self) -> None:
        """Read the skip counters (a wait for the device: at log steps, or after a skip decided on the host);
        stop the run when too many non-finite steps came in a row (it has diverged)."""
        skips, streak = (int(v) for v in torch.stack([self._nonfinite_total, self._nonfinite_streak]).tolist())
        self.nonfinite_steps = skips
        if streak >= self.setup.cfg.max_nonfinite_steps:
            raise VitxError(f"{streak} optimiser steps in a row (up to step {self.step_count}) had a non-finite loss "
                            f"or gradient and were skipped: the run has diverged; {self.rescue(streak)} (or check "
                            "the data, or raise --max-nonfinite-steps)")

    def rescue(self, streak: int) -> str:
        """Where to go back to after a divergence. The weights of the last applied step are what went non-finite
        (skipped steps keep them: checkpoints written since hold them too), so the last good checkpoint is one
        from before that step: its weights were trained on, with a finite loss and gradient."""
        run = self.setup.run
        good = run.latest(before=self.step_count - streak)
        kept = sum((p / MARKER).is_file() for p in run.steps())  # complete ones, all from after the last good step
        if good is None and kept >= self.setup.cfg.keep_checkpoints:  # (as many as it keeps: older ones may be gone)
            return (f"no checkpoint from before step {self.step_count - streak} is left (--keep-checkpoints "
                    f"{self.setup.cfg.keep_checkpoints} keeps the newest, which hold the weights that failed): start "
                    "again with a lower --lr in another --output-dir")
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
        acc, accum = self.setup.accelerator, self.setup.cfg.grad_accum
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

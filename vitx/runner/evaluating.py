"""What the loop measures besides the training loss: validation (every process its share, as many forwards
as the busiest one so a sharded model never waits), the --monitor's evaluators on the student, the
objective's teacher and the moving average, and the collapse watch: its label-free figures and what it says of
them (evaluation/collapse.py: a head finding, or a collapse that --stop-on-collapse acts on).

A mixin of `loop.Trainer`.
"""
from __future__ import annotations

from typing import Any

import torch
from rich.markup import escape

import numpy as np

from ..data import TensorSplit, decode_split, eval_loader, first_sample_batch
from ..data.loader import iterate
from ..errors import CorruptImageError
from ..evaluation import AUTO
from ..evaluation.collapse import STOPS, Finding, Watch, chance_bound, label_free
from ..evaluation.features import extract_features
from ..evaluation.monitor import Monitors
from ..evaluation.representation import read_as
from ..plots.series import read_metrics
from .randomness import EVAL, seed_position

WATCH_IMAGES = 256  # the collapse watch's training images: RankMe up to 256 (vit-s: 384-d), 1 s of a CPU forward
LOGGED = ("rankme", "rankme_fraction", "feature_std")  # of the watch's figures, what a log step records (the
# others are constants of the run)


class Evaluating:
    """`evaluate()`: validation metrics; `monitored()`: the --monitor's figures."""

    def monitored(self) -> dict[str, float]:
        """The --monitor probes on the student, the objective's teacher (`teacher_monitor_*`) and the EMA
        (`ema_monitor_*`)."""
        setup = self.setup
        metrics = self.monitor()
        teacher = setup.objective.teacher_backbone()
        if teacher is not None:
            metrics.update({f"teacher_{k}": v for k, v in self.monitor(setup.objective, teacher).items()})
        if setup.ema is not None:
            metrics.update({f"ema_{k}": v for k, v in self.monitor(setup.ema.module).items()})
        return metrics

    def watched(self) -> dict[str, float]:
        """The label-free figures (evaluation/collapse.py) of the live features, read as the monitor reads them,
        of WATCH_IMAGES training images (a seeded draw, decoded at the first call); {} where the training data
        has no length (a stream) or the draw cannot be decoded (said once)."""
        setup = self.setup
        if self._watch_images is None:  # (False: none to be had, said at the first call)
            self._watch_images = watch_images(setup.train_source, setup.preprocess, setup.cfg.seed)
            if self._watch_images is False and setup.accelerator.is_main_process:
                self.console.print("[yellow]note: the collapse watch needs training data of known length and "
                                   "decodable images; it is off for this run (--monitor-probes rankme reads "
                                   "--monitor's images instead)[/]")
        if self._watch_images is False or not len(self._watch_images):
            return {}
        features = self.features(setup.accelerator.unwrap_model(setup.model))
        was_training = features.training
        with torch.no_grad():
            x = extract_features(features, self._watch_images, device=setup.accelerator.device,
                                 normalise=setup.preprocess.normalise)  # (N, D)
        features.train(was_training)
        return label_free(x)

    def watching(self) -> bool:
        """The collapse watch is on: its figures are taken at step 0 and every --watch-every steps of a run that
        long, and what it says is said (0, or a run shorter than that: off)."""
        cfg = self.setup.cfg
        return 0 < cfg.watch_every <= cfg.steps

    def start_watch(self, start: dict[str, float], resumed: bool) -> None:
        """The collapse watch, before the first step: the objective's head rules, the monitor's chance rates,
        and the step-0 figures as its baselines (a resumed run: its metrics.jsonl up to the checkpoint, replayed).
        Called after the monitor's data is read."""
        setup = self.setup
        chance = {}
        if self._monitor is not None:
            for tag, monitor in self._monitor.monitors:
                chance[f"monitor_{tag}_" if tag else "monitor_"] = chance_bound(monitor.test.labels.tolist())
        self.watch = Watch(setup.objective.head_findings, chance)
        if not self.watching():
            return
        if not resumed:
            self.watch.observe(0, start)
        elif setup.accelerator.is_main_process and (setup.run.path / "metrics.jsonl").exists():
            self.watch.replay(read_metrics(setup.run.path / "metrics.jsonl"))

    def watch_step(self, step: int, metrics: dict[str, float]) -> list[dict[str, Any]]:
        """What the collapse watch says of a log step's figures: a head finding as a note, a collapse as a
        warning, each in one line; returned as the log step's `watch` entries for metrics.jsonl. With
        --stop-on-collapse a collapse then saves and stops the run, on every process if any saw it."""
        setup, acc = self.setup, self.setup.accelerator
        found = self.watch.observe(step, metrics) if self.watching() else []
        if acc.is_main_process:
            for finding in found:
                style = "yellow]warning" if finding.kind == "collapse" else "cyan]note"
                self.console.print(f"[{style}: {escape(finding.line())}[/]", soft_wrap=True)
        if setup.cfg.stop_on_collapse:
            seen = torch.tensor([0.0 if self.watch.found is None else 1.0], device=acc.device)
            self.collapse_stop = bool(acc.reduce(seen, reduction="sum") > 0) and step < setup.cfg.steps
        return [finding.record() for finding in found]

    def collapse_line(self, checkpoint: Any) -> str:
        """The error line of a run --stop-on-collapse stopped, with the `checkpoint` it wrote."""
        found: Finding | None = self.watch.found
        said = found.line().removesuffix(f"; {STOPS}") if found else "collapse (on another process)"
        return f"--stop-on-collapse: {said}; checkpoint {checkpoint} written"

    def monitor(self, objective: torch.nn.Module | None = None,
                backbone: torch.nn.Module | None = None) -> dict[str, float]:
        """The --monitor probes on the current backbone, or on `objective`'s (the EMA's), or on `backbone` read
        as `objective` reads its own (a teacher) (their data decoded at the first call; `fit` makes that call
        before the first step, so a bad --monitor fails at once)."""
        if self._monitor is None:
            pre = self.setup.preprocess
            self._monitor = Monitors(self.setup.cfg.monitor, pre.image_size, mean=pre.mean, std=pre.std,
                                     probes=tuple(self.setup.cfg.monitor_probes))
        objective = objective or self.setup.accelerator.unwrap_model(self.setup.model)
        return self._monitor(self.features(objective, backbone), self.setup.accelerator.device)

    def features(self, objective: torch.nn.Module, backbone: torch.nn.Module | None = None) -> torch.nn.Module:
        """`objective`'s backbone (or `backbone`, read as `objective` reads its own) as the frozen features the
        monitor and the collapse watch read: --monitor-features, or what the objective trains."""
        chosen = self.setup.cfg.monitor_features
        return read_as(backbone or objective.backbone, objective.features if chosen == AUTO else chosen,
                       objective.representation_layer())

    def stop_pending(self) -> bool:
        """A stop came while the run evaluates before its last step: the checkpoint is next, then the run stops,
        so its validation, monitor and watch are not worth a scheduler's grace period. Agreed by every process
        (a collective on the host: all call this at the same points), so all give up at the same forward; at the
        last step the run finishes, with its figures."""
        return self.evaluation_round(False)[1]

    def evaluation_round(self, more: bool) -> tuple[bool, bool]:
        """(some process has another batch, given that this one has `more`; stop_pending) in one collective."""
        any_more, stop = self.agreement.round(more)
        stop = stop and self.step_count < self.setup.cfg.steps
        if stop:  # agreed by every process: the loop checkpoints this step and stops (Trainer._fit)
            self.stop_requested = True
        return any_more, stop

    @torch.no_grad()
    def evaluate(self, source: Any = None, limit: int | None = None, prefix: str = "val_",
                 model: torch.nn.Module | None = None) -> dict[str, float]:
        """Mean metrics of `model` (default: the live one) over the first `limit` samples of `source` (default:
        the validation split and --eval-samples), keyed `<prefix><metric>`."""
        setup, acc = self.setup, self.setup.accelerator
        net = setup.model if model is None else model
        source = setup.val_source if source is None else source
        limit = setup.cfg.eval_samples if limit is None else limit
        if source is None or limit <= 0:
            return {}
        loader = eval_loader(source, setup.preprocess, batch=max(self.micro, 256) if isinstance(source, TensorSplit)
                             else self.micro, rank=acc.process_index, world=acc.num_processes, limit=limit,
                             workers=self.loader_workers(source, training=False), skip_corrupt=setup.cfg.skip_corrupt,
                             pin=acc.device.type == "cuda", seed=setup.cfg.seed, views=self.views)
        net.eval()
        seed_position(setup.cfg.seed, acc.process_index, self.step_count, EVAL)  # e.g. MPP's corruption at evaluation
        sums: dict[str, torch.Tensor] = {}
        count = torch.zeros((), device=acc.device)

        def forward(batch: dict[str, torch.Tensor], weight: int) -> None:
            inputs = self.to_device(batch)  # outside autocast: the photometry's pixels as in training
            with acc.autocast():
                out = net(inputs)
            for k, v in out.items():  # objectives report batch means: weighted by the batch's real samples
                sums[k] = sums.get(k, 0) + v.detach().float() * weight

        # shards differ by a sample, and a process may have none (--eval-samples 1): every process runs as many
        # forwards as the busiest one, the extra ones on a filler counted for nothing (FSDP needs each forward on
        # every process), so the weighted sums equal a 1-process evaluation; each round also agrees on a stop
        filler = None
        with iterate(loader) as batches:
            mine = iter(batches)
            while True:
                batch = next(mine, None)
                more, stop = self.evaluation_round(batch is not None)
                if stop:
                    setup.model.train()
                    return {}
                if not more:
                    break
                weight = 0 if batch is None else int(batch["label"].shape[0])
                if batch is None:
                    batch = filler = filler or first_sample_batch(source, setup.preprocess, self.views)
                forward(batch, weight)
                count += weight
        setup.model.train()  # (the EMA's module stays in eval mode)
        if not sums:
            return {}
        keys = sorted(sums)
        totals = acc.reduce(torch.stack([sums[k] for k in keys] + [count]), reduction="sum")
        return {f"{prefix}{k}": float(v / totals[-1]) for k, v in zip(keys, totals[:-1])}


def watch_images(source: Any, preprocess: Any, seed: int) -> torch.Tensor | bool:
    """WATCH_IMAGES of `source` drawn with the run's seed (never the first N: data is often sorted by class),
    decoded at the run's resolution: (N, 3, S, S) uint8; False for a stream or an undecodable draw."""
    try:
        n = len(source)
    except TypeError:  # a stream: no length to draw from
        return False
    chosen = np.sort(np.random.default_rng([seed, 79]).permutation(n)[:WATCH_IMAGES])
    try:
        return decode_split(source, preprocess, chosen).images
    except CorruptImageError:
        return False


def watch_figures(figures: dict[str, float]) -> dict[str, float]:
    """What of the collapse watch's figures a log step records."""
    return {k: figures[k] for k in LOGGED if k in figures}

"""`vitx bench`: what a run's training step gives on this machine, before a long run: images per second, TFLOP/s,
MFU and the share of time the loop waits for its input.

The run is built as `vitx pretrain` builds it (`runner.build`, the same settings, recipe and objective) in a
temporary folder, and stepped by the runner's own `Trainer.step` (its loader, accumulation, clipping, skip and
metric bookkeeping: the one training loop's step, not a copy), a few untimed steps first, then the timed ones,
the device waited for at both ends. FLOPs per image are counted by torch over one forward and backward of the
objective (`flops.count_flops`: the teacher's forward and the heads included) on the run's first micro-batch."""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

from ..errors import VitxError
from .config import PROFILE_HEAD, SYNTHETIC, SYNTHETIC_CLASSES, SYNTHETIC_IMAGES, BenchConfig

PROFILED_STEPS = 3
INPUT_BOUND = 0.5  # a GPU's input wait from which `vitx bench` says the input, not the GPU, sets the rate
# (below it, images made in the process may overlap kernels still queued: the GPU may still set it)


@dataclass
class Measured:
    """One measurement's figures (what --output writes), and the lines that say them."""

    model: str
    objective: str
    image_size: int
    batch_size: int
    precision: str
    compiled: bool
    device: str  # the GPU's name, or "CPU, N threads" (and who chose them, unless vitx's rule did)
    processes: int
    torch: str
    data: str
    warmup: int
    warmup_s: float
    steps: int
    timed_s: float
    loss: float | None
    images_per_s: float
    gflop_per_image: float
    tflops: float  # achieved, over all processes
    peak_tflops: float | None  # per process's device
    peak_source: str
    mfu: float | None
    input_wait: float  # share of the timed span the main process waited for its input
    workers: int  # the loader workers that made it (0: the process itself, between steps)
    none_because: str  # why no workers made it: --workers 0, or a split held in memory on a CPU ("" with workers)
    memory_gib: float | None  # the most the main process's GPU held (None on a CPU)
    stochastic_depth: str | None = None  # the run's drop-path line (its rates and mode; None without)

    def lines(self) -> list[str]:
        run = (f"{self.model} at {self.image_size} px, {self.objective}, batch {self.batch_size}, precision "
               f"{self.precision}{', compiled' if self.compiled else ''}")
        where = f"{self.device}" + (f" × {self.processes} processes" if self.processes > 1 else "") + \
            (f", {self.workers} loader worker{'' if self.workers == 1 else 's'}" if self.workers else
             f", no loader workers ({self.none_because}: images made in this process)")
        loss = f"; loss {self.loss:.4g}" if self.loss is not None else ""
        per_device = f" per device × {self.processes}" if self.processes > 1 else ""
        mfu = (f"{self.mfu:.1%} of {self.peak_tflops:g} TFLOP/s{per_device} ({self.peak_source})"
               if self.mfu is not None else f"peak unknown ({self.peak_source}; give --peak-tflops for an MFU)")
        return [
            f"bench: {run}; {where}, torch {self.torch}",
            f"data: {self.data}",
            f"steps: {self.warmup} warm-up in {self.warmup_s:.1f} s (compilation and the loader's start included), "
            f"{self.steps} timed in {self.timed_s:.2f} s{loss}",
            f"img/s: {self.images_per_s:.1f}",
            f"TFLOP/s: {self.tflops:.3f} ({self.gflop_per_image:.3f} GFLOP per image, forward and backward, counted "
            "by torch's FlopCounterMode)",
            f"MFU: {mfu}",
            f"input wait: {self.input_wait:.1%} of the timed steps' time{self._input_reading()}",
            "memory: " + (f"{self.memory_gib:.1f} GiB at most on the device" if self.memory_gib is not None
                          else "not measured on a CPU"),
        ] + ([self.stochastic_depth] if self.stochastic_depth else [])

    def _input_reading(self) -> str:
        """What an input wait of INPUT_BOUND or more means on a GPU: the device idled for its images, so the rate
        is the loader's (on a CPU the wait is the share of each step spent making its input, said as it is)."""
        if self.memory_gib is None or self.input_wait < INPUT_BOUND:  # (no memory figure: a CPU)
            return ""
        made = f"more than its {self.workers} loader workers would feed it" if self.workers else \
            f"its images are made in this process between steps ({self.none_because})"
        return f": the input sets the rate, not the GPU; {made}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@contextmanager
def on_device(device: str) -> Iterator[None]:
    """`--device cpu` hides the GPUs from torch (and the loader's workers) for the measurement, which must start
    before anything in this process starts CUDA; `--device cuda` needs one."""
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    try:
        import torch

        if device == "cuda" and not torch.cuda.is_available():
            raise VitxError("--device cuda: torch sees no GPU here (torch.cuda.is_available() is False); use "
                            "--device cpu or auto")
        yield
    finally:
        if device == "cpu":
            if hidden is None:
                os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = hidden


def synthetic_split(images: int, size: int, classes: int, seed: int) -> Any:
    """`images` random uint8 images (N, 3, size, size) with random labels, held in memory: the runner's loader
    draws them (and makes an objective's crops from them) without decoding anything."""
    import torch

    from ..data.memory import TensorSplit

    g = torch.Generator().manual_seed(seed)
    return TensorSplit(torch.randint(0, 256, (images, 3, size, size), generator=g, dtype=torch.uint8),
                       torch.randint(0, classes, (images,), generator=g), classes,
                       [str(c) for c in range(classes)], origin=SYNTHETIC)


def run_options(given: dict[str, Any], bench: BenchConfig, out: str) -> dict[str, Any]:
    """The pre-training settings of the measured run: what was given, as short as the measurement, in `out`,
    nothing evaluated, watched, monitored or logged."""
    options = {**given, "steps": bench.warmup + bench.steps + (PROFILED_STEPS if bench.profile else 0),
               "output_dir": out, "log_with": "none", "eval_samples": 0, "monitor": "", "watch_every": 0,
               "stop_on_collapse": False, "quiet": True, "curves": False}
    if options.get("data", SYNTHETIC) == SYNTHETIC:  # opened for its size and classes only (its images: in memory)
        options["data"] = f"embedded:shapes(length={SYNTHETIC_IMAGES},classes={SYNTHETIC_CLASSES})"
    return options


def build_trainer(options: dict[str, Any], synthetic: bool = False) -> Any:
    """A runner `Trainer` for pre-training `options` (a new run in options['output_dir']), started as the loop
    starts one: the objective told the epoch's length and the run's steps. `synthetic`: trained on random images
    in memory (`synthetic_split`) instead of its data's. Stepped by hand (`step()`), as `vitx bench` and
    benchmarks/train_step.py do."""
    from ..runner import Trainer, build, resolve_config
    from ..runner.config import micro_batch
    from ..runner.loop import epoch_steps
    from ..console import make_console
    from ..runner.threads import fit_threads

    cfg, _ = resolve_config(options, resume=False)
    setup = build(cfg)
    if synthetic:
        micro = micro_batch(cfg, setup.accelerator.num_processes)
        setup.train_source = synthetic_split(max(256, 2 * micro), setup.preprocess.image_size, SYNTHETIC_CLASSES,
                                             cfg.seed)
    trainer = Trainer(setup, make_console(quiet=True))
    if synthetic:  # the threads for the stream it now trains from (held in memory: on a CPU no workers)
        setup.record["threads"] = fit_threads(trainer.loader_workers(setup.train_source), cfg.threads)
    setup.objective.epoch_steps = epoch_steps(setup.train_source, cfg.batch_size)
    setup.objective.on_fit_start(trainer.step_count, cfg.steps)
    return trainer


def measure(given: dict[str, Any], bench: BenchConfig) -> Measured | None:
    """Build the run of pre-training settings `given` and time its steps as `bench` says. Under a launcher every
    process steps; the main process alone returns the figures (None elsewhere)."""
    from ..runner.threads import kept_threads  # (the caller's torch threads back afterwards)

    with on_device(bench.device), kept_threads(), tempfile.TemporaryDirectory(prefix="vitx-bench-") as out:
        trainer = build_trainer(run_options(given, bench, out), synthetic=bench.data == SYNTHETIC)
        try:
            return _timed(trainer, bench)
        finally:
            trainer.close()


def _timed(trainer: Any, bench: BenchConfig) -> Measured | None:
    import torch

    from ..runner.reporting import describe_stochastic_depth
    from .flops import count_flops, device_peak, synchronize

    setup = trainer.setup
    cfg, acc = setup.cfg, setup.accelerator
    device = acc.device
    if bench.device != "auto" and device.type != bench.device:
        raise VitxError(f"--device {bench.device}: this process already uses {device.type} (CUDA started before "
                        "the measurement); run it in a fresh process, e.g. CUDA_VISIBLE_DEVICES= vitx bench ...")
    size = setup.preprocess.image_size
    if bench.data == SYNTHETIC:
        data = (f"synthetic ({len(setup.train_source)} random {size} px images in memory, drawn by the runner's "
                f"loader; the objective fitted as for {SYNTHETIC_IMAGES:,} images)")
    else:
        data = f"{cfg.data} ({setup.data_info.get('train_size') or 'a stream of'} training images)"

    first = next(trainer.batches())

    def forward_backward() -> None:  # the objective's forward and backward on one micro-batch, eager
        out = setup.model(trainer.to_device(first, train=True))
        acc.backward(out["loss"])

    flops = count_flops(forward_backward, device) / trainer.micro  # per image
    setup.optimizer.zero_grad(set_to_none=True)  # (under DeepSpeed, Accelerate's backward also stepped: the
    # weights are then one step on, which the timing does not see)

    start = time.perf_counter()
    for _ in range(bench.warmup):
        trainer.step()
    synchronize(device)
    trainer.pop_metrics()  # (the sums start again)
    warmup_s = time.perf_counter() - start
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    trainer.input_wait = 0.0
    start = time.perf_counter()
    for _ in range(bench.steps):
        trainer.step()
    metrics = trainer.pop_metrics()  # reads the device's sums: waits for the last step
    synchronize(device)
    timed_s = time.perf_counter() - start
    if bench.profile:  # (after the timed steps: the figures are the run's without it; every process steps)
        profile(trainer, Path(bench.profile))

    if not acc.is_main_process:
        return None
    images_per_s = cfg.batch_size * bench.steps / timed_s
    achieved = images_per_s * flops
    if bench.peak_tflops is not None:
        peak, source = bench.peak_tflops * 1e12, "given with --peak-tflops"
    else:
        peak, source = device_peak(device, cfg.precision)
    world = acc.num_processes
    threads = torch.get_num_threads()
    chosen = setup.record.get("threads", {}).get("chosen_by", "vitx")  # (--threads, OMP_NUM_THREADS or the rule)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else \
        f"CPU, {threads} thread{'s' if threads > 1 else ''}" + (f" ({chosen})" if chosen != "vitx" else "")
    workers = trainer.loader_workers(setup.train_source)
    return Measured(
        model=cfg.model, objective=cfg.objective, image_size=size, batch_size=cfg.batch_size,
        precision=cfg.precision, compiled=cfg.compile, device=name, processes=world, torch=torch.__version__,
        data=data, warmup=bench.warmup, warmup_s=warmup_s, steps=bench.steps, timed_s=timed_s,
        loss=metrics.get("loss"), images_per_s=images_per_s, gflop_per_image=flops / 1e9, tflops=achieved / 1e12,
        peak_tflops=peak / 1e12 if peak else None, peak_source=source,
        mfu=achieved / (peak * world) if peak else None,
        input_wait=min(1.0, trainer.input_wait / timed_s), workers=workers,
        none_because="" if workers else "--workers 0" if trainer.workers == 0 else
        "a CPU crops images held in memory itself",
        memory_gib=torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        stochastic_depth=describe_stochastic_depth(setup))


def profile(trainer: Any, path: Path) -> None:
    """PROFILED_STEPS more steps under torch.profiler; the operators that took the most time (on the GPU where
    there is one), as its table, to `path`."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity

    from .flops import synchronize

    device = trainer.setup.accelerator.device
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    cfg = trainer.setup.cfg
    busy = ""
    try:
        with torch.profiler.profile(activities=activities) as prof:
            start = time.perf_counter()
            for _ in range(PROFILED_STEPS):
                trainer.step()
            synchronize(device)
            wall_ms = (time.perf_counter() - start) * 1e3 / PROFILED_STEPS
        averages = prof.key_averages()
        try:
            table = averages.table(sort_by="self_device_time_total" if cuda else "self_cpu_time_total", row_limit=40)
        except (AttributeError, KeyError):  # a torch from before the device_* names
            table = averages.table(sort_by="self_cuda_time_total" if cuda else "self_cpu_time_total", row_limit=40)
        if cuda:  # the kernels' time against the step's: far below 100%, the host (dispatch, syncs) holds it back
            kernels_us = sum(getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
                             for e in averages if e.device_type != DeviceType.CPU)  # (the table's "Self CUDA" total)
            kernels_ms = kernels_us / 1e3 / PROFILED_STEPS
            busy = (f"a step {wall_ms:.1f} ms under the profiler; the GPU's kernels {kernels_ms:.1f} ms of it "
                    f"({kernels_ms / wall_ms:.0%} busy)\n")
    except RuntimeError as exc:  # the profiler's own failure (no CUPTI, say) costs the table, not the figures
        table = f"the profiler failed: {exc}"
        print(f"warning: --profile: {table}", file=sys.stderr)
    trainer.pop_metrics()
    if not trainer.setup.accelerator.is_main_process:
        return
    from ..safe_io import atomic_write_text
    from ..errors import cannot_write

    try:  # (checked writable before the measurement; a disk that fills since costs the table, not the figures)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, f"{PROFILE_HEAD}{PROFILED_STEPS} steps of {cfg.model}, {cfg.objective}, batch "
                                f"{cfg.batch_size}\n"
                                f"{busy}{table}\n")
    except OSError as exc:
        print(f"warning: --profile: {cannot_write(path, exc)}", file=sys.stderr)


def write(measured: Measured, path: str) -> None:
    """The figures as JSON (--output)."""
    from ..safe_io import atomic_write_text
    from ..errors import cannot_write

    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(path), json.dumps(measured.to_dict(), indent=2) + "\n")
    except OSError as exc:  # (the figures are printed already)
        raise cannot_write(path, exc) from None


__all__ = ["Measured", "build_trainer", "measure", "on_device", "run_options", "synthetic_split", "write"]

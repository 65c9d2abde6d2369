"""Where a command runs: the Accelerate state for a training run, and the device and process of every other
command. The one place that decides devices and processes: Accelerate, from how the command was launched
(`accelerate launch`, torchrun, or plain: one process on the GPU if there is one, else the CPU)."""
from __future__ import annotations

import atexit
import os
import sys

import torch
from accelerate import Accelerator, PartialState
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import ProjectConfiguration, set_seed

from ..errors import VitxError
from ..settings.groups import trackers
from .config import PretrainConfig, micro_batch


def _trackers(name: str) -> list[str] | None:
    return trackers(name) or None  # checked by the config's validate (the Output group's check_trackers)


def tracker_kwargs(cfg: PretrainConfig) -> dict[str, dict[str, str]]:
    """Each tracker's own words for the run's name and group (a transfer's sweep points and final runs are
    runs of one group per task); TensorBoard groups by folder (each run logs under its own --output-dir)."""
    if not cfg.tracker_run:
        return {}
    return {"wandb": {"name": cfg.tracker_run, **({"group": cfg.tracker_group} if cfg.tracker_group else {})},
            "mlflow": {"run_name": f"{cfg.tracker_group}/{cfg.tracker_run}" if cfg.tracker_group else cfg.tracker_run}}


def _warn_single_process_cpu_launch() -> None:
    """`accelerate launch` asked for several processes without torchrun (`--cpu --num_processes N`, or a config
    file with `distributed_type: MULTI_CPU`) starts ONE process: Accelerate leaves several CPU processes to
    mpirun, and only leaves MASTER_ADDR behind. Say so, and what launches several, rather than train with 1/N of
    the plan, without naming either cause: both leave the same environment."""
    env = os.environ
    mpi = any(k in env for k in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"))
    by_accelerate = "ACCELERATE_USE_CPU" in env  # every `accelerate launch` sets it; torchrun sets WORLD_SIZE too
    if by_accelerate and "MASTER_ADDR" in env and "WORLD_SIZE" not in env and not mpi:
        print("warning: accelerate launch started a single process although several were asked for (Accelerate "
              "starts several CPU processes only through mpirun); for several processes, on the CPU too, launch "
              "with `--multi_gpu --num_processes N`, or set `distributed_type: MULTI_GPU` in the Accelerate "
              "config file", file=sys.stderr)


def make_accelerator(cfg: PretrainConfig) -> Accelerator:
    """The Accelerator for a run (fresh process-wide state), after checking the batch divides over processes."""
    if cfg.precision == "fp16" and not torch.cuda.is_available():
        raise VitxError("fp16 mixed precision needs a GPU; on CPU use --precision bf16 or no")
    # Accelerate keeps process-wide singletons; a second run in the same process, as in tests, notebooks, sweeps
    # and a transfer's runs, must not inherit the first run's precision or accumulation settings. The process
    # state (rank, device, the process group) is kept while its group is up: it is the launch's, not the run's.
    AcceleratorState._reset_state(reset_partial_state=not torch.distributed.is_initialized())
    GradientState._reset_state()
    _warn_single_process_cpu_launch()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = cfg.tf32  # no effect without TF32
    accelerator = Accelerator(
        cpu=not torch.cuda.is_available(), mixed_precision=cfg.precision, gradient_accumulation_steps=cfg.grad_accum,
        step_scheduler_with_optimizer=False, log_with=_trackers(cfg.log_with),
        project_config=ProjectConfiguration(project_dir=cfg.output_dir, logging_dir=f"{cfg.output_dir}/logs"))
    _group_ends_at_exit()
    world = accelerator.num_processes
    if cfg.batch_size % (world * cfg.grad_accum):
        raise VitxError(f"--batch-size {cfg.batch_size} must divide evenly over {world} process(es) × "
                        f"{cfg.grad_accum} accumulation step(s)")
    set_seed(cfg.seed)
    return accelerator


def configure_deepspeed(accelerator: Accelerator, cfg: PretrainConfig) -> None:
    """Tell DeepSpeed what it cannot learn from `prepare` (vitx hands it no DataLoader): the micro-batch per process
    and the accumulation; and --grad-clip, as it clips inside its engine (a config file that clips at another value
    is refused, never silently overriding the run's setting). No-op without DeepSpeed."""
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is None:
        return
    ds = plugin.deepspeed_config
    ds["train_micro_batch_size_per_gpu"] = micro_batch(cfg, accelerator.num_processes)
    ds["gradient_accumulation_steps"] = cfg.grad_accum
    clip = ds.get("gradient_clipping", "auto")
    if clip not in ("auto", None) and float(clip) != float(cfg.grad_clip):
        raise VitxError(f"the DeepSpeed config clips gradients at {clip} but --grad-clip is {cfg.grad_clip}; "
                        "make them agree (or set gradient_clipping to auto)")
    ds["gradient_clipping"] = float(cfg.grad_clip)


def end_run(accelerator: Accelerator) -> None:
    """A run's end: its trackers finished (Accelerate keeps them on the main process). Not
    `Accelerator.end_training`, which also destroys the default process group (Accelerate 1.x): a process runs
    several runs (a transfer's sweep points, final runs and seeds; a notebook), and the next one, and the
    collectives after a fit (a transfer's test evaluation), need the group. It goes when the process exits."""
    for tracker in accelerator.trackers:
        tracker.finish()


_exit_hooked = False


def _group_ends_at_exit() -> None:
    """Under a launcher the process group, once up, stays up for every run of the process; it is destroyed at the
    process's exit (what `end_training` did at the end of each run; NCCL warns about a group left at exit)."""
    global _exit_hooked
    if not _exit_hooked and torch.distributed.is_available() and torch.distributed.is_initialized():
        atexit.register(_destroy_group)
        _exit_hooked = True


def _destroy_group() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()  # the default group and every group made beside it


def process_state() -> PartialState:
    """This process's Accelerate state (device, rank, processes), its process group up under a launcher."""
    state = PartialState(cpu=not torch.cuda.is_available())
    _group_ends_at_exit()
    return state


def process_device() -> torch.device:
    """This process's device, as Accelerate assigns it (cuda:<local rank> under a launcher; the CPU without a
    GPU): for commands that compute but do not train (few-shot evaluation, inspection, closed-form transfer)."""
    return process_state().device


def is_main_process() -> bool:
    """Whether this process writes files and prints results (one per run, however many processes there are)."""
    return process_state().is_main_process

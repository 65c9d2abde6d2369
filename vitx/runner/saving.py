"""A checkpoint of the current step: every process takes part (Accelerate's state, the gathered weights), the
main process writes the weight files in the run-folder layout (`runs/rundir.py`) and publishes the checkpoint
when all of it is on disk. A write that fails on any process, or weights that are not finite, stop every
process together with one line; the earlier checkpoints stay as they are.

A mixin of `loop.Trainer`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch
from accelerate import Accelerator
from safetensors import SafetensorError

from ..console import say
from ..safe_io import export_state, nonfinite, save_weights, torch_write_failure
from ..errors import VitxError, cannot_write
from ..runs.rundir import PREFIX, RunDir, write_weights
from .ema import RAW as EMA_RAW
from .setup import config_record


class Together:
    """The failures of one save on this process, and the collective that lets every process learn of one on
    any process (none is left waiting for another)."""

    def __init__(self, accelerator: Accelerator, run: RunDir, step: int) -> None:
        self.acc, self.run, self.step = accelerator, run, step
        self.target = run.checkpoints / f".{PREFIX}{step:08d}.partial"  # where the main process stages it
        self.failed: list[OSError | SafetensorError] = []

    def attempt(self, write: Callable[[], Any]) -> Any:
        """`write()`, unless something failed already; a failure to write is kept, not raised (torch.save's, a
        RuntimeError without an OS error, as the OS error it stands for)."""
        if not self.failed:
            try:
                return write()
            except (OSError, SafetensorError) as exc:
                self.failed.append(exc)
            except RuntimeError as exc:
                failure = torch_write_failure(exc, self.target)
                if failure is None:
                    raise
                self.failed.append(failure)
        return None

    def any_of(self, count: int) -> bool:
        """Whether any process counted something (a collective: every process calls it)."""
        return bool(self.acc.reduce(torch.tensor(float(count), device=self.acc.device), reduction="sum") > 0)

    def check(self) -> None:
        """Stop every process, in one line, when the write failed on any one (the staged folder removed)."""
        if not self.any_of(len(self.failed)):
            return
        if self.acc.is_main_process:
            self.run.discard(self.target)  # give back the space the attempt took (only a folder vitx made)
        where: Any = self.run.checkpoints / f"{PREFIX}{self.step:08d}"
        first = self.failed[0] if self.failed else None
        if isinstance(first, FileExistsError) and first.filename:
            where = first.filename  # a folder that is not vitx's, in the way (runs/rundir.py)
        said = cannot_write(where, first) if first else VitxError(f"cannot write {where} (see the main process)")
        raise VitxError(f"{said}; {self.run.kept()}")


class Saving:
    """`save()`: a checkpoint of the current step."""

    def save(self) -> Path | None:
        """Write and publish a checkpoint for the current step; its path on the main process, else None."""
        setup, acc = self.setup, self.setup.accelerator
        together = Together(acc, setup.run, self.step_count)
        acc.wait_for_everyone()
        staged = together.attempt(lambda: setup.run.staging(self.step_count)) if acc.is_main_process else None
        together.check()
        together.attempt(lambda: acc.save_state(str(together.target / "accelerate"), safe_serialization=True))
        together.check()
        state = self._finite_state(together)
        final = together.attempt(lambda: self._write(staged, state)) if acc.is_main_process else None
        together.check()
        self.agreement.saved()
        self.saved_step = self.step_count
        return final

    def _finite_state(self, together: Together) -> dict[str, torch.Tensor]:
        """The full weights (gathered when sharded, adapters merged), refused when not finite: non-finite weights
        are never published (every process stops here together)."""
        setup, acc = self.setup, self.setup.accelerator
        state = acc.get_state_dict(setup.model)
        state = export_state(acc.unwrap_model(setup.model), state)  # e.g. LoRA factors merged into their layers
        broken = nonfinite(state) if acc.is_main_process else []
        if together.any_of(len(broken)):
            if acc.is_main_process:
                setup.run.discard(together.target)
            raise VitxError(f"step {self.step_count}: weights are not finite ({', '.join(broken[:2]) or 'see rank 0'});"
                            f" no checkpoint written; {self.rescue(int(self._nonfinite_streak))}")
        return state

    def _write(self, staged: Path, state: dict[str, torch.Tensor]) -> Path:
        """The main process's part: the weight files in the run-folder layout, curves.png, then publish."""
        setup, step = self.setup, self.step_count
        teacher = setup.objective.teacher_backbone()  # `vitx export --export-teacher` reads it
        average = None
        if setup.ema is not None:  # as it is (for --resume), and laid out as the live weights (for --use-ema)
            raw = setup.ema.module.state_dict()
            save_weights(raw, staged / "accelerate" / EMA_RAW, {"vitx_step": str(step)})
            average = export_state(setup.ema.module, raw)
        write_weights(staged, step, state, ema=average, teacher=None if teacher is None else teacher.state_dict())
        if setup.cfg.curves and not self.stop_requested:  # a preempted job has seconds: no figure
            self.draw_curves(staged / "curves.png")
        return setup.run.publish(staged, step, config_record(setup, step), setup.cfg.keep_checkpoints)

    def draw_curves(self, path: Path) -> None:
        """curves.png from metrics.jsonl as it stands (main process); a failure is a warning, never a crash."""
        from ..plots import draw_run, try_draw

        cfg = self.setup.cfg
        title = f"{Path(cfg.output_dir).name}: {cfg.objective}, {cfg.data}, step {self.step_count}"
        try_draw("curves.png", draw_run, self.setup.run.path, path, title,
                 warn=lambda line: say(self.console, line))


__all__ = ["Saving", "Together"]

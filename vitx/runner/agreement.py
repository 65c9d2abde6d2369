"""The per-step agreement: every process of a run takes the same three decisions after each optimiser step:
skip this update (a non-finite loss or gradient anywhere), stop after it (a stop signal reached any process),
save after it (--save-every-minutes has passed on the main process's clock).

With a fused Adam(W) the skip is decided on the device (the all-reduced flag becomes the kernel's `found_inf`)
and stop/save over a gloo group on the host, so no step waits for the device; otherwise one small all-reduce
carries all three and is read on the host (a wait for the device: free on a CPU).
"""
from __future__ import annotations

import time
from typing import Any

import torch

from .preemption import StopRequests


_host: tuple[Any, Any] | None = None  # (the default group, the gloo group made beside it)


def host_group() -> Any:
    """A gloo group beside the default one (multi-process, fused skip), made at its first use (a collective: every
    process makes it at the same step) and kept for the process's later runs, as the default group is; destroyed
    with it at exit."""
    global _host
    import torch.distributed as dist

    if _host is None or _host[0] is not dist.group.WORLD:  # none yet, or the default group was made again
        _host = (dist.group.WORLD, dist.new_group(backend="gloo"))
    return _host[1]


class Agreement:
    """The local requests of one process and the collectives that make them everyone's."""

    def __init__(self, accelerator: Any, save_every_minutes: float) -> None:
        self.accelerator = accelerator
        self.minutes = save_every_minutes
        self.requests: StopRequests | None = None  # set while a run is fitting
        self.last_save = time.monotonic()

    def saved(self) -> None:
        """A checkpoint was written: the --save-every-minutes clock starts again."""
        self.last_save = time.monotonic()

    def local(self) -> tuple[bool, bool]:
        """(a stop signal reached this process, a timed save is due by this process's clock)."""
        asked = self.requests is not None and self.requests.received is not None
        due = self.accelerator.is_main_process and self.minutes > 0 and \
            time.monotonic() - self.last_save >= self.minutes * 60
        return asked, due

    def _any(self, *flags: bool) -> tuple[bool, ...]:
        """Each flag true on some process: one all-reduce over the host's group (none for one process)."""
        if self.accelerator.num_processes == 1:
            return flags
        import torch.distributed as dist

        summed = torch.tensor([float(f) for f in flags])
        dist.all_reduce(summed, group=host_group())
        return tuple(bool(v > 0) for v in summed)

    def on_host(self) -> tuple[bool, bool]:
        """(stop, save) agreed without touching the device."""
        return self._any(*self.local())  # type: ignore[return-value]

    def round(self, more: bool) -> tuple[bool, bool]:
        """(some process has more to evaluate, given that this one has `more`; a stop signal reached some process)
        in one collective on the host: an evaluation's rounds, the same number on every process."""
        return self._any(more, self.local()[0])  # type: ignore[return-value]

    def with_skip(self, nonfinite: torch.Tensor) -> tuple[bool, bool, bool]:
        """(skip, stop, save) agreed in one collective read on the host."""
        acc = self.accelerator
        local = torch.stack([nonfinite, *(torch.tensor(float(f), device=acc.device) for f in self.local())])
        skip, stop, save = (v > 0 for v in acc.reduce(local, reduction="sum").tolist())
        return skip, stop, save

    def skip_on_device(self, nonfinite: torch.Tensor) -> torch.Tensor:
        """The device flag ok (1.0: apply the update everywhere; 0.0: skip it everywhere), never read on the host."""
        acc = self.accelerator
        return ((acc.reduce(nonfinite, reduction="sum") if acc.num_processes > 1 else nonfinite) == 0).float()

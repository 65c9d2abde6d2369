"""`vitx bench`'s settings: the run's own (model, objective, batch, precision, ...: pre-training's declarations,
`vitx pretrain`'s defaults, any other through --recipe and --set) and the measurement's (timed steps, data,
device, peak). Torch-free: `vitx --help` reads it."""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import VitxError
from ..runner.config import PretrainConfig
from ..settings import DATA, OUTPUT, SCHEDULE, SYSTEM, check, defaults, setting, with_default
from ..settings.paths import writable_file

DEVICES = ("auto", "cuda", "cpu")
SYNTHETIC = "synthetic"
SYNTHETIC_IMAGES = 1_281_167  # ImageNet-1k's training images: what a synthetic run's objective is fitted to
SYNTHETIC_CLASSES = 10  # its classes (a supervised head's width: embedded:shapes, which sizes the run, has 10)


def _run(name: str) -> Any:
    """Pre-training's setting `name`, declared there (help, panel, bounds) with its default: `vitx bench` with
    no options measures the run `vitx pretrain` with none makes."""
    return with_default(PretrainConfig, name, defaults(PretrainConfig)[name])


# pre-training settings the measurement replaces with its own (a recipe's are replaced silently: it is a run's)
OWN = {"steps": "--steps (the steps it times, after --warmup's)", "data": "--data (synthetic or your images)",
       "output_dir": "--output (its figures; the run itself goes to a temporary folder)"}
PROFILE_HEAD = "vitx bench --profile: "  # a profile's first words: what a later --profile may replace


def is_bench_file(path: Path) -> bool:
    """Whether `path` holds what `vitx bench` writes (--output's figures, --profile's table): replaced by a
    later measurement without --force."""
    try:
        with open(path, "rb") as stream:
            head = stream.read(65536)
    except OSError:
        return False
    if head.startswith(PROFILE_HEAD.encode()):
        return True
    try:
        record = json.loads(head)
    except ValueError:
        return False
    return isinstance(record, dict) and {"images_per_s", "gflop_per_image"} <= set(record)


@dataclass
class BenchConfig:
    """A measurement of the runner's training step (`speed/bench.py`)."""

    model: str = _run("model")
    objective: str = _run("objective")
    image_size: int | None = _run("image_size")
    batch_size: int = _run("batch_size")
    grad_accum: int = _run("grad_accum")
    precision: str = _run("precision")
    compile: bool = _run("compile")
    workers: int = _run("workers")
    threads: int = _run("threads")
    data: str = setting(SYNTHETIC, "synthetic: random images held in memory, drawn by the runner's loader without "
                        "decoding (the input wait is then the loader's and the objective's crops' alone; options an "
                        "objective fits to the data are fitted as for ImageNet-1k's 1,281,167 images; 10 "
                        "classes); or anything `vitx pretrain --data` takes: your own images, whose input wait says "
                        "whether the loader keeps up with the step.", DATA)
    steps: int = setting(20, "How many steps the measurement times (after --warmup's).", SCHEDULE, above=0, limit=100_000)
    warmup: int = setting(3, "Untimed steps first: compilation, the loader's start, the kernels' first choices.",
                          SCHEDULE, min=0, limit=100_000)
    device: str = setting("auto", "Where to run: auto (a GPU where there is one), cuda or cpu.", SYSTEM,
                          choices=DEVICES)
    peak_tflops: float | None = setting(None, "The device's dense peak in TFLOP/s at the run's precision, for the "
                                        "MFU where vitx does not know it.", SYSTEM, above=0,
                                        shown="the datasheet's for the GPUs vitx knows (H100, H200: 989 bf16, "
                                              "495 tf32); unknown on a CPU")
    output: str = setting("", "Also write the figures to this JSON file.", OUTPUT)
    profile: str = setting("", "Also profile 3 more steps with torch.profiler and write its table of the "
                           "operators that took the most time to this text file.", OUTPUT)
    force: bool = setting(False, "Replace an --output or --profile file that vitx bench did not write (a file it "
                          "wrote is replaced anyway; a run's own files never are).", OUTPUT, affects_result=False)

    def validate(self) -> "BenchConfig":
        check(self)  # every bound and choice, as declared, in one line naming the option
        if self.output and self.profile and os.path.abspath(os.path.expanduser(self.output)) == \
                os.path.abspath(os.path.expanduser(self.profile)):
            raise VitxError(f"--output and --profile name the same file {self.output}; give each its own")
        for flag, path, example in (("--output", self.output, "bench.json"), ("--profile", self.profile,
                                                                             "profile.txt")):
            if path:  # refused now, not after the measurement
                writable_file(path, flag, self.force, example=example, ours=is_bench_file,
                              what="a file vitx bench wrote")
        return self

    def run_settings(self, given: dict[str, Any]) -> dict[str, Any]:
        """Of the options `given`, the run's (pre-training's settings; the data is the measurement's)."""
        run = {f.name for f in dataclasses.fields(PretrainConfig)}
        return {k: v for k, v in given.items() if k in run and k not in OWN}


__all__ = ["OWN", "BenchConfig", "DEVICES", "PROFILE_HEAD", "SYNTHETIC", "SYNTHETIC_CLASSES", "SYNTHETIC_IMAGES",
           "is_bench_file"]

"""What every `vitx eval NAME` reads, as data declared once (vitx/settings/): a start, its input, labelled data;
each evaluator adds its own settings (vitx/evaluators/). Torch-free: `--help` reads it."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import VitxError
from ..settings import DATA, MODEL, OUTPUT, check, setting
from ..settings.groups import Columns, Input, Seeded, Start, TestDraw
from ..settings.paths import writable_file
from . import AUTO, FEATURE_CHOICES

GEOMETRIES = ("start", "big_vision")  # how eval images are resized and cropped (frozen.py)


@dataclass
class FrozenConfig(Seeded, Start, Columns, Input, TestDraw):
    """What every frozen-feature evaluation reads: a start, its input, and one or several labelled datasets."""

    data: str = setting("", "Labelled data, one or several comma-separated: embedded:digits|shapes, an image folder, a save_to_disk or parquet folder, hf:owner/name, WebDataset shards.", DATA, shown="embedded:digits")
    task: str = setting("", "Or registered tasks, comma-separated, e.g. vtab/dsprites_loc,vtab/dsprites_ori (their train and test splits).", DATA, shown="none")
    preprocess: str = setting("start", "Image geometry: start (the start's eval transform: timm's for a timm start, a centre crop otherwise; a task's images squashed whole, as VTAB does) or big_vision (its few-shot evaluator's: short side to S·256/224, centre crop S, for every dataset).", DATA, choices=GEOMETRIES)
    output: str = setting("", "Write the numbers as JSON here (a new file: an existing one is refused without --force).", OUTPUT, shown="none")
    force: bool = setting(False, "Replace an existing --output file (as `vitx export --force` replaces its own files).", OUTPUT, affects_result=False)

    def validate(self) -> "FrozenConfig":
        check(self)
        if self.task and self.data:
            raise VitxError("give --data or --task, not both")
        if self.output:
            writable_file(self.output, "--output", self.force)
        elif self.force:
            raise VitxError("--force replaces an existing --output file; give --output FILE, or drop --force")
        return self


@dataclass
class Readout:
    """Which features of the start an evaluation reads (`vitx eval fewshot`, `vitx eval knn`; the linear probe picks
    among several, `--features all`)."""

    is_group = True
    features: str = setting(AUTO, "auto (what the start's objective trains: patch-mean after MPP or MAE, pre-logits otherwise), pre-logits (the paper's: after the pre-training head's tanh layer when it has one), cls-token (the \\[class] token after the final norm) or patch-mean (the mean of the patch tokens).", MODEL, choices=FEATURE_CHOICES)


__all__ = ["FrozenConfig", "GEOMETRIES", "Readout"]

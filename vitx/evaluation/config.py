"""What every `vitx eval NAME` reads, as data declared once (vitx/settings/): a start, its input, labelled data;
each evaluator adds its own settings (vitx/evaluators/). Torch-free: `--help` reads it."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import VitxError
from ..settings import DATA, EVALUATION, MODEL, OUTPUT, check, setting
from ..settings.groups import LIMITS, Columns, Input, Weights

GEOMETRIES = ("start", "big_vision")  # how eval images are resized and cropped (frozen.py)


@dataclass
class FrozenConfig(Weights, Columns, Input):
    """What every frozen-feature evaluation reads: a start, its input, and one or several labelled datasets."""

    start: str = setting("runs/pretrain", "A vitx run or checkpoint directory, a timm model folder, timm:<name>, or scratch.", MODEL, flag="--from")
    model: str | None = setting(None, "Backbone for --from scratch (see `vitx models`).", MODEL)
    seed: int = setting(0, "Initialisation of --from scratch and the draw of --test-samples (and --train-samples); few-shot draws its shots with seeds 0..N-1.", MODEL, min=0, limit=LIMITS["seed"])
    image_size: int | None = setting(None, "Resolution; position embeddings are interpolated.", MODEL, above=0, limit=LIMITS["image_size"], shown="the start's")
    data: str = setting("", "Labelled data, one or several comma-separated: embedded:digits|shapes, an image folder, a save_to_disk or parquet folder, hf:owner/name, WebDataset shards.", DATA, shown="embedded:digits")
    task: str = setting("", "Or registered tasks, comma-separated, e.g. vtab/dsprites_loc,vtab/dsprites_ori (their train and test splits).", DATA, shown="none")
    preprocess: str = setting("start", "Image geometry: start (the start's eval transform: timm's for a timm start, a centre crop otherwise; a task's images squashed whole, as VTAB does) or big_vision (its few-shot evaluator's: short side to S·256/224, centre crop S, for every dataset).", DATA, choices=GEOMETRIES)
    test_samples: int = setting(0, "Evaluate on N test images, a seeded, class-stratified draw (--seed): the same images in `vitx eval` and `vitx transfer`; 0: the whole test split.", EVALUATION, min=0, limit=10_000_000)
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


def writable_file(path: str, flag: str, force: bool = False) -> None:
    """Refuse, before any work, a file path that cannot be written: an existing folder, a file where one of
    its folders should be (the JSON is written last, after minutes of feature extraction), or, without `force`,
    a file already there (an earlier result is never replaced unasked)."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise VitxError(f"{flag} {path} is a folder; give a file to write, e.g. {flag} {target / 'results.json'}")
    if (target.exists() or target.is_symlink()) and not force:
        raise VitxError(f"{flag} {path} exists; give a new file, or pass --force to replace it")
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise VitxError(f"{flag} {path}: {parent} is a file, not a folder")
            break


__all__ = ["FrozenConfig", "GEOMETRIES", "writable_file"]

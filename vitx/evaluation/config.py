"""`vitx eval fewshot`'s settings as data, declared once (vitx/settings.py): its options, their checks and the
JSON it writes come from here. Torch-free: `--help` reads it."""
from __future__ import annotations

from dataclasses import dataclass

from ..data import INTERPOLATIONS
from ..errors import VitxError
from ..settings import DATA, EVALUATION, MODEL, OUTPUT, check, setting
from . import AUTO, FEATURES, FEWSHOT_REG

GEOMETRIES = ("start", "big_vision")  # how eval images are resized and cropped (frozen.py)


@dataclass
class FewshotConfig:
    """Few-shot linear evaluation of frozen features: big_vision's protocol (1/5/10/25 shots, 3 seeds, λ = 2¹⁰)."""

    start: str = setting("runs/pretrain", "A vitx run or checkpoint directory, a timm model folder, timm:<name>, or scratch.", MODEL, flag="--from")
    model: str | None = setting(None, "Backbone for --from scratch (see `vitx models`).", MODEL)
    seed: int = setting(0, "Initialisation of --from scratch (the shots are drawn with seeds 0..N-1).", MODEL, min=0, limit=2 ** 32 - 1)
    image_size: int | None = setting(None, "Resolution; position embeddings are interpolated.", MODEL, above=0, limit=4096, shown="the start's")
    features: str = setting(AUTO, "auto (what the start's objective trains: patch-mean after MPP or MAE, pre-logits otherwise), pre-logits (the paper's: after the pre-training head's tanh layer when it has one), backbone (the \\[class] token after the final norm) or patch-mean (the mean of the patch tokens).", MODEL, choices=(AUTO, *FEATURES))
    data: str = setting("", "Labelled data, one or several comma-separated: embedded:digits|shapes, an image folder, a save_to_disk or parquet folder, hf:owner/name, WebDataset shards.", DATA, shown="embedded:digits")
    task: str = setting("", "Or registered tasks, comma-separated, e.g. vtab/dsprites_loc,vtab/dsprites_ori (their train and test splits).", DATA, shown="none")
    data_dir: str | None = setting(None, "Local copy of the task's data.", DATA)
    label_key: str = setting("", "--data's label column (or json.<field>).", DATA, shown="found")
    image_key: str = setting("", "--data's image column.", DATA, shown="the first image column")
    mean: list[float] | None = setting(None, "Input normalisation mean per RGB channel, e.g. 0.485,0.456,0.406.", DATA, shown="the start's", example="0.5,0.5,0.5", length=3)
    std: list[float] | None = setting(None, "Input normalisation std per RGB channel.", DATA, above=0, shown="the start's", example="0.5,0.5,0.5", length=3)
    interpolation: str | None = setting(None, "bicubic, bilinear or nearest.", DATA, choices=INTERPOLATIONS, shown="the start's")
    preprocess: str = setting("start", "Image geometry: start (the start's eval transform: timm's for a timm start, a centre crop otherwise; a task's images squashed whole, as VTAB does) or big_vision (its few-shot evaluator's: short side to S·256/224, centre crop S, for every dataset).", DATA, choices=GEOMETRIES)
    shots: list[int] = setting([1, 5, 10, 25], "Images per class.", EVALUATION, above=0, says="are images per class and must be positive")
    seeds: int = setting(3, "Draws of the shots per count (seeds 0..N-1).", EVALUATION, above=0)
    reg: float = setting(FEWSHOT_REG, "L2 regularisation of the least-squares head.", EVALUATION, above=0, says=f"must be positive (the paper's is {FEWSHOT_REG:g})")
    test_samples: int = setting(0, "Evaluate on the first N test images; 0: all.", EVALUATION, min=0, limit=10_000_000)
    output: str = setting("", "Write the numbers as JSON here.", OUTPUT, shown="none")

    def validate(self) -> "FewshotConfig":
        check(self)
        if self.task and self.data:
            raise VitxError("give --data or --task, not both")
        return self


__all__ = ["FewshotConfig", "GEOMETRIES"]

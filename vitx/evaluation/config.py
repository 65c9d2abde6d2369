"""`vitx eval fewshot`, `knn` and `linear`'s settings as data, declared once (vitx/settings.py): its options, their checks and the
JSON it writes come from here. Torch-free: `--help` reads it."""
from __future__ import annotations

from dataclasses import dataclass

from ..data import INTERPOLATIONS
from ..errors import VitxError
from ..settings import DATA, EVALUATION, MODEL, OUTPUT, check, setting
from . import AUTO, FEATURES, FEWSHOT_REG, KNN_TEMPERATURE, LINEAR_BATCH, LINEAR_EPOCHS, LINEAR_LRS, READOUTS, VAL_FRACTION

GEOMETRIES = ("start", "big_vision")  # how eval images are resized and cropped (frozen.py)
# --use-ema, for every command that reads a start (runner/config.SHARED takes it from here)
USE_EMA = dict(help="Read the start's moving average of the weights (ema.safetensors, saved by a run with --ema-decay) instead of its live weights.", group=MODEL)


@dataclass
class FrozenConfig:
    """What every frozen-feature evaluation reads: a start, its input, and one or several labelled datasets."""

    start: str = setting("runs/pretrain", "A vitx run or checkpoint directory, a timm model folder, timm:<name>, or scratch.", MODEL, flag="--from")
    model: str | None = setting(None, "Backbone for --from scratch (see `vitx models`).", MODEL)
    use_ema: bool = setting(False, **USE_EMA)
    seed: int = setting(0, "Initialisation of --from scratch and the draw of --test-samples (and --train-samples); few-shot draws its shots with seeds 0..N-1.", MODEL, min=0, limit=2 ** 32 - 1)
    image_size: int | None = setting(None, "Resolution; position embeddings are interpolated.", MODEL, above=0, limit=4096, shown="the start's")
    data: str = setting("", "Labelled data, one or several comma-separated: embedded:digits|shapes, an image folder, a save_to_disk or parquet folder, hf:owner/name, WebDataset shards.", DATA, shown="embedded:digits")
    task: str = setting("", "Or registered tasks, comma-separated, e.g. vtab/dsprites_loc,vtab/dsprites_ori (their train and test splits).", DATA, shown="none")
    data_dir: str | None = setting(None, "Local copy of the task's data.", DATA)
    label_key: str = setting("", "--data's label column (or json.<field>).", DATA, shown="found")
    image_key: str = setting("", "--data's image column.", DATA, shown="the first image column")
    mean: list[float] | None = setting(None, "Input normalisation mean per RGB channel, e.g. 0.485,0.456,0.406.", DATA, shown="the start's", example="0.5,0.5,0.5", length=3)
    std: list[float] | None = setting(None, "Input normalisation std per RGB channel.", DATA, above=0, shown="the start's", example="0.5,0.5,0.5", length=3)
    interpolation: str | None = setting(None, "bicubic, bilinear or nearest.", DATA, choices=INTERPOLATIONS, shown="the start's")
    preprocess: str = setting("start", "Image geometry: start (the start's eval transform: timm's for a timm start, a centre crop otherwise; a task's images squashed whole, as VTAB does) or big_vision (its few-shot evaluator's: short side to S·256/224, centre crop S, for every dataset).", DATA, choices=GEOMETRIES)
    test_samples: int = setting(0, "Evaluate on N test images, a seeded draw (--seed; never the first N); 0: all.", EVALUATION, min=0, limit=10_000_000)
    output: str = setting("", "Write the numbers as JSON here.", OUTPUT, shown="none")

    def validate(self) -> "FrozenConfig":
        check(self)
        if self.task and self.data:
            raise VitxError("give --data or --task, not both")
        return self


@dataclass
class FewshotConfig(FrozenConfig):
    """Few-shot linear evaluation of frozen features: big_vision's protocol (1/5/10/25 shots, 3 seeds, λ = 2¹⁰)."""

    features: str = setting(AUTO, "auto (what the start's objective trains: patch-mean after MPP or MAE, pre-logits otherwise), pre-logits (the paper's: after the pre-training head's tanh layer when it has one), backbone (the \\[class] token after the final norm) or patch-mean (the mean of the patch tokens).", MODEL, choices=(AUTO, *FEATURES))
    shots: list[int] = setting([1, 5, 10, 25], "Images per class.", EVALUATION, above=0, says="are images per class and must be positive")
    seeds: int = setting(3, "Draws of the shots per count (seeds 0..N-1).", EVALUATION, above=0)
    reg: float = setting(FEWSHOT_REG, "L2 regularisation of the least-squares head.", EVALUATION, above=0, says=f"must be positive (the paper's is {FEWSHOT_REG:g})")


@dataclass
class KnnConfig(FrozenConfig):
    """Weighted k-nearest-neighbour classification of frozen features: DINO's protocol (cosine similarity, votes
    weighted exp(sim / T), T = 0.07; k = 10, 20, 100, 200 as DINO reports)."""

    features: str = setting(AUTO, "auto (what the start's objective trains), pre-logits, backbone (\\[class] token) or patch-mean.", MODEL, choices=(AUTO, *FEATURES))
    k: list[int] = setting([10, 20, 100, 200], "Neighbours that vote (each at most the train images).", EVALUATION, above=0, limit=1_000_000, says="are neighbour counts and must be positive")
    temperature: float = setting(KNN_TEMPERATURE, "Temperature T of the votes' weights exp(sim / T).", EVALUATION, above=0)
    train_samples: int = setting(0, "Train images that vote: a seeded, class-balanced draw; 0: all.", EVALUATION, min=0, limit=100_000_000)


@dataclass
class LinearConfig(FrozenConfig):
    """A linear head on frozen, cached features: lr × features chosen on a held-out part of train, reported on
    test (MAE's linear probe, DINO's and DINOv2's linear evaluation)."""

    features: list[str] = setting(["all"], "Feature choices the probe picks from on validation: all (every one the start has), or some of pre-logits, backbone (\\[class] token), patch-mean, backbone+patch-mean, last4 (the \\[class] tokens of the last 4 blocks); auto: the start's own.", MODEL, choices=("all", AUTO, *READOUTS))
    lrs: list[float] = setting(list(LINEAR_LRS), "SGD learning rates of the grid (one head each, trained side by side).", EVALUATION, above=0, limit=1000)
    epochs: int = setting(LINEAR_EPOCHS, "Passes over the cached train features.", EVALUATION, above=0, limit=100_000)
    batch_size: int = setting(LINEAR_BATCH, "Batch of features per SGD step.", EVALUATION, above=1, limit=10_000_000)
    batch_norm: bool = setting(True, "MAE's BatchNorm without affine before the head (one lr grid for features of any scale).", EVALUATION)
    val_fraction: float = setting(VAL_FRACTION, "Part of train held out to choose lr × features (stratified, seeded).", EVALUATION, above=0, below=1)
    seeds: list[int] = setting([0, 1, 2], "Seeds of the final head (its initialisation and batch order): mean ± s.d. on test.", EVALUATION, min=0, limit=2 ** 32 - 1)
    train_samples: int = setting(0, "Train images: a seeded, class-balanced draw; 0: all.", EVALUATION, min=0, limit=100_000_000)


__all__ = ["USE_EMA", "FewshotConfig", "FrozenConfig", "GEOMETRIES", "KnnConfig", "LinearConfig"]

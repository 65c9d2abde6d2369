"""Published VTAB-1k results, task by task, to print beside a run's own (`vitx transfer --compare NAME`).

Each row names its source table. Numbers are test top-1 in percent, in the papers' rounding. The ViT-B/16
ImageNet-21k rows are the VPT paper's (Jia et al., ECCV 2022, Table 1 and its appendix), as the PEFT papers
after it reprint them (FacT, Jie & Deng, AAAI 2023, Table 1; the V-PETL Bench README; Convpass README for the
group means); the linear-probe row circulates in two versions that differ in CIFAR-100 (63.4 / 64.4) and
RESISC45 (68.6 / 68.5): this is the one whose natural mean is VPT's 68.93. The LoRA row is NOAH's (Zhang et al.
2022): rank 8 on the fused attention qkv only, 0.29M parameters, the `lora` plugin's default.

The PEFT rows also carry the setup behind them (`setup`: vitx's transfer settings and the method's options, with
the file and line they come from; `beyond`: what of it vitx has no setting for), so that a run printed beside a
row says where its own settings differ (`differences`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import VitxError

# the 19 tasks in the order the papers print them (natural, specialized, structured)
ORDER = ("cifar100", "caltech101", "dtd", "flowers102", "pets", "svhn", "sun397", "camelyon", "eurosat", "resisc45",
         "retinopathy", "clevr_count", "clevr_dist", "dmlab", "kitti_dist", "dsprites_loc", "dsprites_ori",
         "smallnorb_azi", "smallnorb_ele")

VIT_PAPER = "Dosovitskiy et al., ICLR 2021, Table 9 (per task) and Table 2 (mean ± s.d. over 3 runs)"
VPT = "Jia et al., ECCV 2022 (VPT), Table 1 rows as reprinted in FacT (AAAI 2023) Table 1 and V-PETL Bench"
NOAH = ("Zhang et al., Neural Prompt Search (NOAH), arXiv 2206.04673, Table 1, LoRA row (r = 8 on qkv, 0.29M), as "
        "reprinted in the V-PETL Bench README (VTAB table; its mean, 72.25, is over the 19 tasks)")
B16_I21K = ("vit_base_patch16_224.orig_in21k", "vit_base_patch16_224_in21k")  # timm names of the start

# The setups behind the PEFT rows, as vitx settings ("epochs" of the training images; "<method>.<option>": an
# option of the method adapter). LoRA: NOAH's LoRA VTAB script as its repository's last commit has it
# (configs/LoRA/VTAB/slurm_train_lora_vtab.sh; its first commit ran lr 0.005, the next day's 0.001), the
# options its supernet_train_prompt.py keeps at their defaults, and the model it builds.
NOAH_LORA = {"optimizer": "adamw", "lr": 1e-3, "weight_decay": 1e-4, "batch_size": 64, "epochs": 100, "warmup": 0.1,
             "sweep": False, "augment": False, "mixup": 0.0, "cutmix": 0.0, "label_smoothing": 0.0, "grad_clip": 0.0,
             "drop_path": 0.1, "lora.rank": 8, "lora.alpha": 8.0, "lora.targets": "qkv", "lora.init": "noah",
             "lora.dropout": 0.1}
NOAH_LORA_SOURCE = ("NOAH configs/LoRA/VTAB/slurm_train_lora_vtab.sh:12,22,36, experiments/LoRA/ViT-B_prompt_lora_8"
                    ".yaml:5, supernet_train_prompt.py:59,80,207, "
                    "model/supernet_vision_transformer_timm.py:225-228,531")
NOAH_BEYOND = ("the lr steps once per epoch, from a warm-up at 1e-6 to a cosine floor of 1e-5 (timm's scheduler, "
               "supernet_train_prompt.py:98-109)")
# VPT's own runs (VPT-shallow, -deep, and its Bias row, BitFit): tune_vtab.py, configs/base-prompt.yaml
VPT_RUNS = {"optimizer": "sgd", "epochs": 100, "warmup": 0.1, "sweep": True, "augment": False, "mixup": 0.0,
            "cutmix": 0.0, "label_smoothing": 0.0}
VPT_SOURCE = "VPT tune_vtab.py:100,215-266, configs/base-prompt.yaml:11-19, demo.ipynb (VTAB final runs)"
VPT_BEYOND = ("per task on val200: lr × weight decay from VPT's grid for SGD (base lr 0.05-50 × batch / 256, weight "
              "decay 0-0.01){}; batch 64 or 128; test top-1 the mean of 5 seeds")


@dataclass(frozen=True)
class Published:
    """One published row: the start, the method, the per-task numbers (%), where they were printed."""

    name: str
    start: str
    method: str  # full fine-tuning, linear probe, VPT-shallow, ... (a vitx method adapter where there is one)
    source: str
    values: tuple[float, ...]  # in ORDER
    mean: str = ""  # the headline mean as printed, when the source prints one
    timm: tuple[str, ...] = ()  # timm names of the same start: the row is shown unasked for such a --from
    adapter: str = ""  # the vitx method adapter that runs the same method
    group_means: dict[str, float] = field(default_factory=dict)  # as printed, when printed
    setup: dict[str, Any] = field(default_factory=dict)  # the settings behind the row, where known (see above)
    setup_source: str = ""  # the files and lines `setup` comes from
    beyond: str = ""  # what of the setup vitx has no setting for

    def per_task(self) -> dict[str, float]:
        return {f"vtab/{t}": v / 100 for t, v in zip(ORDER, self.values)}


ROWS = [
    Published("vit-h14-jft", "ViT-H/14, JFT-300M", "full fine-tuning (lr 0.01, 2500 steps, 384px)", VIT_PAPER,
              (85.5, 95.3, 75.2, 99.7, 97.2, 88.9, 65.0, 83.3, 96.7, 91.4, 76.6, 91.7, 63.8, 53.1, 84.5, 79.4, 63.3,
               33.2, 51.2), mean="77.63 ± 0.23", adapter="finetune"),
    Published("vit-l16-jft", "ViT-L/16, JFT-300M", "full fine-tuning (lr 0.01, 2500 steps, 384px)", VIT_PAPER,
              (81.9, 95.4, 74.3, 99.7, 96.7, 87.4, 63.5, 83.6, 96.5, 89.7, 77.1, 86.4, 63.1, 49.7, 82.2, 74.5, 60.5,
               36.2, 51.1), mean="76.28 ± 0.46", adapter="finetune"),
    Published("vit-l16-i21k", "ViT-L/16, ImageNet-21k", "full fine-tuning (lr 0.01, 2500 steps, 384px)", VIT_PAPER,
              (84.1, 90.8, 74.1, 99.3, 92.7, 80.9, 61.0, 82.5, 95.6, 85.2, 75.3, 70.3, 56.1, 41.9, 79.9, 74.7, 64.9,
               30.5, 41.7), mean="72.72 ± 0.21", timm=("vit_large_patch16_224.orig_in21k",), adapter="finetune"),
    Published("vit-b16-i21k-full", "ViT-B/16, ImageNet-21k", "full fine-tuning (224px, PEFT protocol)", VPT,
              (68.9, 87.7, 64.3, 97.2, 86.9, 87.4, 38.8, 79.7, 95.7, 84.2, 73.9, 56.3, 58.6, 41.7, 65.5, 57.5, 46.7,
               25.7, 29.1), mean="68.96 (mean of the group means)", timm=B16_I21K, adapter="finetune",
              group_means={"natural": 75.88, "specialized": 83.36, "structured": 47.64}),
    Published("vit-b16-i21k-linear", "ViT-B/16, ImageNet-21k", "linear probe (224px)", VPT,
              (63.4, 85.0, 63.2, 97.0, 86.3, 36.6, 51.0, 78.5, 87.5, 68.6, 74.0, 34.3, 30.6, 33.2, 55.4, 12.5, 20.0,
               9.6, 19.2), mean="57.64 (mean of the group means)", timm=B16_I21K, adapter="linear-probe"),
    Published("vit-b16-i21k-vpt-shallow", "ViT-B/16, ImageNet-21k", "VPT-shallow (224px)", VPT,
              (77.7, 86.9, 62.6, 97.5, 87.3, 74.5, 51.2, 78.2, 92.0, 75.6, 72.9, 50.5, 58.6, 40.5, 67.1, 68.7, 36.1,
               20.2, 34.1), timm=B16_I21K, setup={**VPT_RUNS, "vpt.deep": False, "vpt.dropout": 0.1},
              setup_source=VPT_SOURCE, beyond=VPT_BEYOND.format(", and the prompt length (1-200)")),
    Published("vit-b16-i21k-vpt-deep", "ViT-B/16, ImageNet-21k", "VPT-deep (224px)", VPT,
              (78.8, 90.8, 65.8, 98.0, 88.3, 78.1, 49.6, 81.8, 96.1, 83.4, 68.4, 68.5, 60.0, 46.5, 72.8, 73.6, 47.9,
               32.9, 37.8), mean="71.96 (mean of the group means)", timm=B16_I21K,
              group_means={"natural": 78.48, "specialized": 82.43, "structured": 54.98},
              setup={**VPT_RUNS, "vpt.deep": True, "vpt.dropout": 0.1}, setup_source=VPT_SOURCE,
              beyond=VPT_BEYOND.format(", and the prompt length (1-200)")),
    Published("vit-b16-i21k-bitfit", "ViT-B/16, ImageNet-21k", "BitFit (224px)", VPT,
              (72.8, 87.0, 59.2, 97.5, 85.3, 59.9, 51.4, 78.7, 91.6, 72.9, 69.8, 61.5, 55.6, 32.4, 55.9, 66.6, 40.0,
               15.7, 25.1), mean="65.21 (mean of the group means)", timm=B16_I21K,
              setup={**VPT_RUNS, "method": "bitfit"}, setup_source=VPT_SOURCE + ", src/models/vit_models.py:93-96",
              beyond=VPT_BEYOND.format("")),
    Published("vit-b16-i21k-lora", "ViT-B/16, ImageNet-21k", "LoRA-8 on qkv, 0.29M (224px, PEFT protocol)", NOAH,
              (67.1, 91.4, 69.4, 98.8, 90.4, 85.3, 54.0, 84.9, 95.3, 84.4, 73.6, 82.9, 69.2, 49.8, 78.5, 75.7, 47.1,
               31.0, 44.0), mean="74.60 (mean of the group means)", timm=B16_I21K, adapter="lora",
              setup=NOAH_LORA, setup_source=NOAH_LORA_SOURCE, beyond=NOAH_BEYOND),
]
PUBLISHED = {row.name: row for row in ROWS}


def published(name: str) -> Published:
    if name not in PUBLISHED:
        raise VitxError(f"no published VTAB-1k row '{name}'; known: {', '.join(PUBLISHED)}")
    return PUBLISHED[name]


def matching(start: str, method: str) -> list[Published]:
    """The published rows of the same start and method as a run (`--from timm:vit_base_patch16_224.orig_in21k`
    with full fine-tuning → vit-b16-i21k-full); none for other starts."""
    name = start.removeprefix("timm:").split("(")[0].strip()
    return [row for row in ROWS if name in row.timm and row.adapter == method]


def differences(row: Published, settings: Any, method: Any) -> list[str]:
    """Where a run's settings (a TransferConfig) and method (its method adapter) differ from the setup behind
    `row`, as "lr 0.01 (row: 0.001)"; [] where they match it (as far as vitx's settings reach: `row.beyond`)."""
    out: list[str] = []
    options = getattr(method, "options", {})
    for key, value in row.setup.items():
        name, _, option = key.rpartition(".")
        if name:  # a method option: compared when the run's method is the row's
            if method.name == name and options.get(option) != value:
                out.append(f"{method.name} {option} {_shown(options.get(option))} (row: {_shown(value)})")
            continue
        if key == "method":
            continue
        if key == "epochs":
            # (a swept run trains each point its own steps: the sweep is said instead)
            if not settings.sweep and settings.steps != max(1, round(value * settings.shots / settings.batch_size)):
                out.append(f"epochs {settings.steps * settings.batch_size / settings.shots:.3g} (row: {value})")
            continue
        if key == "lr" and settings.sweep:
            continue  # chosen by the sweep
        if getattr(settings, key) != value:
            out.append(f"{key} {_shown(getattr(settings, key))} (row: {_shown(value)})")
    wanted = row.setup.get("method") or next((k.partition(".")[0] for k in row.setup if "." in k), None)
    if wanted and method.name != wanted:
        out.insert(0, f"method {method.name} (row: {wanted})")
    return out


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


__all__ = ["ORDER", "PUBLISHED", "Published", "differences", "matching", "published"]

"""Transfer configuration as data: the paper's VTAB-1k protocol by default."""
from __future__ import annotations

from dataclasses import Field, asdict, dataclass
from typing import Any

from ..errors import VitxError
from ..settings import CHECKPOINTS, DATA, EVALUATION, MODEL, PROTOCOL, SCHEDULE, SYSTEM
from ..settings import check, declared, defaults, flag_of, result_settings as declared_result_settings, setting
from ..settings import with_default
from ..settings.groups import Augmentation, Columns, Input, Optimisation, Output, Seeded, Start, Streaming, System
from ..settings.groups import LIMITS, TestDraw

SELECT = ("auto", "suite", "task")  # auto: suite for more than one task (protocol.py)

# --protocol: presets of settings, filled in where the command line, --set and the recipe leave a setting unset.
# vtab: the ViT paper's (the config's own defaults). peft: what the parameter-efficient transfer papers on
# VTAB-1k share, after NOAH (Zhang et al. 2022, github.com/ZhangYuanhan-AI/NOAH, configs/VTAB) and followed by
# SSF, FacT, SPT and SNELL: AdamW, lr 1e-3, weight decay 1e-4, batch 64, 100 epochs of the 1000 training images
# (steps = 100 · shots / batch) with 10 of warm-up, cosine decay, no gradient clipping, no augmentation or
# smoothing, images resized whole; one point (no sweep), trained on train800val200 and tested. Over it, the
# method's own reference settings where its adapter declares them (`reference`, with `reference_source`: LoRA's
# drop-path 0.1 as NOAH's LoRA script keeps it, SSF's lr and weight decay as most of SSF's scripts run them).
PROTOCOLS: dict[str, dict[str, Any]] = {
    "vtab": {},
    "peft": {"optimizer": "adamw", "lr": 1e-3, "weight_decay": 1e-4, "batch_size": 64, "warmup": 0.1,
             "grad_clip": 0.0, "sweep": False, "augment": False, "label_smoothing": 0.0, "epochs": 100},
}
WITH_METHOD_REFERENCE = ("peft",)  # presets over which the method's `reference` settings apply


def protocol_preset(chosen: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The chosen --protocol's preset (under peft with the method adapter's `reference` settings over it), and
    for each of its settings where the value comes from."""
    protocol = chosen.get("protocol", "vtab")
    preset = dict(PROTOCOLS.get(protocol, {}))
    origin = dict.fromkeys(preset, f"the {protocol} preset")
    if protocol in WITH_METHOD_REFERENCE:
        from ..adapters import resolve_adapters  # torch: only under a preset that reads the method

        method = resolve_adapters(chosen.get("adapters") or [])[-1]
        reference = dict(method.reference)
        preset.update(reference)
        source = method.reference_source or "its adapter"
        origin.update(dict.fromkeys(reference, f"{method.name}'s reference, {source}"))
    return preset, origin


def with_protocol(chosen: dict[str, Any]) -> dict[str, Any]:
    """The explicitly chosen settings completed by their --protocol's preset (explicit ones win); the preset's
    `epochs` become --steps for the chosen shots and batch."""
    preset, _ = protocol_preset(chosen)
    epochs = preset.pop("epochs", None)
    out = {**preset, **chosen}
    if epochs is not None and "steps" not in chosen:
        shots = out.get("shots", TransferConfig.shots)
        out["steps"] = max(1, round(epochs * shots / out["batch_size"]))
    return out


def protocol_origins(cfg: "TransferConfig") -> dict[str, dict[str, Any]]:
    """Each setting that has the value its --protocol preset (or the method's reference) gives it, with where that
    value comes from: `{"lr": {"value": 0.001, "from": "lora's reference, NOAH configs/..."}}`, for the header
    and result.json. Empty under vtab (the config's own defaults)."""
    preset, origin = protocol_preset({"protocol": cfg.protocol, "adapters": cfg.adapters})
    epochs = preset.pop("epochs", None)
    said = {k: {"value": v, "from": origin[k]} for k, v in preset.items() if getattr(cfg, k, None) == v}
    if epochs is not None and not cfg.sweep and cfg.steps == max(1, round(epochs * cfg.shots / cfg.batch_size)):
        said["steps"] = {"value": cfg.steps, "from": origin["epochs"], "epochs": epochs}
    return said


def describe_origins(origins: dict[str, dict[str, Any]]) -> str:
    """`protocol_origins` in one line, grouped by source: "lr 0.001, drop_path 0.1 from lora's reference, ...;
    optimizer adamw, ... from the peft preset"."""
    groups: dict[str, list[str]] = {}
    for key, o in origins.items():
        shown = f"{key} {_shown(o['value'])}" + (f" ({o['epochs']} epochs)" if "epochs" in o else "")
        groups.setdefault(o["from"], []).append(shown)
    return "; ".join(f"{', '.join(keys)} from {source}" for source, keys in groups.items())


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass
class TransferConfig(Seeded, Start, Columns, Input, Streaming, TestDraw, Augmentation, Optimisation, Output, System):
    """Defaults are the paper's fine-tuning recipe (Appendix B.1.1) and VTAB-1k protocol: SGD momentum 0.9, no
    weight decay, no augmentation, global-norm clip 1, cosine decay after a linear warm-up, batch 512; sweep lr × steps on
    train800 → val200, choose one point for the whole suite on the mean val200 (`select`), retrain it on all 1000,
    report test accuracy. Each field is one option of `vitx transfer` (vitx/settings/): the groups' (settings/groups.py) and its own below."""

    protocol: str = setting("vtab", "Preset of the settings not given: vtab (the ViT paper's VTAB-1k recipe, the defaults below) or peft (the parameter-efficient transfer papers': AdamW lr 1e-3, weight decay 1e-4, batch 64, 100 epochs, 10% warm-up, no sweep, with the method's own reference settings over them, e.g. lora's drop-path 0.1 as NOAH runs it; see transfer/config.PROTOCOLS). In Python: TransferConfig(**with_protocol(settings)).", PROTOCOL, choices=tuple(PROTOCOLS))
    features: str = setting("auto", "What the task head reads: auto (what the start's objective trains: the mean patch token after MPP or MAE, the \\[class] token otherwise), cls-token (the \\[class] token after the final norm) or patch-mean (the mean patch token: MAE's fine-tuning and linear probe).", MODEL, choices=("auto", "cls-token", "patch-mean"), renamed={"backbone": "cls-token"})
    adapters: list[str] = setting([], "Adapter with options, repeatable, e.g. linear-probe or 'resize-posemb(mode=\"bilinear\")' (see `vitx adapters`); unnamed roles take the defaults.", MODEL, flag="--adapter", repeat=True, shown="resize-posemb, zero-head, finetune")
    task: str = setting("vtab/dsprites_loc", "Task (see `vitx tasks`), several comma-separated, vtab/all, vtab/natural|specialized|structured, a pattern like 'vtab/dsprites_*', or your labelled data: an image folder, save_to_disk/parquet folder, hf:owner/name or WebDataset shards.", DATA, affects_result=False)
    shots: int = setting(1000, "Training images in all (not per class, as `vitx eval fewshot --shots` counts them): 4/5 train, 1/5 validation (VTAB-1k: 1000 = 800 + 200); from your data, a seeded, class-balanced draw.", PROTOCOL, above=0)
    sweep: bool = setting(True, "Sweep lr × steps on train → val and retrain the chosen point; --no-sweep: --lr and --steps (the paper's 0.01, 2500).", PROTOCOL)
    select: str = setting("auto", "How the swept point is chosen: suite (one lr × steps for every task, the best mean val top-1 over the suite: the ViT paper's VTAB protocol) or task (each task its own best: optimistic, not comparable with the paper).", PROTOCOL, choices=SELECT, shown="suite for several tasks")
    lrs: list[float] = setting([0.001, 0.003, 0.01, 0.03], "Sweep learning rates.", PROTOCOL, above=0, limit=LIMITS["lr"])
    sweep_steps: list[int] = setting([500, 2500], "Sweep step counts.", PROTOCOL, above=0, limit=LIMITS["steps"])
    lr: float = setting(0.01, "Learning rate with --no-sweep.", PROTOCOL, above=0, limit=LIMITS["lr"])
    steps: int = setting(2500, "Steps with --no-sweep.", PROTOCOL, above=0, limit=LIMITS["steps"])
    seeds: list[int] = setting([], "Repeat each task's final run with these seeds, e.g. 0,1,2: results are mean ± s.d. (the sweep and the data's draw use --seed).", PROTOCOL, min=0, shown="--seed alone", example="0,1,2", distinct=True)
    skip_missing: bool = setting(False, "In a suite, skip tasks whose data is unavailable.", PROTOCOL, affects_result=False)
    allow_synthetic: bool = setting(False, "Count VTAB tasks read from vitx's synthetic regeneration (the embedded dSprites) in group and suite means; by default they are listed but left out.", PROTOCOL)
    augment: bool = setting(False, "Augment training images: a random resized crop (--crop-scale), --hflip and --randaugment; off: the VTAB-1k protocol's resize alone.", DATA)
    crop_scale: float = with_default(Augmentation, "crop_scale", 0.08)
    mixup: float = setting(0.0, "Mixup's Beta α on training batches (timm's Mixup; MAE fine-tuning: 0.8); 0: off.", DATA, min=0)
    cutmix: float = setting(0.0, "CutMix's Beta α (MAE fine-tuning: 1.0); 0: off.", DATA, min=0)
    label_smoothing: float = setting(0.0, "Label smoothing of the cross-entropy (MAE fine-tuning: 0.1).", DATA, min=0, below=1)
    optimizer: str = with_default(Optimisation, "optimizer", "sgd")
    weight_decay: float = with_default(Optimisation, "weight_decay", 0.0)
    batch_size: int = with_default(Optimisation, "batch_size", 512)
    warmup: float = setting(0.1, "Warm-up, as a fraction of each run's steps.", SCHEDULE, min=0, below=1, says="is a fraction of the steps in [0, 1)")
    compare: list[str] = setting([], "Print published VTAB-1k results beside the run's, e.g. vit-b16-i21k-full,vit-l16-i21k (vitx/tasks/published.py); a timm start with published rows for the same method gets them unasked.", EVALUATION, shown="none", affects_result=False)
    output_dir: str = setting("runs/transfer", "Results, per-task runs and the final models.", CHECKPOINTS, affects_result=False)
    save_every: int = setting(500, "Checkpoint each run every N steps (for --resume).", CHECKPOINTS, above=0, affects_result=False)
    log_every: int = with_default(Output, "log_every", 25)
    log_with: str = with_default(Output, "log_with", "none")
    # How the suite's work items (each sweep point, each seed's final run) are spread over processes: none of
    # these changes a number (transfer/items.py, schedule.py, jobs.py)
    shard: str = setting("", "Run shard I of N of the suite's work items (I from 0), e.g. --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT: N processes, started anywhere with one shared --output-dir, run one suite; the last to finish writes the summary.", SYSTEM, shown="all items", example="0/4", affects_result=False)
    jobs: int = setting(1, "Run K work items at once on this machine, each in its own process (one per visible GPU in turn; on a CPU each gets its share of the cores as threads), logs in <output>/logs/<host>-<pid>-<id>/job<i>.log.", SYSTEM, above=0, limit=1024, affects_result=False)
    wait: bool = setting(False, "When final runs need a selection whose sweep points other processes are still running, or items of this process's share are leased from another machine, wait for them (polling the disk; a lease whose heartbeat stops is taken over) instead of exiting with status 4.", SYSTEM, affects_result=False)
    dry_run: bool = setting(False, "Print the work list (items, steps, image size, shards) and an estimate of its cost from a few measured steps on this machine; train nothing.", SYSTEM, affects_result=False)

    def validate(self) -> "TransferConfig":
        check(self)  # every bound and choice, as declared, and the groups' rules (settings/groups.py)
        parse_shard(self.shard)
        if not self.lrs:
            raise VitxError("--lrs is empty: give at least one learning rate to sweep, e.g. --lrs 0.01,0.03")
        if not self.sweep_steps:
            raise VitxError("--sweep-steps is empty: give at least one step count, e.g. --sweep-steps 500,2500")
        if self.randaugment and not self.augment:
            raise VitxError("--randaugment acts on augmented training images: add --augment")
        if self.threads and self.jobs > 1:
            raise VitxError(f"--threads {self.threads} with --jobs {self.jobs}: each job computes with its share of "
                            "the cores (set for it by --jobs); drop --threads")
        refuse_ignored(self)
        from ..tasks.published import published

        for name in self.compare:
            published(name)
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def points(self) -> list[tuple[float, int]]:
        """The (lr, steps) grid to sweep, or the single fixed point."""
        if not self.sweep:
            return [(self.lr, self.steps)]
        return [(lr, steps) for steps in self.sweep_steps for lr in self.lrs]


MAX_SHARDS = 10_000  # --shard's N: a job array this wide leaves all but a few hundred shards without an item


def parse_shard(text: str) -> tuple[int, int]:
    """`--shard I/N` as (I, N), 0 ≤ I < N; "" (no --shard) is (0, 1): every item."""
    if not text:
        return 0, 1
    index, _, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        i, n = -1, 0
    if not 0 <= i < n:
        raise VitxError(f"--shard takes I/N with 0 ≤ I < N (I counts from 0), e.g. --shard 0/4; got '{text}'")
    if n > MAX_SHARDS:  # (the work list is split by a pass over every shard per item)
        raise VitxError(f"--shard: N {n:,} is too large: at most {MAX_SHARDS:,}, far above a suite's work items "
                        f"(a typo?); got '{text[:60]}'")
    return i, n


def refuse_ignored(cfg: TransferConfig) -> None:
    """The one check that the chosen method reads every setting given: one the method never reads (its adapter
    declares them, `Adapter.ignores`) with a value other than its default (the --protocol preset's, where it has
    one) is refused in one line, rather than recorded in result.json as if it had been used."""
    from ..adapters import resolve_adapters  # torch: only when a transfer is checked

    method = resolve_adapters(cfg.adapters)[-1]
    usual = {**defaults(TransferConfig), **with_protocol({"protocol": cfg.protocol, "shots": cfg.shots,
                                                         "adapters": cfg.adapters}),
             "protocol": TransferConfig.protocol}  # the preset itself is a setting given
    fields = {f.name: f for f in declared(TransferConfig)}
    given = [fields[name] for name in method.ignores if name in fields and getattr(cfg, name) != usual[name]]
    if given:
        shown = ", ".join(_as_given(f, getattr(cfg, f.name)) for f in given)
        raise VitxError(f"--adapter {method.name} {method.ignores_because}: {shown} would have no effect; leave "
                        f"{'it' if len(given) == 1 else 'them'} out")


def _as_given(field: Field, value: Any) -> str:
    """A setting as the command line gives it: `--mixup 0.8`, `--no-hflip`, `--lrs 0.01,0.1`."""
    flag = flag_of(field)
    if isinstance(value, bool):
        return flag if value else "--no-" + flag[2:]
    return f"{flag} {','.join(map(str, value)) if isinstance(value, list) else value}"


# Settings that change a task's result (declared so): a resumed transfer must have the same ones.
RESULT_KEYS = tuple(declared_result_settings(TransferConfig))


def result_settings(cfg: TransferConfig) -> dict[str, Any]:
    return {k: getattr(cfg, k) for k in RESULT_KEYS}

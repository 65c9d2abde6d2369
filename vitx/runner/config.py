"""Run configuration as data: one dataclass, saved in config.json, compared on --resume."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from ..errors import VitxError
from ..evaluation import AUTO, FEATURE_CHOICES
from ..settings import CHECKPOINTS, DATA, EVALUATION, MODEL, OPTIMISATION, OUTPUT, SCHEDULE, check, setting
from ..settings import check_field, current_keys, declared, defaults, flags, result_settings, with_default
from ..settings.groups import LIMITS, LOG_FORMATS, OPTIMIZERS, PRECISIONS
from ..settings.groups import (SCRATCH, Augmentation, Columns, Normalisation, Optimisation, Output, Seeded, Start,
                               Streaming, System)
from .threads import core_share
from .preemption import parse_signals

BETAS = (0.9, 0.999)  # Adam(W)'s β1, β2: the ViT paper's and DINO's (torch's defaults); MAE's are (0.9, 0.95)
# How the warm-up begins (optim.lr_factor): from 0 as MAE's lr_sched and big_vision (lr · s / W), DINO's
# np.linspace(0, lr, W), or at lr / W as lightly's cosine_warmup_schedule (lr · (s + 1) / W)
WARMUP_STARTS = ("zero", "linspace", "first-step")
CLIPS = ("global", "per-parameter")  # one norm over every gradient (torch, timm, the ViT paper), or DINO's

CHOICES = {
    "optimizer": OPTIMIZERS,
    "schedule": ("cosine", "linear"),
    "warmup_start": WARMUP_STARTS,
    "grad_clip_mode": CLIPS,
    "precision": PRECISIONS,
    "monitor_features": FEATURE_CHOICES,  # with the features' former names (FORMER_FEATURES), which still work
    "log_format": LOG_FORMATS,
}


def check_probes(names: list[str]) -> None:
    """Every --monitor-probes name is a registered evaluator (one line naming close ones, else)."""
    from ..errors import UnknownNameError
    from ..registry import EVALUATORS

    for name in names:
        try:
            EVALUATORS.get(name)
        except UnknownNameError as exc:
            raise UnknownNameError(f"--monitor-probes: {exc}") from None


def default_workers() -> int:
    """Loader workers per process: the cores this process may use (its CPU affinity, CPU quota or SLURM CPUs per
    task: threads.py), shared among the machine's local processes, less one for the process itself; at least 1. A GPU
    step needs few host cycles, so decoding gets nearly all of them; training on the CPU keeps the cores for
    compute (at most 4 workers). `--workers` overrides."""
    spare = max(1, core_share() - 1)
    import torch  # here, not at import: the CLI reads this module to print --help

    return spare if torch.cuda.is_available() else min(4, spare)


@dataclass
class PretrainConfig(Seeded, Start, Columns, Normalisation, Streaming, Augmentation, Optimisation, Output, System):
    """Defaults run the embedded CPU demo (vit-nano/4, 16px shapes, 1,200 steps: ~2 minutes on 2 cores; 35.4%
    validation top-1 against 10% chance, measured). The paper's B/16 settings are in recipes/. Each field is one option of
    `vitx pretrain` (vitx/settings/); the settings other commands share are the groups' (settings/groups.py),
    the fields below are pre-training's own."""

    objective: str = setting("supervised", "Objective, with options: 'supervised(label_smoothing=0.1)' (see `vitx objectives`). The run settings its reference fixes (DINO's clipping, weight decay and lr rule, say) become the defaults of those not given, named in the run's header (docs/recipes.md).", MODEL)
    start: str = with_default(Start, "start", SCRATCH)  # --from, formerly --init (a new --model unless given)
    model: str = with_default(Start, "model", "vit-nano/4")
    grad_checkpointing: bool = setting(False, "Trade compute for memory.", MODEL)
    data: str = setting("embedded:shapes", "embedded:leaves|shapes|digits; an image folder (class subfolders, or metadata.csv); a save_to_disk, parquet or VTAB-1k release folder; hf:owner/name; or WebDataset shards ('shards/train-{0000..0099}.tar', a folder of .tar, URLs).", DATA)
    shuffle_buffer: int = setting(5000, "Streams: shuffle through a seeded buffer of this many encoded images per process; 0: read in order.", DATA, min=0, limit=LIMITS["shuffle_buffer"])
    skip_corrupt: bool = setting(False, "Skip (and count) undecodable images instead of stopping.", DATA)
    lr: float = setting(2e-3, "Peak learning rate, or give --blr; where neither is given, an objective whose reference scales its rate by the batch takes that rule (--blr: dino 5e-4, mae 1.5e-4).", OPTIMISATION, above=0, limit=LIMITS["lr"])
    blr: float | None = setting(None, "Base learning rate per 256 images: lr = blr × --batch-size / 256, the linear scaling rule DINO (main_dino.py) and MAE (main_pretrain.py) state their rates in; the run's header and config.json give the lr it makes. Give --lr or --blr, not both.", OPTIMISATION, above=0, limit=LIMITS["lr"], shown="the objective's: dino 5e-4, mae 1.5e-4; else --lr")
    betas: list[float] = setting(list(BETAS), "Adam(W)'s β1, β2.", OPTIMISATION, min=0, below=1, length=2, shown="the objective's: mae 0.9,0.95; else 0.9,0.999 (the ViT paper's, DINO's)", example="0.9,0.999")
    grad_clip_mode: str = setting("global", "How --grad-clip clips: global (the norm of every gradient together, as torch, timm and the ViT paper clip) or per-parameter (each parameter's gradient norm to --grad-clip separately, DINO's utils.clip_gradients). The logged grad_norm is the global norm before clipping either way.", OPTIMISATION, choices=CHOICES["grad_clip_mode"], shown="the objective's: per-parameter for dino, else global")
    decay_tokens: bool = setting(False, "Weight-decay the position embeddings and the \\[class] and register tokens too, as DINO's get_params_groups and MAE's add_weight_decay do (they exempt only biases and 1-D parameters); off: exempt them as well, as timm and big_vision do. Biases and norms are never decayed.", OPTIMISATION, shown="the objective's: on for dino and mae, else off")
    max_nonfinite_steps: int = setting(10, "Steps with a non-finite loss or gradient are skipped; stop after this many in a row.", OPTIMISATION, above=0, affects_result=False)
    steps: int = setting(1200, "Optimiser steps.", SCHEDULE, above=0, limit=LIMITS["steps"])
    warmup_steps: int = setting(100, "Linear warm-up steps (DINO warms up for 10 epochs, MAE for 40: set the steps of those epochs).", SCHEDULE, min=0, limit=LIMITS["steps"])
    warmup_start: str = setting("zero", "Where the linear warm-up starts: zero (update s at lr · s / W, as big_vision, MAE's lr_sched and SimCLR's code warm up), linspace (DINO's np.linspace(0, lr, W): lr reached at the last warm-up step) or first-step (lr · (s + 1) / W: the first update at lr / W, as lightly's cosine_warmup_schedule; vitx's before this setting).", SCHEDULE, choices=CHOICES["warmup_start"], shown="the objective's: linspace for dino, else zero")
    schedule: str = setting("cosine", "Decay after warm-up: cosine or linear (the ViT paper's supervised pre-training decays linearly: recipes/paper/pretrain-supervised-b16.toml).", SCHEDULE, choices=CHOICES["schedule"])
    min_lr: float = setting(0.0, "The learning rate the decay ends at.", SCHEDULE, min=0, shown="the objective's: dino 1e-6 (main_dino.py), else 0 (MAE's)")
    eval_samples: int = setting(1024, "Validation images evaluated at each checkpoint; 0 disables.", EVALUATION, min=0, limit=LIMITS["eval_samples"], affects_result=False)
    monitor: str = setting("", "Labelled data, one or several comma-separated (e.g. embedded:digits,embedded:shapes): log few-shot linear and kNN accuracy of the features at each checkpoint.", EVALUATION, affects_result=False)
    monitor_every: int = setting(0, "Also run the --monitor every N steps; 0: at checkpoints only.", EVALUATION, min=0, affects_result=False)
    monitor_probes: list[str] = setting(["fewshot", "knn"], "What the --monitor runs: evaluators by name (`vitx eval --help` lists them): fewshot (closed-form 1- and 10-shot heads), knn (weighted 20-NN, DINO's), linear (a linear probe, lr chosen on a held-out fifth: `vitx eval linear`'s, 30 epochs), rankme (label-free: the features' effective rank and spread, which fall when a representation collapses), or a plugin's.", EVALUATION, affects_result=False)
    monitor_features: str = setting(AUTO, "Which features the --monitor's probes read: auto (those the run's objective trains), pre-logits, cls-token or patch-mean, as `vitx eval fewshot --features` describes them.", EVALUATION, choices=CHOICES["monitor_features"], affects_result=False)
    watch_every: int = setting(100, "Collapse watch, without labels: the effective rank (RankMe) and spread of the features of 256 training images (a seeded draw), at step 0 and every N steps, with --monitor's accuracy against chance, and the objective's own head figures (DINO's teacher entropy) at each log step. A representation collapse is said once as a warning; a head finding (its output uniform or one-hot) as a note, and as a collapse only when the features stall with it (docs/collapse.md). 0, or more than --steps: off.", EVALUATION, min=0, affects_result=False)
    stop_on_collapse: bool = setting(False, "When the watch says a collapse (never for a head note alone): checkpoint and stop (exit 3) instead of training on. Needs the watch on (--watch-every N, at most --steps).", EVALUATION, affects_result=False)
    output_dir: str = setting("runs/pretrain", "Run directory.", CHECKPOINTS, affects_result=False)
    save_every: int = setting(400, "Checkpoint every N steps (and at the end).", CHECKPOINTS, above=0, affects_result=False)
    save_every_minutes: float = setting(0.0, "Also checkpoint when this many minutes have passed since the last save; 0: off.", CHECKPOINTS, min=0, affects_result=False)
    keep_checkpoints: int = setting(2, "How many checkpoints to keep.", CHECKPOINTS, above=0, affects_result=False)
    stop_signals: str = setting("TERM,USR1", "On these signals, checkpoint at the next step and exit 75 (a second one exits at once); '' to leave them alone.", CHECKPOINTS, affects_result=False)
    tracker_run: str = setting("", "The tracker's name for this run (a transfer names each point and groups them).", OUTPUT, cli=False, affects_result=False)
    tracker_group: str = setting("", "The tracker's group of runs.", OUTPUT, cli=False, affects_result=False)
    from_objective: list[str] = setting([], "The settings taken from the objective's reference recipe (`Objective.recipe`): those the user, a recipe file and --set left unset.", OPTIMISATION, cli=False, affects_result=False)

    def validate(self) -> "PretrainConfig":
        check(self)  # every bound and choice, as declared, and the groups' rules (settings/groups.py)
        parse_signals(self.stop_signals)
        check_probes(self.monitor_probes)
        if self.min_lr >= self.lr:
            raise VitxError(f"--min-lr {self.min_lr:g} must be below the peak lr {self.lr:g}")
        if self.stop_on_collapse and not 0 < self.watch_every <= self.steps:  # (evaluating.py's `watching`)
            why = "--watch-every 0 turns it off" if not self.watch_every else \
                f"--watch-every {self.watch_every} is longer than the run's {self.steps} steps"
            raise VitxError(f"--stop-on-collapse acts on the collapse watch, and nothing is watched: {why}; give "
                            "--watch-every N (at most --steps) or drop --stop-on-collapse")
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PretrainConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in recorded_now(data).items() if k in known})


def recorded_now(run: dict[str, Any]) -> dict[str, Any]:
    """A recorded run's settings (config.json's `run`) as they are named now: a setting recorded under its former
    name (`init`, now `start`) read as the current one, and an `init` of "" (a new --model) as scratch."""
    run = current_keys(PretrainConfig, run)
    return {**run, "start": SCRATCH} if run.get("start") == "" else run


# Settings added since runs were first recorded, as the runs made before them ran: a resumed old run goes on as it was
BEFORE_RECORDED = {"warmup_start": "first-step"}


def objective_recipe(explicit: dict[str, Any]) -> dict[str, Any]:
    """The run settings the objective's reference trains with (`Objective.recipe`) that `explicit` (the user's
    options, recipe file and --set) leaves unset; an explicit --lr also sets aside the reference's --blr."""
    from ..registry import OBJECTIVES  # (registering the plugins imports torch: not for --help)
    from ..spec import parse_spec

    name = parse_spec(explicit.get("objective", defaults(PretrainConfig)["objective"]))[0]
    declared = dict(getattr(OBJECTIVES.get(name).obj, "recipe", {}))
    unknown = sorted(set(declared) - set(defaults(PretrainConfig)))
    if unknown:
        raise VitxError(f"objective '{name}' declares run settings that `vitx pretrain` does not have: "
                        f"{', '.join(unknown)}")
    if "lr" in explicit:
        declared.pop("blr", None)
    return {k: v for k, v in declared.items() if k not in explicit}


def configured(explicit: dict[str, Any]) -> PretrainConfig:
    """A new run's config: `explicit` over the objective's reference recipe over vitx's defaults, validated, with
    the lr --blr makes (lr = blr × batch / 256)."""
    if "from_objective" in explicit:  # (vitx records it; a given value was dropped without a word)
        raise VitxError("from_objective is what vitx records of the objective's reference recipe, not a setting: "
                        "give the settings themselves (--set lr=..., a recipe's keys)")
    if "lr" in explicit and explicit.get("blr") is not None:
        raise VitxError(f"give --lr or --blr, not both (--lr {explicit['lr']:g}, --blr {explicit['blr']:g})")
    taken = objective_recipe(explicit)
    cfg = PretrainConfig(**{**taken, **explicit, "from_objective": sorted(taken)})
    if cfg.blr is not None:
        check_field(next(f for f in declared(PretrainConfig) if f.name == "blr"), cfg.blr)  # (its own words first)
        cfg.lr = cfg.blr * cfg.batch_size / 256
    return cfg.validate()


def micro_batch(cfg: PretrainConfig, processes: int) -> int:
    """Images in each process's micro-batch: --batch-size over the processes and the accumulation steps."""
    return cfg.batch_size // (processes * cfg.grad_accum)


def describe_optimisation(cfg: PretrainConfig) -> str:
    """The header's optimisation line: the optimiser, the effective lr and where it came from, the schedule, the
    weight decay and what it spares, the clip; and the settings the objective's reference recipe gave."""
    lr = f"lr {cfg.lr:.3g}" + (f" (blr {cfg.blr:g} × {cfg.batch_size} / 256)" if cfg.blr is not None else "")
    betas = f" β {cfg.betas[0]:g}, {cfg.betas[1]:g}" if cfg.optimizer in ("adam", "adamw") else ""
    warm = f"{cfg.warmup_steps} warm-up steps from {'lr/W' if cfg.warmup_start == 'first-step' else '0'}" \
        + (" (linspace)" if cfg.warmup_start == "linspace" else "")
    wd = f"{cfg.weight_decay:g}" + (f" → {cfg.weight_decay_end:g}" if cfg.weight_decay_end is not None else "")
    spared = "biases and 1-D" if cfg.decay_tokens else "biases, 1-D, position embeddings and tokens"
    clip = f"clip {cfg.grad_clip:g} {cfg.grad_clip_mode}" if cfg.grad_clip > 0 else "no clip"
    line = (f"optimisation: {cfg.optimizer}{betas}, {lr}, {warm}, {cfg.schedule} to {cfg.min_lr:g}; weight decay "
            f"{wd} (not on {spared}); {clip}")
    base = defaults(PretrainConfig)
    given = [k for k in cfg.from_objective if getattr(cfg, k) != base[k]]  # (those equal to vitx's go unsaid)
    if given:
        line += f" | from the objective's reference: {', '.join(given)} (docs/recipes.md)"
    return line


# Options that may differ between a run and its resumption without changing the result (declared `affects_result=False`).
RESUME_FREE = set(defaults(PretrainConfig)) - set(result_settings(PretrainConfig))


def _same(key: str, saved: Any, given: Any) -> bool:
    """Whether a resumed run's setting is given as it was: an --objective or --model spec by what it means (its
    name and options, an objective's with their declared defaults filled), not how it is spelt."""
    if saved == given or key not in ("objective", "model") or not (isinstance(saved, str) and isinstance(given, str)):
        return saved == given
    from ..registry import OBJECTIVES
    from ..spec import parse_spec

    try:
        (a, a_opts), (b, b_opts) = parse_spec(saved), parse_spec(given)
        if key == "objective" and a == b:
            cls = OBJECTIVES.get(a).obj
            a_opts, b_opts = cls.checked(a_opts) or a_opts, cls.checked(b_opts) or b_opts
    except VitxError:
        return False
    return (a, a_opts) == (b, b_opts)


def merge_for_resume(saved: PretrainConfig, explicit: dict[str, Any]) -> PretrainConfig:
    """The saved run's config, with the explicitly given options that may change; others must match."""
    named = flags(PretrainConfig)  # (a setting's option: start's is --from)
    explicit = {k: SCRATCH if k == "start" and v == "" else v for k, v in explicit.items()}  # (an old recipe's init = "")
    clash = [f"{named.get(k, '--' + k.replace('_', '-'))} {v!r} (run has {getattr(saved, k)!r})"
             for k, v in explicit.items() if k not in RESUME_FREE and not _same(k, getattr(saved, k), v)]
    if clash:
        raise VitxError("cannot resume with different settings: " + "; ".join(clash))
    return PretrainConfig.from_dict({**saved.to_dict(), **{k: v for k, v in explicit.items() if k in RESUME_FREE}})

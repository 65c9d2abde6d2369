"""Everything a run needs before its first step: the config to run (and the checkpoint to resume), the
backbone, data sources, objective, optimiser and schedule, prepared by Accelerate; and what config.json
records about it. The loop (`loop.py`) takes a `Setup` and runs it."""
from __future__ import annotations

import pickle
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType
from safetensors import SafetensorError

from .. import __version__
from ..backbones import backbone_record, create_backbone
from ..backbones import droppath
from ..safe_io import read_config
from ..data import DataOptions, Preprocess, open_data
from ..data.columns import require_labels
from ..errors import VitxError
from ..invocation import command
from ..objectives import Fitted, Objective, create_objective, fit_to_data
from ..registry import OBJECTIVES
from ..settings.groups import SCRATCH, new_model
from ..spec import parse_spec
from .config import (BEFORE_RECORDED, PretrainConfig, configured, default_workers, merge_for_resume, micro_batch,
                     recorded_now)
from .ema import load_ema, make_ema
from .launch import configure_deepspeed, make_accelerator
from .optim import build_optimizer, build_schedule
from .threads import fit_threads, training_workers
from ..runs.ownership import PRETRAINING, check_output_dir
from ..runs.rundir import RunDir


@dataclass
class Setup:
    """Everything built for a run before its first step (shared by the CLI, the tests and the benchmark)."""

    cfg: PretrainConfig
    accelerator: Accelerator
    model: torch.nn.Module  # the prepared (possibly DDP-wrapped) objective
    objective: Objective  # the same objective, unwrapped
    optimizer: Any
    scheduler: Any
    preprocess: Preprocess
    run: RunDir
    start_step: int
    data_info: dict[str, Any]
    train_source: Any  # an ImageSource, or a TensorSplit held in memory
    val_source: Any
    record: dict[str, Any] = field(default_factory=dict)  # extra config.json content
    resumed_from: Path | None = None  # the checkpoint loaded (None: a fresh run)
    ema: torch.nn.Module | None = None  # --ema-decay: timm's ModelEmaV3 of the objective (runner/ema.py)


def resolve_config(explicit: dict[str, Any], resume: bool) -> tuple[PretrainConfig, Path | None]:
    """The config to run and the checkpoint to resume from (None: start fresh).

    --lr may change on resume (lowering it is how a diverged run is rescued): the schedule goes on with the new
    peak, and config.json lists the change (`lr_changes`). Other settings that change the result must match."""
    if not new_model(explicit.get("start", SCRATCH)) and "model" in explicit:
        raise VitxError("give --model (a new backbone) or --from (weights to start from), not both")
    cfg = configured(explicit)  # explicit over the objective's reference recipe (Objective.recipe)
    run = RunDir(cfg.output_dir)
    # a folder of the user's files is never written over, nor a transfer's (a sweep point or final run resumed
    # as a pre-training would take its weights over): refused whether or not it holds a checkpoint
    check_output_dir(run.path, writes=PRETRAINING)
    latest = run.latest()
    if latest is None:
        run.check_writable()
        if (run.path / "model.safetensors").is_file():  # a run that saved weights, its checkpoints gone or damaged
            raise VitxError(f"{cfg.output_dir} holds a run's weights (model.safetensors) but no complete checkpoint "
                            f"to {'resume' if resume else 'continue'} from (checkpoints/ missing or damaged); a new "
                            "run would replace them: choose another --output-dir, or move the folder aside")
        return cfg, None
    if not resume:
        raise VitxError(f"{cfg.output_dir} already holds a run (last checkpoint {latest.name}); "
                        "pass --resume to continue it, or choose another --output-dir")
    reached = RunDir.step_of(latest)  # (checked: a damaged trainer_state.json is one line)
    saved = saved_settings(latest)
    merged = merge_for_resume(saved, {k: v for k, v in explicit.items() if k != "lr"})
    merged.lr = explicit.get("lr", saved.lr)
    merged.validate()
    if reached < merged.steps:
        run.check_writable()  # (a finished run is only read: it may sit on a read-only disk)
    return merged, latest


def saved_settings(checkpoint: Path) -> PretrainConfig:
    """The settings a checkpoint's config.json records (`run`), each type-checked as its flag is (the bounds:
    by the merged config's validate): the file may be damaged or edited, and a resume trusts nothing it reads."""
    from ..recipe import field_types, optional_of, typed

    config = read_config(checkpoint)
    run = config.get("run") if isinstance(config, dict) else None
    where = f"{checkpoint}/config.json"
    if not isinstance(run, dict):
        raise VitxError(f"{where} has no run record (damaged?); delete that checkpoint to resume from the one "
                        "before it")
    run = recorded_now(run)  # (a run recorded before a rename: init is start)
    kinds = field_types(PretrainConfig)
    unset = {k: None for k, v in run.items() if k in kinds and v is None and optional_of(kinds[k]) is not None}
    checked = dict(typed(PretrainConfig, k, v, f"{where} run") for k, v in run.items() if k in kinds and k not in unset)
    older = {k: v for k, v in BEFORE_RECORDED.items() if k not in run}  # a run from before a setting existed
    return PretrainConfig(**older, **checked, **unset)


def assemble(cfg: PretrainConfig, accelerator: Accelerator, objective: Objective, preprocess: Preprocess,
             train_source: Any, val_source: Any, data_info: dict[str, Any],
             resume_from: Path | None = None, record: dict[str, Any] | None = None) -> Setup:
    """Optimiser, schedule and Accelerate preparation for a built objective (pre-training and transfer alike).

    Only parameters that require gradients are optimised (frozen backbones, adapters). `record` is extra
    config.json content (e.g. how a transfer run was set up).
    """
    teacher = objective.teacher_backbone()
    if teacher is not None and accelerator.distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED):
        raise VitxError(f"{cfg.objective} keeps a whole teacher beside the student on every process, which "
                        f"{accelerator.distributed_type.value} shards; use DDP (or one process) for it")
    if cfg.grad_clip_mode == "per-parameter" and accelerator.distributed_type in (DistributedType.FSDP,
                                                                                  DistributedType.DEEPSPEED):
        raise VitxError(f"--grad-clip-mode per-parameter reads each whole parameter's gradient, which "
                        f"{accelerator.distributed_type.value} shards; use DDP (or one process) for it")
    for number, view in enumerate(objective.views()):
        view.check(f"{cfg.objective}: view {number}")
    # torch's threads: this process's share of the granted cores, less the loader workers training will keep busy
    threads = fit_threads(training_workers(default_workers() if cfg.workers < 0 else cfg.workers, train_source,
                                           objective.views(), on_gpu=accelerator.device.type == "cuda"), cfg.threads)
    optimizer = build_optimizer(objective, cfg.optimizer, cfg.lr, cfg.weight_decay, accelerator.device,
                                cfg.layer_decay, cfg.decay_tokens, tuple(cfg.betas))
    scheduler = build_schedule(optimizer, cfg.steps, cfg.warmup_steps, cfg.schedule, cfg.warmup_start,
                               cfg.min_lr / cfg.lr)
    configure_deepspeed(accelerator, cfg)
    model, optimizer, scheduler = accelerator.prepare(objective, optimizer, scheduler)
    start = 0
    saved = read_config(resume_from) if resume_from is not None else None  # read now: pruning will remove it
    record = {**_commands(saved), **(record or {}), "threads": threads}
    if resume_from is not None:
        try:
            with warnings.catch_warnings():  # a foreign pickle's protocol: torch warns in two lines, then refuses
                warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
                accelerator.load_state(str(resume_from / "accelerate"))
        except (pickle.UnpicklingError, SafetensorError, OSError, EOFError, RuntimeError, ValueError, KeyError):
            # torch.load stays weights_only: a damaged or foreign file is refused, never run
            raise VitxError(f"the training state in {resume_from} is damaged or incomplete; delete that checkpoint "
                            "to resume from the one before it") from None
        start = RunDir.step_of(resume_from)
        changes = [c for c in saved.get("lr_changes", []) if isinstance(c, dict)]  # the run's, kept across resumes
        if saved.get("run", {}).get("lr") not in (None, cfg.lr):  # and this resume's
            changes.append({"step": start, "from": saved["run"]["lr"], "to": cfg.lr})
        if changes:
            set_lr(scheduler, cfg.lr)
            record["lr_changes"] = changes
    ema = make_ema(accelerator.unwrap_model(model), cfg.ema_decay, accelerator.distributed_type)
    if ema is not None and resume_from is not None:
        load_ema(ema, resume_from)
    seen = accelerator.gather(torch.tensor([start], device=accelerator.device))  # every process's resume step
    if bool((seen != seen[0]).any()):
        raise VitxError(f"the processes see different checkpoints in {cfg.output_dir} (resume steps "
                        f"{sorted(set(seen.tolist()))}): on several machines --output-dir must be on a filesystem "
                        "they all share")
    return Setup(cfg, accelerator, model, objective, optimizer, scheduler, preprocess, RunDir(cfg.output_dir),
                 start, data_info, train_source, val_source, record, resume_from, ema)


def set_lr(scheduler: Any, lr: float) -> None:
    """Give a loaded schedule a new peak lr: the resumed optimiser and schedule carry the old one."""
    inner = getattr(scheduler, "scheduler", scheduler)  # Accelerate's wrapper
    factor = inner.lr_lambdas[0](inner.last_epoch)
    scales = [group.get("lr_scale", 1.0) for group in inner.optimizer.param_groups]  # layer decay's factors
    inner.base_lrs = [lr * scale for scale in scales]
    inner._last_lr = [lr * scale * factor for scale in scales]
    for group, scale in zip(inner.optimizer.param_groups, scales):
        group["initial_lr"] = lr * scale
        if torch.is_tensor(group["lr"]):
            group["lr"].fill_(lr * scale * factor)
        else:
            group["lr"] = lr * scale * factor


def _initial(cfg: PretrainConfig, init: Any) -> tuple[Any, dict[str, tuple[float, ...]]]:
    """--from: the start's backbone (at --image-size, position embeddings interpolated) and the normalisation it
    expects (`init`: runs/continuation.py's Continuation); `cfg.model` becomes the start's architecture, so the
    run's record says what it trained."""
    backbone = init.fit(cfg.image_size)
    cfg.model = str(backbone.vitx_record["name"])
    return backbone, init.normal


def _normalisation(start: str, backbone: Any) -> dict[str, tuple[float, ...]]:
    """The mean and std a start's weights expect (runs/start.py reads them: timm's pretrained_cfg, a vitx run's
    recorded preprocessing)."""
    from ..runs.start import start_input

    given = start_input(start, backbone)
    return {"mean": tuple(given["mean"]), "std": tuple(given["std"])}


def _backbone(cfg: PretrainConfig, saved: dict[str, Any], resume_from: Path | None,
              init: Any = None) -> tuple[Any, Preprocess]:
    """The backbone (new, from --from, or as a resumed --from run's checkpoint records it) and the input it expects."""
    if init is not None:  # another run's, timm's or a released checkpoint's weights, continued here
        backbone, normal = _initial(cfg, init)
    elif not new_model(cfg.start):  # a resumed --from run: built as its checkpoint records it, normalised as it was
        backbone = create_backbone(saved["backbone"]["name"], **saved["backbone"]["overrides"])
        normal = {k: tuple(saved["preprocess"][k]) for k in ("mean", "std")}
    else:
        model_name, model_opts = parse_spec(cfg.model)
        if cfg.image_size is not None:
            model_opts["img_size"] = cfg.image_size
        backbone = create_backbone(model_name, **model_opts)
        pretrained = model_name.startswith("timm:") and model_opts.get("pretrained")  # weights with their own input
        normal = _normalisation(model_name, backbone) if pretrained else {}
    if cfg.grad_checkpointing:
        backbone.set_grad_checkpointing(True)
    droppath.configure(backbone, cfg.drop_path, cfg.drop_path_mode)  # (or a --model spec's drop_path_rate)
    preprocess = Preprocess(image_size=int(backbone.patch_embed.img_size[0]), crop_scale=cfg.crop_scale,
                            hflip=cfg.hflip, randaugment=cfg.randaugment, random_erasing=cfg.random_erasing,
                            **cfg.mean_std(normal))  # --mean/--std win
    return backbone, preprocess


def _data(cfg: PretrainConfig, saved: dict[str, Any], resume_from: Path | None, image_size: int,
          processes: int) -> tuple[Any, Any, dict[str, Any]]:
    """The training and validation sources (a resumed run holds out exactly what it held out) and what config.json
    records of them."""
    from ..data.draws import validation_split
    from ..data.streams import is_shards

    opened = open_data(cfg.data, DataOptions(label_key=cfg.label_key or None, image_key=cfg.image_key or None,
                                             stream=cfg.stream or is_shards(cfg.data), shuffle_buffer=cfg.shuffle_buffer,
                                             image_size=image_size, seed=cfg.seed))
    if getattr(opened.split("train"), "micro_batches", None) is None and len(opened.split("train")) == 0:
        raise VitxError(f"{cfg.data} has no training images")
    saved_data = saved.get("data", {})
    saved_val = saved_data.get("validation") or {}
    was_held = saved_val.get("split") == "held out of train"
    held = saved_val.get("requested", saved_val.get("images")) if was_held else None
    train_source, val_source, validation = validation_split(opened, cfg.eval_samples, cfg.seed, held,
                                                            hold_out=resume_from is None or was_held)
    data_info = {"spec": cfg.data, "layout": opened.layout, "labels": opened.labels_described(),
                 "num_classes": train_source.num_classes, "class_names": train_source.class_names,
                 "train_size": None if hasattr(train_source, "micro_batches") else len(train_source),
                 "validation": validation}
    if hasattr(train_source, "micro_batches"):  # a stream's order depends on how many processes read it
        data_info["processes"] = processes
        was = saved_data.get("processes")
        if was is not None and was != processes:
            raise VitxError(f"{cfg.output_dir} streams {cfg.data} on {was} process(es); resume it on {was} (each "
                            f"process reads its own shards, so {processes} would read other samples)")
    return train_source, val_source, data_info


def build(cfg: PretrainConfig, resume_from: Path | None = None) -> Setup:
    """Create the accelerator, data sources, backbone, objective, optimiser and schedule; load a checkpoint."""
    accelerator = make_accelerator(cfg)
    saved = read_config(resume_from) if resume_from is not None else {}
    init = None
    if not new_model(cfg.start) and resume_from is None:  # what --from continues, part by part
        from ..runs.continuation import open_init

        init = open_init(cfg.start, cfg.use_ema, cfg.seed)
    backbone, preprocess = _backbone(cfg, saved, resume_from, init)
    train_source, val_source, data_info = _data(cfg, saved, resume_from, preprocess.image_size,
                                                accelerator.num_processes)
    obj_name, obj_opts = parse_spec(cfg.objective)
    if getattr(OBJECTIVES.get(obj_name).obj, "needs_labels", False):
        require_labels(train_source, f"--objective {obj_name}")
    fewest = getattr(OBJECTIVES.get(obj_name).obj, "min_batch", 1)
    micro = micro_batch(cfg, accelerator.num_processes)
    if micro < fewest:
        raise VitxError(f"--objective {obj_name} needs at least {fewest} images in each process's micro-batch; "
                        f"--batch-size {cfg.batch_size} gives {micro} (over {accelerator.num_processes} process(es) × "
                        f"{cfg.grad_accum} accumulation step(s))")
    fitted = _fitted(obj_name, obj_opts, train_source, cfg.steps, saved if resume_from is not None else None)
    objective = create_objective(obj_name, backbone, train_source.num_classes, **obj_opts,
                                 **(fitted.values if fitted else {}))
    objective.fitted = fitted
    if init is not None:  # the objective's own parts where the --from source holds them (decoder, head, teacher)
        init.restore(objective, obj_name, getattr(train_source, "class_names", None))
    preprocess = objective.configure_preprocess(preprocess)
    setup = assemble(cfg, accelerator, objective, preprocess, train_source, val_source, data_info, resume_from,
                     started(saved))  # (a resumed --from run keeps its record)
    if init is not None:
        init.restore_ema(setup.ema, objective)
        setup.record["start"] = init.record()
    return setup


def started(saved: dict[str, Any]) -> dict[str, Any] | None:
    """A resumed run's record of where its weights started (config.json's `start`; `init` in runs recorded before
    --from was pre-training's name), kept in the config.json it writes next."""
    record = saved.get("start", saved.get("init"))
    return {"start": record} if isinstance(record, dict) else None


def _fitted(name: str, options: dict[str, Any], train_source: Any, steps: int,
            saved: dict[str, Any] | None) -> Fitted | None:
    """The options the objective chooses from the number of training images where the user left them unset
    (`Objective.fit_to_data`; none for a stream), or, resuming (`saved`: the checkpoint's config.json), those the
    run recorded: a resumed run is built as it was, and one recorded before fitting existed was fitted to nothing."""
    if saved is None:
        return fit_to_data(name, options, None if hasattr(train_source, "micro_batches") else len(train_source),
                           steps)
    record = (saved.get("objective") or {}).get("fitted")
    if record is None:
        return None
    if not (isinstance(record, dict) and isinstance(record.get("values"), dict) and isinstance(record.get("images"), int)
            and isinstance(record.get("rule"), str)):
        raise VitxError("the checkpoint's config.json has a damaged objective.fitted record (values, images, rule)")
    return Fitted(dict(record["values"]), record["images"], record["rule"])


def config_record(s: Setup, step: int) -> dict[str, Any]:
    obj_name, obj_opts = parse_spec(s.cfg.objective)
    fitted = getattr(s.objective, "fitted", None)
    if fitted is not None:  # the options it was built with, and which of them were chosen from the data, and why
        obj_opts = {**obj_opts, **fitted.values}
    return {
        "vitx_version": __version__,
        "step": step,
        "backbone": backbone_record(s.objective.backbone),
        "preprocess": s.preprocess.to_dict(),
        "objective": {"name": obj_name, "options": obj_opts, **({"fitted": fitted.record()} if fitted else {})},
        "features": s.objective.features,  # what the objective trains: evaluation reads it by default
        **({"views": [v.to_dict() for v in s.objective.views()]} if s.objective.views() else {}),
        "data": s.data_info,
        "run": s.cfg.to_dict(),
        **s.record,
    }


def _commands(saved: dict[str, Any] | None) -> dict[str, Any]:
    """How the run was made (`command`, when from the command line), kept across resumes from the resumed
    checkpoint's config (`saved`; None: a fresh run), and the `--resume` lines that continued it (`resumed_with`).
    A run made from Python has no `command` (`vitx export` rebuilds one from its settings)."""
    if saved is None:
        now = command(fresh=True)
        return {"command": now} if now else {}
    now = command()
    first = saved.get("command")
    resumed = [c for c in saved.get("resumed_with", []) if isinstance(c, str)]
    if now and now != first and now not in resumed:
        resumed.append(now)
    return {**({"command": first} if first else {}), **({"resumed_with": resumed} if resumed else {})}

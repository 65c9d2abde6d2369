"""The model card (README.md) of an export: what the model is, how to load it, how it was trained (objective,
data, steps, the command), what it measured (final metrics, transfer results) and its classes. Everything comes
from the run's own records: config.json, metrics.jsonl and, for a transfer, result.json."""
from __future__ import annotations

import html

from pathlib import Path
from typing import Any

from .. import __version__
from ..runs.start import describe_start
from ..runs.trained import TrainedRun
from .command import command_line

SHOWN_METRICS = ("loss", "top1", "val_loss", "val_top1", "colour_acc", "baseline_acc")
MAX_LABELS = 50


def _front_matter(classifier: bool) -> str:
    task = "image-classification" if classifier else "image-feature-extraction"
    return "\n".join(["---", "library_name: timm", f"pipeline_tag: {task}", "tags:", f"- {task}", "- timm",
                      "- vitx", "- vision-transformer", "---", ""])


def _architecture(config: dict[str, Any]) -> str:
    args = config["model_args"]
    size = "×".join(str(s) for s in config["pretrained_cfg"]["input_size"][1:])
    parts = [f"{k} {args[k]}" for k in ("depth", "embed_dim", "num_heads", "patch_size") if k in args]
    shape = f" ({', '.join(parts)})" if parts else ""
    return f"timm `{config['architecture']}`{shape} at {size}px"


def _preprocessing(config: dict[str, Any]) -> str:
    cfg = config["pretrained_cfg"]
    crop = "the whole image resized to a square" if cfg["crop_mode"] == "squash" else \
        f"centre crop of {cfg['crop_pct']:.0%} of the short side, resized"
    return f"{crop} ({cfg['interpolation']}); mean {tuple(cfg['mean'])}, std {tuple(cfg['std'])}"


def _training(run: TrainedRun) -> list[tuple[str, str]]:
    cfg, data = run.config.get("run", {}), run.config.get("data", {})
    images = f", {data['train_size']} training images" if data.get("train_size") else ""
    rows = [("objective", f"`{cfg.get('objective', run.objective)}`"),
            ("data", f"`{data.get('spec', cfg.get('data', '?'))}`{images}"),
            ("steps", f"{run.config.get('step', cfg.get('steps'))} of batch {cfg.get('batch_size')}"),
            ("optimiser", f"{cfg.get('optimizer')} lr {cfg.get('lr')}, {cfg.get('schedule')} decay, "
                          f"{cfg.get('warmup_steps')} warm-up steps, weight decay {cfg.get('weight_decay')}, "
                          f"precision {cfg.get('precision')}, seed {cfg.get('seed')}")]
    if run.teacher:
        rows.append(("weights", "the objective's teacher (the student's moving average, which DINO evaluates), "
                                "not the student"))
    if run.ema:
        rows.append(("weights", f"the moving average of the weights (EMA, decay {cfg.get('ema_decay')}, timm's "
                                "ModelEmaV3 with warm-up), not the last step's"))
    transfer = run.config.get("transfer")
    if transfer:
        rows.insert(0, ("pre-trained", describe_start(str(transfer.get("start")))))
        adapters = ", ".join(transfer.get("adapters") or []) or "the defaults (resize-posemb, zero-head, finetune)"
        rows.insert(1, ("adapters", adapters))
    return rows


def _metrics(run: TrainedRun) -> list[str]:
    """The figures logged at the exported weights' step or before (a stopped run may have logged past its last
    checkpoint: those steps are not in the weights)."""
    exported = run.config.get("step")
    rows = [r for r in run.metrics() if not isinstance(exported, int) or r["step"] <= exported]
    if not rows:
        return []
    last = rows[-1]
    shown = {k: last[k] for k in SHOWN_METRICS if k in last}
    for row in reversed(rows):  # validation (and monitor) figures of the last step that has them
        extra = {k: v for k, v in row.items() if k.startswith(("val_", "monitor_")) and k not in shown}
        if extra:
            shown.update(extra)
            break
    if not shown:
        return []
    lines = [f"At step {last.get('step')} (training figures: the last logged step of the exported weights; `val_`: "
             "the held-out split):",
             "", "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {v:.4g} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in shown.items()]
    return lines + [""]


def _pct(value: Any) -> str:
    """A share as a percentage; anything else (a hand-edited file) as it is."""
    return f"{value:.2%}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def _transfer_results(result: dict[str, Any] | None) -> list[str]:
    if not result:
        return []
    chosen = result.get("chosen") or {}
    lines = [f"**Test top-1 {result['test_top1']:.2%}** on {result.get('test_samples', '?')} test images of "
             f"`{result.get('task')}` ({result.get('shots')} training images; the chosen lr {chosen.get('lr')} × "
             f"{chosen.get('steps')} steps, retrained on train + val).", ""]
    points = [p for p in result.get("sweep") or [] if isinstance(p, dict)]
    if points:
        lines += ["| lr | steps | val top-1 |", "|---|---|---|"]
        lines += [f"| {p.get('lr')} | {p.get('steps')} | {_pct(p.get('val_top1'))} |" for p in points]
        lines.append("")
    return lines


def _labels(config: dict[str, Any], recorded: bool) -> list[str]:
    names = config.get("label_names")
    if not names:
        return []
    shown = ", ".join(f"{i}: {html.escape(str(n))}" for i, n in enumerate(names[:MAX_LABELS]))  # (a folder name
    # such as `<script>` is text on the hub's page, not markup)
    more = f", ... ({len(names)} in all)" if len(names) > MAX_LABELS else ""
    note = "" if recorded else " (the run records no class names: these are the class indices)"
    return ["## Classes", "", f"{shown}{more}{note}", ""]


def _usage(name: str, classifier: bool) -> list[str]:
    out = "logits = model(x)  # (B, num_classes)" if classifier else "features = model(x)  # (B, D): the [class] token"
    return ["## Use", "", "```python", "import timm", "import torch", "from PIL import Image", "",
            f'model = timm.create_model("{name}", pretrained=True).eval()',
            "config = timm.data.resolve_data_config({}, model=model)  # size, mean, std, crop from config.json",
            "transform = timm.data.create_transform(**config)",
            'x = transform(Image.open("image.png").convert("RGB")).unsqueeze(0)  # (1, 3, H, W)',
            "with torch.no_grad():", f"    {out}", "```", "",
            "`num_classes=0` gives the pooled features of any export; `model.forward_features(x)` the tokens "
            "(B, N + 1, D).", ""]


def model_card(run: TrainedRun, config: dict[str, Any], folder: Path, repo_id: str | None = None) -> str:
    """README.md for the export in `folder` of `run`, whose config.json is `config`."""
    classifier = bool(config["num_classes"])
    name = f"hf-hub:{repo_id}" if repo_id else f"local-dir:{folder}"
    what = (f"a classifier of {config['num_classes']} classes for `{run.config['transfer']['task']}`, fine-tuned"
            if run.is_transfer else f"a backbone pre-trained with `{run.objective}`")
    dropped = " Its pre-training head (supervised: a tanh MLP) has no timm equivalent and is not included." \
        if run.objective == "supervised" and not classifier else ""
    lines = [_front_matter(classifier), f"# {repo_id or folder.name}", "",
             f"A Vision Transformer ({run.config['backbone'].get('name')}): {what} with "
             f"vitx {__version__}.{dropped}", "",
             "| | |", "|---|---|", f"| architecture | {_architecture(config)} |",
             f"| input | {_preprocessing(config)} |",
             f"| outputs | {config['num_classes'] or 'none: pooled features'} |", ""]
    lines += _usage(name, classifier)
    lines += ["## Training", "", "| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in _training(run)] + [""]
    results = _transfer_results(run.result()) + _metrics(run)
    if (run.path / "curves.png").is_file():  # copied beside the card by the export
        results += ["![training curves: loss, accuracy, learning rate](curves.png)", ""]
    if results:
        lines += ["## Results", ""] + results
    lines += _labels(config, run.class_names()[1])
    command, recorded = command_line(run)
    how = "" if recorded else " (rebuilt from the settings in config.json: the run was started from Python)"
    lines += ["## How it was made", "", f"The command{how}:", "", "```bash", command, "```", "",
              f"Exported by `vitx export` from `{run.path}` (step {run.config.get('step')}).", ""]
    return "\n".join(lines)


__all__ = ["model_card"]

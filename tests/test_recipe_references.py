"""Every objective's defaults against its reference (docs/recipes.md), one test per row of the table, read from the
table itself: a default that drifts from what the table says, or an `=` row whose values part, fails by name. And
DINO's per-parameter clipping against a line-for-line copy of main_dino.py's `clip_gradients`. No training: the
objectives are built on vit-nano and their run settings, options and optimiser groups read."""
from __future__ import annotations

import ast
import dataclasses
import functools
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import pytest
import torch

import vitx
from vitx.registry import OBJECTIVES
from vitx.runner.config import PretrainConfig, configured, describe_optimisation
from vitx.runner.optim import build_schedule, clip_per_parameter, exempt_from_decay, lr_factor, param_groups
from vitx.settings import flags

TABLE = Path(__file__).resolve().parents[1] / "docs" / "recipes.md"
SMALL = {"dino": {"out_dim": 64, "hidden_dim": 32, "bottleneck_dim": 16, "local_crops": 2}}  # (not what a row reads)
FIELDS = {flag: name for name, flag in flags(PretrainConfig).items()}
NONE = "none"  # a row's value for something the objective does not do


class Row(NamedTuple):
    objective: str
    setting: str
    reference: Any  # the reference value as a literal, or NONE when the table gives it in words (10 epochs)
    vitx: Any
    status: str  # =, ≈ or ≠

    def __str__(self) -> str:
        return f"{self.objective} {self.setting}"


def _literal(cell: str) -> Any:
    found = re.fullmatch(r"`([^`]*)`", cell.strip())
    return ast.literal_eval(found.group(1)) if found else NONE


def rows() -> list[Row]:
    """The table's rows: | `objective` | setting | reference | reference value | vitx default | status |."""
    out = []
    for line in TABLE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and re.fullmatch(r"`\w+`", cells[0]):
            setting = cells[1].strip("`")
            out.append(Row(cells[0].strip("`"), setting, _literal(cells[3]), _literal(cells[4]), cells[5][:1]))
    return out


@functools.cache
def config(objective: str) -> PretrainConfig:
    """The run settings of `vitx pretrain --objective OBJECTIVE` with nothing else given."""
    return configured({"objective": objective, "log_with": "none"})


@functools.cache
def built(objective: str) -> vitx.Objective:
    torch.manual_seed(0)
    cls = OBJECTIVES.get(objective).obj
    return vitx.create_objective(objective, vitx.create_backbone("vit-nano/4"), 10 if cls.needs_labels else None,
                                 **SMALL.get(objective, {}))


def spared(objective: str) -> str:
    """What weight decay spares in the optimiser's groups of `objective` as `vitx pretrain` builds them."""
    model, cfg = built(objective), config(objective)
    groups = param_groups(model, cfg.weight_decay, cfg.lr, decay_tokens=cfg.decay_tokens)
    decayed = {id(p) for g in groups if g["weight_decay"] > 0 for p in g["params"]}
    named = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert not any(id(p) in decayed for n, p in named.items() if p.ndim <= 1 or n.endswith(".bias"))
    tokens = [n for n in ("backbone.pos_embed", "backbone.cls_token") if n in named]
    if all(id(named[n]) in decayed for n in tokens):
        return "biases and 1-D"
    assert not any(id(named[n]) in decayed for n in tokens), tokens
    return "biases, 1-D, position embeddings and tokens"


def option_default(objective: str, name: str) -> Any:
    """The declared default of an objective option (`Options`), or NONE where it declares no such option."""
    declared = {f.name: f for f in dataclasses.fields(OBJECTIVES.get(objective).obj.Options)}
    if name not in declared:
        return NONE
    field = declared[name]
    return field.default if field.default is not dataclasses.MISSING else field.default_factory()


SPECIAL = {
    "weight decay spares": spared,
    "position embeddings trained": lambda o: built(o).backbone.pos_embed.requires_grad,
    "hue jitter": lambda o: built(o).views()[0].jitter[3],
    "blur": lambda o: built(o).views()[0].blur,
    # (data/views.py: a view's jitters in a random order, as torchvision's ColorJitter; the objective's own crops)
    "jitter order": lambda o: "random" if built(o).views() else NONE,
    "views": lambda o: "from the whole image" if built(o).views() else "from the runner's crop",
}


@functools.cache
def fitted(objective: str) -> frozenset[str]:
    """The options `objective` fits to the data when left unset (at embedded:digits' 1,437 images and at ImageNet's
    1.28M, over 100,000 steps)."""
    from vitx.objectives import fit_to_data

    made = [fit_to_data(objective, {}, images, 100_000) for images in (1437, 1_281_167)]
    return frozenset(k for m in made if m is not None for k in m.values)


def vitx_default(row: Row) -> Any:
    if row.setting.startswith("--"):
        return getattr(config(row.objective), FIELDS[row.setting])
    if row.setting.endswith("=") and row.setting[:-1] in fitted(row.objective):
        return NONE  # (its row says "fitted to the data", in words)
    if row.setting.endswith("="):
        return option_default(row.objective, row.setting[:-1])
    return SPECIAL[row.setting](row.objective)


ROWS = rows()


def test_the_table_covers_every_objective_and_every_setting_its_recipe_declares():
    assert len(ROWS) > 80 and all(r.status in "=≈≠" for r in ROWS)
    assert fitted("dino") == {f"{r.setting[:-1]}" for r in ROWS if r.objective == "dino" and r.vitx == NONE
                              and r.setting.endswith("=")}  # a row for each option fitted to the data
    for name in ("dino", "mae", "simclr", "mpp", "supervised"):
        shown = {FIELDS[r.setting] for r in ROWS if r.objective == name and r.setting.startswith("--")}
        declared = set(OBJECTIVES.get(name).obj.recipe) - {"decay_tokens"}  # (its row: weight decay spares)
        assert declared <= shown, (name, sorted(declared - shown))


@pytest.mark.parametrize("row", ROWS, ids=str)
def test_each_default_is_the_one_the_table_gives(row):
    assert vitx_default(row) == row.vitx, f"{row}: vitx's default is {vitx_default(row)!r}, docs/recipes.md says {row.vitx!r}"
    if row.status == "=":
        assert row.reference == row.vitx, f"{row}: marked = but the reference's {row.reference!r} is not {row.vitx!r}"
    else:
        assert row.reference != row.vitx, f"{row}: marked {row.status} but the values are the same"


def test_an_explicit_setting_wins_over_the_objectives_recipe_and_lr_over_its_blr():
    given = configured({"objective": "dino", "grad_clip_mode": "global", "lr": 1e-3, "log_with": "none"})
    assert (given.grad_clip_mode, given.lr, given.blr) == ("global", 1e-3, None)
    assert "grad_clip_mode" not in given.from_objective and "blr" not in given.from_objective
    assert configured({"objective": "mae", "batch_size": 4096, "log_with": "none"}).lr == pytest.approx(1.5e-4 * 16)
    assert configured({"objective": "dino", "blr": 1e-3, "batch_size": 512, "log_with": "none"}).lr == pytest.approx(2e-3)
    with pytest.raises(vitx.VitxError, match="give --lr or --blr, not both"):
        configured({"objective": "dino", "blr": 1e-3, "lr": 1e-3})
    line = describe_optimisation(config("dino"))
    assert "lr 0.00025 (blr 0.0005 × 128 / 256)" in line and "clip 3 per-parameter" in line
    assert "from the objective's reference: " in line and "decay_tokens" in line


def test_warm_up_starts_and_the_floor_are_maes_and_dinos_schedules():
    """MAE's util/lr_sched.adjust_learning_rate and DINO's utils.cosine_scheduler, per iteration, reimplemented."""
    import math

    import numpy as np

    total, warm, lr, floor = 50, 8, 3e-4, 1e-6

    def mae(it: int) -> float:  # epochs of one iteration each
        if it < warm:
            return lr * it / warm
        return floor + (lr - floor) * 0.5 * (1.0 + math.cos(math.pi * (it - warm) / (total - warm)))

    dino = np.concatenate((np.linspace(0, lr, warm), floor + 0.5 * (lr - floor) * (
        1 + np.cos(np.pi * np.arange(total - warm) / (total - warm)))))
    for it in range(total):
        assert lr * lr_factor(it, total, warm, "cosine", "zero", floor / lr) == pytest.approx(mae(it), abs=1e-15)
        assert lr * lr_factor(it, total, warm, "cosine", "linspace", floor / lr) == pytest.approx(dino[it], abs=1e-15)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    sched = build_schedule(opt, total, warm, "cosine", "linspace", floor / lr)
    seen = []
    for _ in range(total):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx(list(dino), abs=1e-15)


def test_dinos_exemptions_decay_position_embeddings_and_the_class_token():
    model = built("dino")
    assert {"backbone.pos_embed", "backbone.cls_token"} & exempt_from_decay(model, decay_tokens=True) == set()
    assert {"backbone.pos_embed", "backbone.cls_token"} <= exempt_from_decay(model, decay_tokens=False)


def dino_clip_gradients(model: torch.nn.Module, clip: float) -> list[float]:
    """facebookresearch/dino utils.py:132-141, `clip_gradients`, line for line."""
    norms = []
    for name, p in model.named_parameters():
        if p.grad is not None:
            param_norm = p.grad.data.norm(2)
            norms.append(param_norm.item())
            clip_coef = clip / (param_norm + 1e-6)
            if clip_coef < 1:
                p.grad.data.mul_(clip_coef)
    return norms


def test_dino_per_parameter_clipping_is_main_dinos():
    """Acceptance: on a fixed batch, the runner's clipping under DINO's recipe (the step's `_clip_gradients`) leaves
    every gradient exactly as main_dino.py's `clip_gradients` does (max |diff| = 0), clipping some and not others,
    and logs the global norm before clipping."""
    from vitx.runner.stepping import Stepping

    torch.manual_seed(0)
    objective = vitx.create_objective("dino", vitx.create_backbone("vit-nano/4"), None, **SMALL["dino"])
    torch.manual_seed(1)
    views = [torch.randn(8, 3, 16, 16), torch.randn(8, 3, 16, 16), torch.randn(8, 3, 8, 8), torch.randn(8, 3, 8, 8)]
    objective({"views": views})["loss"].backward()
    before = {n: p.grad.clone() for n, p in objective.named_parameters() if p.grad is not None}
    reference = torch.nn.Module()  # the same parameters and gradients (a weight-normed head refuses deepcopy)
    for i, (n, p) in enumerate(objective.named_parameters()):
        reference.register_parameter(f"p{i}", torch.nn.Parameter(p.detach().clone()))
        reference.get_parameter(f"p{i}").grad = None if p.grad is None else p.grad.clone()
    names = [n for n, _ in objective.named_parameters()]
    norms = dino_clip_gradients(reference, 3.0)

    cfg = config("dino")
    assert (cfg.grad_clip_mode, cfg.grad_clip) == ("per-parameter", 3.0)
    accelerator = SimpleNamespace(device=torch.device("cpu"), unscale_gradients=lambda: None)
    setup = SimpleNamespace(cfg=cfg, accelerator=accelerator, model=objective)
    logged = Stepping._clip_gradients(SimpleNamespace(setup=setup))

    ours = dict(objective.named_parameters())
    theirs = {names[int(k[1:])]: p for k, p in reference.named_parameters()}
    diff = max(float((ours[n].grad - p.grad).abs().max()) for n, p in theirs.items() if p.grad is not None)
    assert diff == 0.0
    clipped = [n for n, g in before.items() if not torch.equal(g, ours[n].grad)]
    assert 0 < len(clipped) < len(before)  # some tensors clipped, each on its own norm; the others untouched
    assert all(float(ours[n].grad.norm()) == pytest.approx(3.0, rel=1e-5) for n in clipped)
    assert float(logged) == pytest.approx(float(torch.tensor(norms).norm()), rel=1e-6)  # the global norm, before
    assert float(torch.stack([g.norm() for g in before.values()]).norm()) == pytest.approx(float(logged), rel=1e-6)
    assert clip_per_parameter([], 3.0).numel() == 0

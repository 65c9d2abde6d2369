"""Fine-tuning beyond the paper's SGD (issue 26, step 1): timm's optimizers, layer-wise lr decay, drop-path,
augmentation policies, Mixup/CutMix/smoothing at transfer, a linear probe's frozen backbone in eval mode, and
trainable parameters in every result."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from vitx import create_backbone
from vitx.adapters import AdaptContext, create_adapter
from vitx.objectives.supervised import Supervised
from vitx.runner.optim import build_optimizer, build_schedule, layer_id, param_groups


def _model(depth: int = 3) -> Supervised:
    return Supervised(create_backbone("vit-nano/4", depth=depth), num_classes=5, head="linear")


def test_layer_decay_scales_each_block_as_mae_counts_them():
    model = _model(depth=3)  # layers: 0 embeddings, 1..3 blocks, 4 final norm + head
    groups = param_groups(model, weight_decay=0.05, lr=1.0, layer_decay=0.5)
    scale_of = {id(p): g["lr_scale"] for g in groups for p in g["params"]}
    decay_of = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
    named = dict(model.named_parameters())
    assert scale_of[id(named["backbone.patch_embed.proj.weight"])] == 0.5 ** 4
    assert scale_of[id(named["backbone.pos_embed"])] == 0.5 ** 4
    assert scale_of[id(named["backbone.blocks.0.attn.qkv.weight"])] == 0.5 ** 3
    assert scale_of[id(named["backbone.blocks.2.mlp.fc1.weight"])] == 0.5 ** 1
    assert scale_of[id(named["backbone.norm.weight"])] == 1.0 and scale_of[id(named["head.weight"])] == 1.0
    assert decay_of[id(named["backbone.blocks.0.attn.qkv.weight"])] == 0.05
    assert decay_of[id(named["backbone.blocks.0.attn.qkv.bias"])] == 0.0  # biases, norms, pos-embed: no decay
    assert decay_of[id(named["backbone.pos_embed"])] == 0.0
    assert all(g["lr"] == g["lr_scale"] for g in groups)
    assert sum(len(g["params"]) for g in groups) == len(named)
    assert layer_id("backbone.cls_token", 3) == 0 and layer_id("mpp_head.weight", 3) == 4


def test_no_layer_decay_keeps_the_two_groups_of_the_paper():
    model = _model()
    groups = param_groups(model, weight_decay=0.1, lr=0.01)
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0] and [g["lr_scale"] for g in groups] == [1.0, 1.0]
    assert all(p.ndim > 1 for p in groups[0]["params"])


def test_timm_optimizers_by_name_keep_the_groups_and_the_schedule_keeps_their_ratios():
    from timm.optim import Lamb, Lion

    from vitx.runner.setup import set_lr

    model = _model()
    assert isinstance(build_optimizer(model, "lamb", 1e-3, 0.05), Lamb)
    opt = build_optimizer(model, "lion", 1e-3, 0.05, layer_decay=0.5)
    assert isinstance(opt, Lion)
    sched = build_schedule(opt, total=10, warmup=2, schedule="cosine")
    ratios = [g["lr"] / opt.param_groups[-1]["lr"] for g in opt.param_groups]
    opt.step()
    sched.step()
    set_lr(sched, 2e-3)  # a resumed run given a new --lr: every group moves, layer decay's ratios stay
    assert [g["lr"] / opt.param_groups[-1]["lr"] for g in opt.param_groups] == pytest.approx(ratios)
    assert opt.param_groups[-1]["lr"] == pytest.approx(2e-3 * 1.0)  # step 1 of the warm-up: factor 1


def test_drop_path_is_linear_over_depth_and_off_at_zero():
    from timm.layers import DropPath

    from vitx.backbones.droppath import set_drop_path

    backbone = create_backbone("vit-nano/4", depth=3)
    set_drop_path(backbone, 0.2)
    rates = [b.drop_path1.drop_prob if isinstance(b.drop_path1, DropPath) else 0.0 for b in backbone.blocks]
    assert rates == pytest.approx([0.0, 0.1, 0.2])
    set_drop_path(backbone, 0.0)
    assert all(isinstance(b.drop_path2, torch.nn.Identity) for b in backbone.blocks)


def test_linear_probe_keeps_its_frozen_backbone_in_eval_mode():
    model = _model()
    from vitx.backbones.droppath import set_drop_path

    set_drop_path(model.backbone, 0.5)
    create_adapter("linear-probe").apply(model, AdaptContext(image_size=16, num_classes=5))
    model.train()
    assert model.training and model.head.training and not model.backbone.training
    assert not any(m.training for m in model.backbone.modules())
    x = torch.randn(4, 3, 16, 16)
    assert torch.equal(model.backbone(x), model.backbone(x))  # no drop-path draws while the head trains


@pytest.mark.parametrize("policy", ["rand-m9-mstd0.5-inc1", "original", "v0", "augmix-m5-w4-d2", "trivialaugment"])
def test_augmentation_policies_are_seeded_per_sample(policy):
    from vitx.data.transforms import Preprocess

    pre = Preprocess(image_size=16, randaugment=policy)
    image = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (3, 20, 20), dtype=np.uint8))
    first = pre.train(image, np.random.default_rng([0, 7]))
    again = pre.train(image, np.random.default_rng([0, 7]))
    assert first.shape == (3, 16, 16) and first.dtype == torch.uint8
    assert torch.equal(first, again)  # (seed, position) decides the draw, not the global generators
    others = [pre.train(image, np.random.default_rng([0, k])) for k in range(8)]
    assert any(not torch.equal(first, o) for o in others)


@pytest.fixture(scope="module")
def recipe_transfer(tmp_path_factory):
    """One transfer with every new setting: AdamW, layer decay, drop-path, RandAugment, Mixup/CutMix, smoothing."""
    from vitx.transfer import TransferConfig, transfer as run_transfer

    out = tmp_path_factory.mktemp("recipe")
    cfg = TransferConfig(start="scratch", model="vit-nano/4", task="embedded:digits", shots=50, sweep=False,
                         lr=1e-3, steps=4, batch_size=16, optimizer="adamw", weight_decay=0.05, layer_decay=0.65,
                         drop_path=0.1, augment=True, randaugment="rand-m9-mstd0.5-inc1", mixup=0.8, cutmix=1.0,
                         label_smoothing=0.1, random_erasing=0.25, test_samples=40, output_dir=str(out),
                         save_every=2, log_every=2, curves=False, quiet=True, workers=0)
    run_transfer(cfg)
    return cfg, out / "data-embedded-digits"


def test_transfer_records_its_recipe_and_parameters(recipe_transfer):
    cfg, root = recipe_transfer
    result = json.loads((root / "result.json").read_text())
    run = json.loads((root / "final" / "config.json").read_text())
    assert result["parameters"]["trainable"] == result["parameters"]["total"] > 0  # full fine-tuning
    assert {k: result[k] for k in ("optimizer", "layer_decay", "drop_path", "mixup", "augment")} == {
        "optimizer": "adamw", "layer_decay": 0.65, "drop_path": 0.1, "mixup": 0.8, "augment": True}
    assert run["run"]["optimizer"] == "adamw" and run["run"]["weight_decay"] == 0.05
    assert run["run"]["objective"] == "supervised(head='linear', label_smoothing=0.1, mixup=0.8, cutmix=1.0)"
    assert run["preprocess"]["augment"] is True and run["preprocess"]["randaugment"] == "rand-m9-mstd0.5-inc1"
    assert 0.0 <= result["test_top1"] <= 1.0 and result["test_samples"] == 40


def test_resuming_a_transfer_with_another_recipe_is_refused(recipe_transfer):
    from dataclasses import replace

    from vitx.errors import VitxError
    from vitx.transfer import transfer as run_transfer

    cfg, _ = recipe_transfer
    with pytest.raises(VitxError, match="--layer-decay 0.65 there, 0.75 here"):
        run_transfer(replace(cfg, layer_decay=0.75), resume=True)


def test_linear_probe_result_counts_only_the_head(tmp_path):
    from vitx.transfer import TransferConfig, transfer as run_transfer

    cfg = TransferConfig(start="scratch", model="vit-nano/4", task="embedded:digits", shots=20, sweep=False, lr=0.1,
                         steps=1, batch_size=10, adapters=["linear-probe"], test_samples=10,
                         output_dir=str(tmp_path), curves=False, quiet=True, workers=0)
    run_transfer(cfg)
    result = json.loads((tmp_path / "data-embedded-digits" / "result.json").read_text())
    dim = create_backbone("vit-nano/4").embed_dim
    assert result["parameters"]["trainable"] == dim * 10 + 10 < result["parameters"]["total"]

"""Transfer adapters: position-embedding interpolation (timm parity, [class] kept), the zero-init head, and
what each method leaves trainable."""
from __future__ import annotations

import pytest
import torch
from timm.layers import resample_abs_pos_embed

from vitx import create_backbone
from vitx.adapters import AdaptContext, create_adapter, resample_pos_embed, resize_backbone, resolve_adapters
from vitx.errors import VitxError
from vitx.objectives.supervised import Supervised
from vitx.transfer import load_start


@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
@pytest.mark.parametrize("old,new", [((14, 14), (24, 24)), ((4, 6), (7, 5)), ((8, 8), (4, 4)), ((3, 5), (3, 5))])
def test_resample_matches_timm(mode, old, new):
    torch.manual_seed(0)
    pos = torch.randn(1, 1 + old[0] * old[1], 16)
    ours = resample_pos_embed(pos, new, old, num_prefix_tokens=1, mode=mode)
    ref = resample_abs_pos_embed(pos, list(new), list(old), num_prefix_tokens=1, interpolation=mode)
    assert ours.shape == (1, 1 + new[0] * new[1], 16)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-6)
    assert torch.equal(ours[:, :1], pos[:, :1])  # the [class] embedding is kept exactly


def test_checkpoint_at_32px_loads_into_48px_model(tmp_path):
    from vitx.runner import pretrain
    from .helpers import TINY

    run = tmp_path / "run"
    pretrain({**TINY, "model": "vit-micro/4", "output_dir": str(run), "steps": 2, "save_every": 2})
    small = load_start(str(run))
    assert tuple(small.patch_embed.img_size) == (32, 32)
    big = resize_backbone(small, 48)
    assert tuple(big.patch_embed.img_size) == (48, 48) and tuple(big.patch_embed.grid_size) == (12, 12)
    assert big.pos_embed.shape == (1, 1 + 144, small.embed_dim)
    assert torch.equal(big.pos_embed[:, 0], small.pos_embed[:, 0])  # [class] position embedding unchanged
    assert torch.equal(big.cls_token, small.cls_token)
    ref = resample_abs_pos_embed(small.pos_embed.detach(), [12, 12], [8, 8], num_prefix_tokens=1)
    torch.testing.assert_close(big.pos_embed.detach(), ref, rtol=0, atol=1e-6)
    for name, p in small.state_dict().items():  # everything else is carried over as is
        if name != "pos_embed":
            assert torch.equal(p, big.state_dict()[name]), name
    out = big(torch.randn(2, 3, 48, 48))
    assert out.shape == (2, small.embed_dim)
    assert big.vitx_record["overrides"]["img_size"] == 48  # a saved fine-tuned model rebuilds at 48px


def test_zero_head_gives_exactly_zero_logits_before_the_first_step():
    backbone = create_backbone("vit-nano/4")
    model = Supervised(backbone, 7, head="mlp")  # as pre-trained: the two-layer head
    create_adapter("zero-head").apply(model, AdaptContext(image_size=16, num_classes=7))
    assert isinstance(model.head, torch.nn.Linear) and model.head.weight.shape == (7, backbone.embed_dim)
    logits = model.head(model.backbone(torch.randn(4, 3, 16, 16)))
    assert torch.equal(logits, torch.zeros(4, 7))
    loss = model({"image": torch.randn(4, 3, 16, 16), "label": torch.tensor([0, 1, 2, 3])})["loss"]
    assert loss.item() == pytest.approx(torch.log(torch.tensor(7.0)).item(), abs=1e-6)  # uniform prediction


def test_methods_choose_what_trains():
    ctx = AdaptContext(image_size=16, num_classes=3)
    for spec, backbone_trains in (("finetune", True), ("linear-probe", False)):
        model = Supervised(create_backbone("vit-nano/4"), 3, head="linear")
        for adapter in resolve_adapters([spec]):
            adapter.apply(model, ctx)
        assert all(p.requires_grad == backbone_trains for p in model.backbone.parameters()), spec
        assert all(p.requires_grad for p in model.head.parameters())


def test_adapter_resolution_errors():
    assert [a.name for a in resolve_adapters([])] == ["resize-posemb", "zero-head", "finetune"]
    assert resolve_adapters(["resize-posemb(mode='bilinear')"])[0].mode == "bilinear"
    with pytest.raises(VitxError, match="both set the method"):
        resolve_adapters(["finetune", "linear-probe"])
    with pytest.raises(VitxError, match="did you mean linear-probe"):
        resolve_adapters(["linear-prob"])
    with pytest.raises(VitxError, match="bicubic, bilinear"):
        resolve_adapters(["resize-posemb(mode='nearest')"])


def test_a_setting_the_method_ignores_is_refused_in_one_line(tmp_path):
    """`--adapter fewshot --mixup 0.8`: the closed-form fit cannot use mixup, so it is refused before anything
    runs (result.json recorded `"mixup": 0.8` as if used)."""
    from .helpers import vitx_cli

    out = tmp_path / "t"
    proc = vitx_cli("transfer", "--from", "scratch", "--model", "vit-nano/4", "--adapter", "fewshot", "--mixup", "0.8",
                    "--shots", "20", "--test-samples", "8", "--workers", "0", "--output-dir", str(out))
    assert (proc.returncode, proc.stderr) == (2, "error: --adapter fewshot solves for the head in closed form and "
                                                 "trains nothing: --mixup 0.8 would have no effect; leave it out\n")
    assert not out.exists()


@pytest.mark.parametrize("settings, message", [
    ({"adapters": ["fewshot"], "protocol": "peft", "hflip": False, "lrs": [0.1, 0.2], "label_smoothing": 0.1},
     "--adapter fewshot solves for the head in closed form and trains nothing: --protocol peft, --lrs 0.1,0.2, "
     "--no-hflip, --label-smoothing 0.1 would have no effect; leave them out"),
    ({"adapters": ["linear-probe"], "layer_decay": 0.65, "drop_path": 0.1, "mixup": 0.8},
     "--adapter linear-probe trains only the head, on a frozen backbone in eval mode: --drop-path 0.1, "
     "--layer-decay 0.65 would have no effect; leave them out"),
    ({"adapters": ["vpt(tokens=2)"], "drop_path": 0.1},
     "--adapter vpt keeps the backbone frozen in eval mode (no stochastic depth): --drop-path 0.1 would have no "
     "effect; leave it out"),
])
def test_every_ignored_setting_is_named(settings, message):
    """All the settings a method ignores that were given, in one line (a --protocol preset counts as given)."""
    from vitx.transfer.config import TransferConfig, with_protocol

    with pytest.raises(VitxError) as refused:
        TransferConfig(**with_protocol(settings)).validate()
    assert str(refused.value) == message


def test_what_a_method_ignores_is_declared_once_and_defaults_pass():
    """Each method names the settings it ignores (TransferConfig fields, declared on the adapter); their defaults,
    the --protocol preset's, or an explicit default value pass, and what the method does read passes."""
    from dataclasses import fields

    from vitx.adapters.base import TRAINING
    from vitx.transfer.config import TransferConfig, with_protocol

    names = {f.name for f in fields(TransferConfig)}
    for spec in ("fewshot", "linear-probe", "vpt", "finetune", "bitfit", "ssf", "resize-posemb", "zero-head"):
        assert set(create_adapter(spec).ignores) <= names, spec
    assert create_adapter("fewshot").ignores == TRAINING and create_adapter("finetune").ignores == ()
    TransferConfig(adapters=["fewshot"], mixup=0.0, lr=0.01, hflip=True).validate()  # the defaults, given
    TransferConfig(**with_protocol({"protocol": "peft", "adapters": ["vpt"]})).validate()  # the preset's values
    TransferConfig(adapters=["linear-probe"], mixup=0.8, weight_decay=0.1, ema_decay=0.99).validate()  # all read
    TransferConfig(mixup=0.8, drop_path=0.1, layer_decay=0.65).validate()  # full fine-tuning reads them all

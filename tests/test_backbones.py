"""Backbones: the paper's shapes, parity with timm, clear errors."""
import pytest
import timm
import torch

import vitx
from vitx.backbones import count_parameters
from vitx.backbones.vit import VARIANTS
from vitx.errors import VitxError
from vitx.heads import LinearHead, PreTrainingHead
from vitx.registry import BACKBONES

PAPER = {  # paper Table 1 (B, L, H) and DeiT/AugReg (Ti, S): layers, width, MLP, heads
    "vit-ti/16": (12, 192, 768, 3), "vit-s/16": (12, 384, 1536, 6), "vit-b/16": (12, 768, 3072, 12),
    "vit-l/16": (24, 1024, 4096, 16), "vit-h/14": (32, 1280, 5120, 16),
}


def test_every_required_name_is_registered():
    required = ["vit-ti/16", "vit-s/16", "vit-s/32", "vit-b/16", "vit-b/32", "vit-b/8", "vit-l/16", "vit-l/32",
                "vit-h/14", "r50+vit-b/16", "vit-micro/4", "vit-nano/4"]
    assert set(required) <= set(BACKBONES.names())


@pytest.mark.parametrize("name", sorted(PAPER))
def test_paper_table_sizes(name):
    spec = BACKBONES.get(name).obj
    assert (spec.depth, spec.width, spec.mlp, spec.heads) == PAPER[name]


def test_parameter_counts_match_paper():
    # paper: B 86M, L 307M, H 632M (with a 1000-class head; here the backbone alone)
    assert abs(count_parameters("vit-b/16") / 1e6 - 86) < 1
    assert abs(count_parameters("vit-l/16") / 1e6 - 304) < 1
    assert abs(count_parameters("vit-h/14") / 1e6 - 631) < 1


@pytest.mark.parametrize("name", [n for n, v in VARIANTS.items() if v[6] == 224] + ["r50+vit-b/16"])
def test_same_parameters_as_timm_twin(name):
    """Registry-driven: every paper backbone has exactly the keys and shapes of its timm model."""
    spec = BACKBONES.get(name).obj
    with torch.device("meta"):
        ours = vitx.create_backbone(name, weight_init="skip").state_dict()
        theirs = timm.create_model(spec.timm_arch, num_classes=0).state_dict()
    assert {k: tuple(v.shape) for k, v in ours.items()} == {k: tuple(v.shape) for k, v in theirs.items()}


def test_paper_architecture_details():
    model = vitx.create_backbone("vit-micro/4")
    assert model.cls_token.shape == (1, 1, 128)  # [class] token
    assert model.pos_embed.shape == (1, 1 + 64, 128) and model.pos_embed.requires_grad  # learnable 1D, incl. class
    assert model.blocks[0].norm1.__class__.__name__ == "LayerNorm"  # pre-LN
    assert isinstance(model.blocks[0].mlp.act, torch.nn.GELU)
    assert isinstance(model.norm, torch.nn.LayerNorm)  # final LayerNorm
    assert model.global_pool == "token"
    assert model.blocks[0].attn.fused_attn  # scaled_dot_product_attention


def _same_weights_logits(ours, theirs, size):
    ours.load_state_dict(theirs.state_dict(), strict=True)
    ours.eval(), theirs.eval()
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return ours(x), theirs(x)


def test_vit_b16_logits_equal_timm():
    """Acceptance: create_backbone('vit-b/16') with timm's weights gives timm's logits within 1e-5."""
    theirs = timm.create_model("vit_base_patch16_224", pretrained=False)
    ours = vitx.create_backbone("vit-b/16", num_classes=1000)
    a, b = _same_weights_logits(ours, theirs, 224)
    assert a.shape == (2, 1000)
    assert torch.allclose(a, b, atol=1e-5, rtol=0), (a - b).abs().max()


@pytest.mark.parametrize("name", ["vit-ti/16", "vit-s/32", "r50+vit-b/16"])
def test_more_logits_equal_timm(name):
    spec = BACKBONES.get(name).obj
    theirs = timm.create_model(spec.timm_arch, pretrained=False, num_classes=10)
    ours = vitx.create_backbone(name, num_classes=10)
    a, b = _same_weights_logits(ours, theirs, 224)
    assert torch.allclose(a, b, atol=1e-5, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vit-b/8", "vit-l/16", "vit-l/32", "vit-h/14", "vit-b/32", "vit-s/16"])
def test_large_logits_equal_timm(name):
    spec = BACKBONES.get(name).obj
    theirs = timm.create_model(spec.timm_arch, pretrained=False, num_classes=10)
    ours = vitx.create_backbone(name, num_classes=10)
    a, b = _same_weights_logits(ours, theirs, 224)
    assert torch.allclose(a, b, atol=1e-5, rtol=0)


def test_image_and_patch_size_are_arguments():
    model = vitx.create_backbone("vit-ti/16", img_size=48, patch_size=8)
    assert model.pos_embed.shape == (1, 1 + 36, 192)
    assert model(torch.randn(1, 3, 48, 48)).shape == (1, 192)


@pytest.mark.parametrize("name,kw,match", [
    ("vit-ti/16", {"img_size": 33}, "33 is not divisible by the patch size 16"),
    ("vit-micro/4", {"img_size": 30}, "30 is not divisible by the patch size 4"),
    ("r50+vit-b/16", {"img_size": 200}, "200 is not divisible by the patch size 16"),
])
def test_bad_image_size_is_a_clear_error(name, kw, match):
    with pytest.raises(VitxError, match=match):
        vitx.create_backbone(name, **kw)


def test_timm_names():
    model = vitx.create_backbone("timm:vit_tiny_patch16_224", img_size=32, patch_size=8)
    assert model(torch.randn(1, 3, 32, 32)).shape == (1, 192)
    with pytest.raises(VitxError, match="did you mean timm:vit_tiny_patch16_224"):
        vitx.create_backbone("timm:vit_tiny_patch16_22")
    with pytest.raises(VitxError, match="not a Vision Transformer"):
        vitx.create_backbone("timm:resnet18")


def test_timm_pretrained_offline_is_a_clear_error():
    with pytest.raises(VitxError, match="offline"):
        vitx.create_backbone("timm:vit_tiny_patch16_224", pretrained=True)


def test_heads():
    head = PreTrainingHead(16, 5)
    assert isinstance(head.pre_logits.act, torch.nn.Tanh) and head.pre_logits.fc.weight.shape == (16, 16)
    lin = LinearHead(16, 5)
    assert torch.equal(lin(torch.randn(3, 16)), torch.zeros(3, 5))  # zero-init: logits exactly 0

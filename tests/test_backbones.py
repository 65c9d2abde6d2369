"""Backbones: the paper's shapes, parity with timm, clear errors."""
import math

import pytest
import timm
import torch
import torch.nn.functional as F

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


@pytest.mark.parametrize("name", BACKBONES.names())
def test_listed_parameter_count_is_the_built_networks(name):
    """`vitx models` counts parameters from the table row (no torch); registry-driven: exact for every
    registered spec, at its own size and at another."""
    spec = BACKBONES.get(name).obj
    other = 2 * spec.img_size if spec.stride else spec.img_size + 4 * spec.patch
    for size in (None, other):
        built = count_parameters(name, **({"img_size": size} if size else {}))
        assert spec.num_parameters(size) == built, (name, size)


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


def _paper_vit(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The paper's equations (1)-(4) written out by hand on `model`'s weights, independent of timm's code:
    z0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos,  z'_l = MSA(LN(z_l-1)) + z_l-1,  z_l = MLP(LN(z'_l)) + z'_l,
    y = LN(z_L^0)."""
    b, c, h, w = x.shape
    p, d, heads = model.patch_embed.patch_size[0], model.embed_dim, model.blocks[0].attn.num_heads
    patches = x.unfold(2, p, p).unfold(3, p, p)  # (B, C, H/p, W/p, p, p)
    patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(b, -1, c * p * p)  # (B, N, C·p²), row by row
    e = model.patch_embed.proj.weight.reshape(d, -1)  # (D, C·p²) the patch embedding E
    z = patches @ e.T + model.patch_embed.proj.bias  # (B, N, D)
    z = torch.cat([model.cls_token.expand(b, -1, -1), z], dim=1) + model.pos_embed  # (B, N + 1, D)
    n = z.shape[1]

    def ln(t, norm):
        return F.layer_norm(t, (d,), norm.weight, norm.bias, eps=1e-6)

    for blk in model.blocks:
        qkv = ln(z, blk.norm1) @ blk.attn.qkv.weight.T + blk.attn.qkv.bias  # (B, N + 1, 3D)
        q, k, v = qkv.reshape(b, n, 3, heads, d // heads).permute(2, 0, 3, 1, 4)  # each (B, heads, N + 1, D/h)
        attn = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // heads), dim=-1)  # (B, heads, N + 1, N + 1)
        msa = (attn @ v).transpose(1, 2).reshape(b, n, d) @ blk.attn.proj.weight.T + blk.attn.proj.bias
        z = z + msa
        hidden = F.gelu(ln(z, blk.norm2) @ blk.mlp.fc1.weight.T + blk.mlp.fc1.bias)  # (B, N + 1, MLP)
        z = z + hidden @ blk.mlp.fc2.weight.T + blk.mlp.fc2.bias
    return ln(z, model.norm)[:, 0]  # (B, D) the [class] token


@pytest.mark.parametrize("name", ["vit-nano/4", "vit-ti/16", "vit-s/32"])
def test_backbone_computes_the_papers_equations(name):
    """Every weight randomised (biases and LayerNorms too), the backbone's [class] output equals the paper's
    equations computed by hand: a check of the architecture that does not compare timm with timm."""
    torch.manual_seed(0)
    model = vitx.create_backbone(name).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.02)
        size = int(model.patch_embed.img_size[0])
        x = torch.randn(2, 3, size, size)
        assert torch.allclose(model(x), _paper_vit(model, x), atol=1e-5, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vit-b/8", "vit-l/16", "vit-l/32", "vit-h/14", "vit-b/32", "vit-s/16", "vit-ti/16",
                                  "vit-s/32", "r50+vit-b/16"])
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


def test_heads():
    head = PreTrainingHead(16, 5)
    assert isinstance(head.pre_logits.act, torch.nn.Tanh) and head.pre_logits.fc.weight.shape == (16, 16)
    lin = LinearHead(16, 5)
    assert torch.equal(lin(torch.randn(3, 16)), torch.zeros(3, 5))  # zero-init: logits exactly 0


def _nano():
    torch.manual_seed(0)
    backbone = vitx.create_backbone("vit-nano/4").eval()
    backbone.patch_embed.strict_img_size = False  # crops of other sizes (DINO's local crops)
    return backbone


def test_the_staged_forward_is_timms_forward_features_to_the_bit():
    """backbones/stages.py, what MPP and DINO run: at the backbone's grid, with nothing between the stages,
    exactly timm's `forward_features` (also checkpointed block by block); `patches` acts where a hook on
    `patch_embed` would."""
    from vitx.backbones.stages import forward_tokens

    backbone = _nano()
    x = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    assert torch.equal(forward_tokens(backbone, x), backbone.forward_features(x))

    def corrupt(t):  # (B, N, D)
        return t * 2.0 + 1.0

    hook = backbone.patch_embed.register_forward_hook(lambda module, args, out: corrupt(out))
    expected = backbone.forward_features(x)
    hook.remove()
    assert torch.equal(forward_tokens(backbone, x, patches=corrupt), expected)
    assert not torch.equal(expected, backbone.forward_features(x))
    backbone.set_grad_checkpointing(True)
    backbone.train()  # (no dropout or drop-path in vit-nano/4: still deterministic)
    assert torch.equal(forward_tokens(backbone, x), backbone.forward_features(x))


def test_positions_at_another_grid_are_timms_dynamic_size_or_the_callers_resampling():
    from vitx.backbones.stages import add_positions, embed_patches, forward_tokens

    backbone = _nano()
    dynamic = vitx.create_backbone("vit-nano/4", dynamic_img_size=True).eval()  # timm resamples per input size
    dynamic.load_state_dict(backbone.state_dict())
    small = torch.randn(2, 3, 8, 12, generator=torch.Generator().manual_seed(2))  # a 2x3 grid of a 4x4 table
    assert torch.equal(forward_tokens(backbone, small), dynamic.forward_features(small))
    assert torch.equal(forward_tokens(dynamic, small), dynamic.forward_features(small))  # (B, h, w, D) patches
    x, grid = embed_patches(backbone, small)
    assert x.shape == (2, 6, 64) and grid == (2, 3)
    pos = backbone.pos_embed.detach()

    def nearest(table, grid, prefix):  # a caller's own resampling: (1, prefix + G·G, D) → (1, h·w, D)
        side = table[:, prefix:].reshape(1, 4, 4, -1).permute(0, 3, 1, 2)
        out = F.interpolate(side, size=grid, mode="nearest")
        return out.permute(0, 2, 3, 1).reshape(1, grid[0] * grid[1], -1)

    tokens = add_positions(backbone, x, grid, resample=nearest)  # (B, 1 + 6, D)
    assert tokens.shape == (2, 7, 64)
    assert torch.equal(tokens[:, 0], (backbone.cls_token + pos[:, :1]).expand(2, -1, -1)[:, 0])
    assert torch.equal(tokens[:, 1:], x + nearest(pos, (2, 3), 1))


def test_another_layout_runs_its_own_forward_with_a_hook_and_refuses_other_grids():
    from timm.models.vision_transformer import VisionTransformer

    from vitx.backbones.stages import forward_tokens, staged

    class Own(VisionTransformer):  # a user's override: vitx must not assume timm's stages
        def forward_features(self, x):
            return super().forward_features(x) * 0.5

    torch.manual_seed(0)
    own = Own(img_size=16, patch_size=4, embed_dim=32, depth=1, num_heads=2, num_classes=0).eval()
    assert not staged(own) and staged(_nano())
    x = torch.randn(2, 3, 16, 16)
    assert torch.equal(forward_tokens(own, x), own.forward_features(x))
    hook = own.patch_embed.register_forward_hook(lambda module, args, out: torch.zeros_like(out))
    expected = own.forward_features(x)  # (B, 1 + N, D): its own forward, patch embeddings zeroed
    hook.remove()
    assert torch.equal(forward_tokens(own, x, patches=torch.zeros_like), expected)
    assert not own.patch_embed._forward_hooks  # the hook is gone
    own.patch_embed.strict_img_size = False
    with pytest.raises(VitxError, match="cannot resample its positions"):
        forward_tokens(own, torch.randn(1, 3, 8, 8))

"""Packed crops (vitx/backbones/packing.py): each image's crops as one sequence with a block-diagonal mask give the
tokens, and DINO the loss and gradients, of a forward per crop size, in fp32 on the CPU; stochastic depth stays
per crop."""
import pytest
import torch

import vitx
from vitx.backbones.packing import _per_crop, block_mask, forward_packed
from vitx.backbones.stages import forward_tokens

TOLERANCE = 1e-5  # fp32: only the summation order of the larger kernels differs


def _crops(batch: int, seed: int = 0) -> list[torch.Tensor]:
    """2 global 16 px and 4 local 8 px crops of each of `batch` images: [(B, 3, S, S)] per crop."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, 3, 16, 16, generator=g) for _ in range(2)] + \
        [torch.randn(batch, 3, 8, 8, generator=g) for _ in range(4)]


def test_the_mask_keeps_each_crop_to_itself():
    mask = block_mask([2, 3], torch.device("cpu"))
    assert mask.tolist() == [[True, True, False, False, False], [True, True, False, False, False],
                             [False, False, True, True, True], [False, False, True, True, True],
                             [False, False, True, True, True]]


def test_packed_tokens_are_the_separate_forwards_tokens():
    torch.manual_seed(0)
    backbone = vitx.create_backbone("vit-micro/4", img_size=16).eval()
    backbone.patch_embed.strict_img_size = False
    views = _crops(3)
    glob, local = torch.cat(views[:2]), torch.cat(views[2:])  # (2·B, 3, 16, 16), (4·B, 3, 8, 8)
    with torch.no_grad():
        separate = [forward_tokens(backbone, glob), forward_tokens(backbone, local)]  # (6, 17, D), (12, 5, D)
        both = forward_packed(backbone, [glob, local], batch=3)  # one row of 2·17 + 4·5 tokens per image
        locals_only = forward_packed(backbone, [local], batch=3)
    assert [t.shape for t in both] == [t.shape for t in separate] == [(6, 17, 128), (12, 5, 128)]
    diff = max(float((a - b).abs().max()) for a, b in zip(both + locals_only, separate + separate[1:]))
    assert diff < TOLERANCE, diff


def _dino(packed: str, drop_path: float = 0.0):
    torch.manual_seed(0)
    backbone = vitx.create_backbone("vit-micro/4", img_size=16, drop_path_rate=drop_path)
    return vitx.create_objective("dino", backbone, None, out_dim=64, hidden_dim=32, bottleneck_dim=16,
                                 local_crops=4, ibot=0.5, koleo=0.1, packed=packed)


@pytest.mark.parametrize("packed", ["local", "all"])
def test_dinos_loss_and_gradients_packed_are_those_unpacked(packed):
    views = _crops(4)
    results = {}
    for how in ("off", packed):
        obj = _dino(how).train()
        torch.manual_seed(1)  # iBOT's masks
        out = obj({"views": views})
        out["loss"].backward()
        grads = torch.cat([p.grad.flatten() for p in obj.backbone.parameters()])
        results[how] = (out, grads, obj.criterion.center.clone())
    (unpacked, grads, center), (out, packed_grads, packed_center) = results.values()
    for key in ("loss", "dino_loss", "ibot_loss", "koleo_loss", "teacher_entropy"):
        assert abs(float(out[key].detach() - unpacked[key].detach())) < TOLERANCE, key
    assert float((packed_grads - grads).abs().max()) < TOLERANCE
    assert torch.equal(packed_center, center)  # the teacher is never packed: its centre moves the same


def test_stochastic_depth_drops_a_crop_not_the_whole_row():
    from timm.layers import DropPath

    torch.manual_seed(0)
    lengths = [3, 5, 2]
    branch = torch.ones(400, sum(lengths), 1)  # (B, L, 1)
    kept = _per_crop(branch, DropPath(0.5).train(), lengths)[..., 0]  # (B, L): 0, or 2 where kept (scaled by 1/0.5)
    crops = kept.split(lengths, dim=1)
    assert all(bool((c == c[:, :1]).all()) for c in crops)  # a crop's tokens share their draw
    first = torch.stack([c[:, 0] for c in crops], 1)  # (B, 3) each crop's draw
    assert set(first.unique().tolist()) == {0.0, 2.0}
    assert 0.4 < float((first > 0).float().mean()) < 0.6  # kept with probability 1 − p
    assert bool((first[:, 0] != first[:, 1]).any())  # crops of one image drawn apart


def test_dino_packed_with_stochastic_depth_trains():
    obj = _dino("all", drop_path=0.2).train()
    out = obj({"views": _crops(2)})
    out["loss"].backward()
    assert torch.isfinite(out["loss"]) and obj.backbone.blocks[-1].mlp.fc1.weight.grad.abs().sum() > 0

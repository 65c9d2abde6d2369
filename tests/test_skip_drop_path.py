"""Stochastic depth that skips its dropped samples (issue 50, DINOv2's Block): the branch computed on the kept
subset only equals the masked computation on the same subset, the estimator is unbiased, the compute shrinks to
the subset, only blocks above rate 0.1 skip, and the option runs end to end (recorded, said, refused where
packed crops or a frozen backbone make it meaningless)."""
from __future__ import annotations

import json

import pytest
import torch

from vitx import create_backbone
from vitx.backbones.droppath import SkippingBlock, set_drop_path, set_drop_path_mode, skip_dropped

from .helpers import as_flags, tiny, vitx_cli


def _branch(block):
    return lambda t: block.ls2(block.mlp(block.norm2(t)))


def test_skipping_equals_masking_on_the_same_subset_forward_and_backward():
    torch.manual_seed(0)
    block = create_backbone("vit-nano/4", depth=2).blocks[1].train()
    x = torch.randn(10, 17, 64, requires_grad=True)  # (B, N, D)
    keep = torch.tensor([7, 0, 3, 9, 4, 1])  # 6 of 10 kept: scale 10/6
    skipped = skip_dropped(x, _branch(block), rate=0.4, keep=keep)
    mask = torch.zeros(10)
    mask[keep] = 10 / 6
    masked = x + _branch(block)(x) * mask[:, None, None]  # timm's DropPath with this draw
    # the same rows through the same layers (a sub-batch of the same matmuls: equal to float rounding)
    torch.testing.assert_close(skipped, masked, rtol=0, atol=1e-6)
    dropped = [i for i in range(10) if i not in keep.tolist()]
    assert torch.equal(skipped[dropped], x[dropped])  # a dropped sample passes through untouched
    g_skip = torch.autograd.grad(skipped.square().sum(), [x, block.mlp.fc1.weight])
    g_mask = torch.autograd.grad(masked.square().sum(), [x, block.mlp.fc1.weight])
    for a, b in zip(g_skip, g_mask):  # sums over fewer rows in another order: equal to fp32 rounding of the norm
        assert float((a - b).norm() / b.norm()) < 1e-6


def test_a_skipping_blocks_training_forward_computes_the_kept_rows_only_and_equals_the_masked_block(monkeypatch):
    """The block itself, in training: its branches' layers see the subset's S rows (hooks), and its output is
    timm's Block with DropPath drawing the same samples (the permutation fixed)."""
    from timm.models.vision_transformer import Block

    torch.manual_seed(0)
    backbone = create_backbone("vit-nano/4", depth=2)
    set_drop_path(backbone, 0.4, mode="skip")  # block 1 at 0.4: skips
    block = backbone.blocks[1].train()
    assert type(block) is SkippingBlock
    seen = []
    for layer in (block.attn.qkv, block.mlp.fc1):
        layer.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[0]))
    order = torch.tensor([4, 1, 7, 0, 9, 2, 3, 5, 6, 8])
    monkeypatch.setattr(torch, "randperm", lambda n, device=None: order[:n].clone())
    x = torch.randn(10, 17, 64)  # (B, N, D)
    skipped = block(x)
    assert seen == [6, 6]  # max(⌊10 · 0.6⌋, 1) rows through attention and the MLP
    keep = torch.zeros(10)
    keep[order[:6]] = 10 / 6  # DropPath's mask for the same samples, scaled as the subset is

    class Drawn(torch.nn.Module):  # timm's DropPath with this draw: the branch × the kept samples' scale
        def forward(self, branch):
            return branch * keep[:, None, None]

    block.__class__ = Block
    block.drop_path1, block.drop_path2 = Drawn(), Drawn()
    with torch.no_grad():
        masked = block(x)  # timm's own Block.forward
    torch.testing.assert_close(skipped.detach(), masked, rtol=0, atol=1e-5)


def test_the_subset_has_dinov2s_size_and_the_mean_is_the_undropped_output():
    calls = []

    def branch(t):  # (S, N, D): counts the rows it is given
        calls.append(t.shape[0])
        return t * 2.0

    x = torch.arange(10.0).reshape(10, 1, 1).expand(10, 3, 2).contiguous()
    torch.manual_seed(1)
    outs = torch.stack([skip_dropped(x, branch, rate=0.35) for _ in range(3000)])
    assert set(calls) == {6}  # max(⌊10 · 0.65⌋, 1): the dropped 4 are never computed
    kept = (outs[:, 1:, 0, 0] != x[1:, 0, 0]).float()  # (draws, B − 1): whose branch was added (sample 0 is 0)
    frequency = kept.mean(0)  # each sample kept 6 times in 10: binomial s.d. over 3000 draws ≈ 0.009
    assert bool(((frequency - 0.6).abs() < 0.04).all()), frequency
    ratios = torch.unique((outs[:, 1:, 0, 0] / x[1:, 0, 0]).round(decimals=4))  # x, or x + (10/6) · 2x: B/S
    torch.testing.assert_close(ratios, torch.tensor([1.0, 1 + 2 * 10 / 6]), rtol=0, atol=1e-4)
    mean = outs.mean(0)
    torch.testing.assert_close(mean, x + 2 * x, rtol=0.05, atol=0.05)  # unbiased: B/S × P(kept) = 1
    assert skip_dropped(torch.ones(4, 1, 1), branch, rate=0.99).sum() == 4 + 4 * 2  # at least one sample, × 4/1
    assert calls[-1] == 1


def test_only_blocks_above_a_tenth_skip_with_the_same_weights_and_evaluation():
    from timm.models.vision_transformer import Block

    backbone = create_backbone("vit-nano/4", depth=5)
    keys = list(backbone.state_dict())
    set_drop_path(backbone, 0.3, mode="skip")  # rates 0, .075, .15, .225, .3
    assert [type(b) for b in backbone.blocks] == [Block, Block, SkippingBlock, SkippingBlock, SkippingBlock]
    assert list(backbone.state_dict()) == keys
    x = torch.randn(3, 3, 16, 16)
    backbone.eval()
    skipped_eval = backbone.forward_features(x)
    copy = __import__("copy").deepcopy(backbone)
    set_drop_path(copy, 0.4)  # a copy keeps its original's mode: no mode given, still skipping
    assert [type(b) for b in copy.blocks][-1] is SkippingBlock
    set_drop_path(copy, 0.0)  # (DINO's teacher: no stochastic depth, so timm's Block again)
    assert all(type(b) is Block for b in copy.blocks)
    set_drop_path_mode(backbone, "mask")
    assert all(type(b) is Block for b in backbone.blocks)
    assert torch.equal(backbone.forward_features(x), skipped_eval)  # evaluation never drops
    with pytest.raises(Exception, match="unknown drop-path mode"):
        set_drop_path_mode(backbone, "fast")


def test_a_specs_float32_rates_and_drop_paths_skip_the_same_blocks():
    """timm keeps a --model spec's drop_path_rate as float32 (0.3 over 4 blocks: 0.10000000149 for block 1):
    within rounding of 0.1 it counts as 0.1, as --drop-path's float64 rates do."""
    from vitx.backbones.droppath import block_rates, skips

    spec = create_backbone("vit-nano/4", drop_path_rate=0.3)
    given = create_backbone("vit-nano/4")
    set_drop_path(given, 0.3)
    assert block_rates(spec)[1] != 0.1 and block_rates(spec)[1] == pytest.approx(0.1)
    assert set_drop_path_mode(spec, "skip") == set_drop_path_mode(given, "skip") == [2, 3]
    assert skips(0.1 * 3 / 3) is False and skips(0.1001) is True


def test_the_header_says_how_many_a_forward_computes_and_when_nothing_is_dropped():
    from vitx.backbones.droppath import describe

    backbone = create_backbone("vit-nano/4")
    assert describe(backbone) is None  # no stochastic depth: no line
    set_drop_path(backbone, 0.3, mode="skip")
    assert describe(backbone, micro=16).endswith("a forward of 16 samples computes 11 of them at rate 0.3")
    assert describe(backbone, micro=1).endswith("(nothing dropped: DINOv2 keeps at least one; a larger micro-batch, "
                                                "or --drop-path-mode mask)")
    set_drop_path_mode(backbone, "mask")
    assert describe(backbone, micro=1) == ("stochastic depth: rates 0 → 0.3 over 4 blocks, timm's mask (every "
                                           "branch computed, the dropped ones zeroed)")


def test_skip_on_blocks_that_are_not_timms_says_so():
    from vitx.backbones.droppath import check_skip
    from vitx.errors import VitxError

    backbone = create_backbone("vit-nano/4")

    class Own(torch.nn.Module):
        def forward(self, x):
            return x

    backbone.blocks[1] = Own()
    with pytest.raises(VitxError, match="needs timm's Block; Own has its own forward"):
        check_skip(backbone, "skip")
    check_skip(backbone, "mask")  # (nothing to say: mask is timm's own)


def test_packed_crops_refuse_skipping_in_one_line():
    from vitx.backbones.packing import forward_packed
    from vitx.errors import VitxError

    backbone = create_backbone("vit-nano/4", depth=3, img_size=16)
    backbone.patch_embed.strict_img_size = False  # (local crops at 8px, as tests/test_packing.py)
    set_drop_path(backbone, 0.4, mode="skip")
    backbone.train()
    with pytest.raises(VitxError, match="packed crops cannot skip dropped samples"):
        forward_packed(backbone, [torch.randn(4, 3, 16, 16), torch.randn(4, 3, 8, 8)], batch=2)


def test_dino_refuses_packed_crops_with_skipping_blocks_when_built_and_its_teacher_never_skips():
    import vitx
    from vitx.errors import VitxError

    backbone = create_backbone("vit-micro/4", img_size=16, drop_path_rate=0.3)
    set_drop_path_mode(backbone, "skip")
    with pytest.raises(VitxError, match="packed=local cannot skip dropped samples"):
        vitx.create_objective("dino", backbone, None, out_dim=64, hidden_dim=32, bottleneck_dim=16, local_crops=4,
                              packed="local")
    dino = vitx.create_objective("dino", backbone, None, out_dim=64, hidden_dim=32, bottleneck_dim=16,
                                 local_crops=4)
    assert any(type(b) is SkippingBlock for b in dino.backbone.blocks)
    teacher = [m for name, m in dino.named_modules() if "teacher" in name and hasattr(m, "blocks")]
    assert teacher and not any(type(b) is SkippingBlock for t in teacher for b in t.blocks)


def test_pretraining_with_skip_runs_records_and_says_it(tmp_path):
    options = tiny(tmp_path, steps=2, save_every=2, eval_samples=16, drop_path=0.3, drop_path_mode="skip")
    result = vitx_cli("pretrain", *as_flags(options))
    assert result.returncode == 0, result.stderr
    # vit-nano/4: 4 blocks at 0, 0.1, 0.2, 0.3
    assert "stochastic depth: rates 0 → 0.3 over 4 blocks, the dropped samples skipped on blocks 2-3" in result.stdout
    assert "a forward of 16 samples computes 11 of them at rate 0.3" in result.stdout
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["run"]["drop_path_mode"] == "skip" and config["run"]["drop_path"] == 0.3
    low = vitx_cli("pretrain", *as_flags(tiny(tmp_path / "low", steps=1, drop_path=0.1, drop_path_mode="skip",
                                              eval_samples=16)))
    assert low.returncode == 0 and "skip asked, but no block is above 0.1" in low.stdout
    none = vitx_cli("pretrain", *as_flags(tiny(tmp_path / "none", steps=1, drop_path_mode="skip")))
    assert none.returncode != 0 and "the model drops no path" in none.stderr and "Traceback" not in none.stderr
    assert not (tmp_path / "none" / "run" / "config.json").exists()


def test_a_frozen_backbones_adapter_refuses_the_mode(tmp_path):
    result = vitx_cli("transfer", "--task", "embedded/digits", "--from", "scratch", "--model", "vit-nano/4",
                      "--adapter", "linear-probe", "--drop-path-mode", "skip", "--output-dir", str(tmp_path / "t"))
    assert result.returncode != 0 and "--drop-path-mode skip would have no effect" in result.stderr
    assert "Traceback" not in result.stderr


def test_transfer_and_bench_say_their_stochastic_depth(tmp_path):
    result = vitx_cli("transfer", "--task", "embedded/digits", "--from", "scratch", "--model", "vit-nano/4",
                      "--drop-path", "0.3", "--drop-path-mode", "skip", "--no-sweep", "--steps", "2", "--seeds", "0",
                      "--batch-size", "8", "--output-dir", str(tmp_path / "t"))
    assert result.returncode == 0, result.stderr
    assert ("embedded/digits: stochastic depth: rates 0 → 0.3 over 4 blocks, the dropped samples skipped on blocks "
            "2-3 (above 0.1: DINOv2's Block), masked below; a forward of 8 samples computes 5 of them") in result.stdout
    bench = vitx_cli("bench", "--device", "cpu", "--model", "vit-nano/4", "--batch-size", "8", "--steps", "1",
                     "--warmup", "1", "--set", "drop_path=0.3", "--set", "drop_path_mode=skip",
                     "--output", str(tmp_path / "bench.json"))
    assert bench.returncode == 0, bench.stderr
    said = json.loads((tmp_path / "bench.json").read_text())["stochastic_depth"]
    assert said.startswith("stochastic depth: rates 0 → 0.3") and said in bench.stdout


def test_a_transfer_recorded_before_the_mode_existed_ran_masked_and_a_skip_resume_is_one_line(tmp_path):
    import dataclasses

    from vitx.transfer.config import TransferConfig
    from vitx.transfer.folders import _changed

    assert _changed({"lr": 0.1}, {"lr": 0.1, "drop_path_mode": "skip"}) == ["drop_path_mode"]
    assert _changed({"lr": 0.1}, {"lr": 0.1, "drop_path_mode": "mask"}) == []
    options = ("transfer", "--task", "embedded/digits", "--from", "scratch", "--model", "vit-nano/4", "--no-sweep",
               "--steps", "2", "--seeds", "0", "--batch-size", "8", "--drop-path", "0.3",
               "--output-dir", str(tmp_path / "t"))
    assert vitx_cli(*options).returncode == 0
    for record in (tmp_path / "t").glob("**/*.json"):  # as a transfer recorded before the setting existed
        data = json.loads(record.read_text())
        if isinstance(data, dict) and "drop_path_mode" in json.dumps(data):
            data.pop("drop_path_mode", None)
            data.get("settings", {}).pop("drop_path_mode", None)
            record.write_text(json.dumps(data))
    assert "drop_path_mode" in {f.name for f in dataclasses.fields(TransferConfig)}
    resumed = vitx_cli(*options, "--drop-path-mode", "skip", "--resume")
    assert resumed.returncode != 0 and "Traceback" not in resumed.stderr, resumed.stderr
    assert "--drop-path-mode mask there, skip here" in resumed.stderr

"""The MAE plugin (plugins/vitx-mae), installed as a package and discovered through its entry point."""
import warnings

import pytest
import torch

import vitx
from vitx.registry import OBJECTIVES
from vitx.runner import pretrain

from .helpers import metrics

SMALL = "mae(decoder_dim=64, decoder_depth=1, decoder_heads=2)"


def test_discovered_through_its_entry_point():
    assert "mae" in OBJECTIVES.names()  # no flag, no import: the installed package's entry point
    assert OBJECTIVES.get("mae").source == "entry point mae (vitx-mae)"


def test_encoder_sees_only_the_visible_quarter():
    torch.manual_seed(0)
    backbone = vitx.create_backbone("vit-micro/4")  # 64 patches at 32px
    with warnings.catch_warnings(record=True) as caught:  # lightly's current API: no deprecated class is built
        warnings.simplefilter("always")
        mae = vitx.create_objective("mae", backbone, None, decoder_dim=64, decoder_depth=1, decoder_heads=2)
        lengths = []
        backbone.blocks[0].register_forward_pre_hook(lambda mod, args: lengths.append(args[0].shape[1]))
        out = mae({"image": torch.randn(2, 3, 32, 32)})
        out["loss"].backward()
    deprecated = [f"{w.category.__name__}: {w.message}" for w in caught
                  if issubclass(w.category, (FutureWarning, DeprecationWarning))
                  and ("lightly" in w.filename or "lightly" in str(w.message))]
    assert not deprecated, deprecated
    assert lengths == [1 + 16]  # [class] + 25% of 64
    assert torch.isfinite(out["loss"]) and set(out) == {"loss"}
    assert not any(k.startswith("encoder.") for k in mae.state_dict())  # the backbone is saved once
    assert {k.split(".")[0] for k in mae.head_state_dict()} == {"decoder_embed", "decoder", "decoder_pred"}
    assert all(p.grad is not None for n, p in mae.named_parameters() if p.requires_grad), "a parameter is unused"


def test_a_run_of_the_deprecated_decoder_is_refused_in_one_line():
    mae = vitx.create_objective("mae", vitx.create_backbone("vit-nano/4"), None, decoder_dim=32, decoder_depth=1,
                                decoder_heads=2)
    state = {("decoder.decoder_embed." + k[len("decoder_embed."):] if k.startswith("decoder_embed.") else k): v
             for k, v in mae.state_dict().items()}  # MAEDecoderTIMM's name for the embedding into the decoder
    with pytest.raises(vitx.VitxError, match="older vitx-mae"):
        mae.load_state_dict(state)


def test_mae_run_loss_falls_and_checkpoint_is_a_backbone(tmp_path):
    run = tmp_path / "run"
    pretrain({"objective": SMALL, "model": "vit-nano/4", "data": "embedded:leaves", "image_size": 32,
              "batch_size": 32, "steps": 30, "warmup_steps": 3, "lr": 1.5e-3, "save_every": 30, "log_every": 5,
              "eval_samples": 0, "workers": 1, "log_with": "none", "curves": False, "output_dir": str(run)})
    losses = [m["loss"] for m in metrics(run)]
    assert losses[-1] < losses[0] - 0.1, losses
    backbone = vitx.load_backbone(run)
    assert backbone(torch.randn(1, 3, 32, 32)).shape == (1, 64)

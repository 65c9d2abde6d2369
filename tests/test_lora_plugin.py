"""The LoRA plugin (plugins/vitx-lora): starts at the pre-trained model, trains only its factors and the head,
and saves a plain backbone with the update merged in."""
import copy
import json

import pytest
import torch

import vitx
from .helpers import vitx_cli
from vitx.adapters import AdaptContext, create_adapter, trainable_parameters
from vitx.safe_io import export_state, read_weights
from vitx.objectives.supervised import Supervised
from vitx.registry import ADAPTERS


def lora_model(spec="lora(rank=2)", classes=5):
    torch.manual_seed(0)
    backbone = vitx.create_backbone("vit-micro/4")  # 6 blocks, D = 128
    model = Supervised(copy.deepcopy(backbone), classes, head="linear")
    create_adapter(spec).apply(model, AdaptContext(image_size=32, num_classes=classes))
    return backbone, model


def test_discovered_through_its_entry_point():
    assert ADAPTERS.get("lora").source == "entry point lora (vitx-lora)"


def test_starts_at_the_pretrained_model_and_trains_only_factors_and_head():
    """init='peft' (B = 0) starts exactly at the pre-trained model; NOAH's init (B ~ N(0, 0.02²)) within ~1e-3."""
    backbone, model = lora_model("lora(rank=2, init='peft')")
    x = torch.randn(3, 3, 32, 32)
    assert torch.equal(model.backbone(x), backbone(x))  # B = 0
    _, noah = lora_model("lora(rank=2)")
    delta = noah.backbone.blocks[0].attn.qkv.delta()  # (3D, D): B A, entries of std √r · 0.02² = 5.7e-4
    assert 3e-4 < delta.std().item() < 1e-3
    assert torch.allclose(noah.eval().backbone(x), backbone.eval()(x), atol=0.05)
    d, r, blocks = 128, 2, 6
    per_block = r * (d + 3 * d)  # the fused qkv alone: D -> 3D (the published LoRA)
    assert trainable_parameters(model) == blocks * per_block + (d * 5 + 5)
    assert {n.rsplit(".", 1)[-1] for n, p in model.named_parameters() if p.requires_grad} == {
        "lora_a", "lora_b", "weight", "bias"}
    assert all(n.startswith("head.") for n, p in model.named_parameters()
               if p.requires_grad and not n.endswith(("lora_a", "lora_b")))


def test_the_default_is_the_published_lora_8_on_qkv_and_proj_is_an_option():
    """`lora(rank=8)` on ViT-B/16 trains NOAH's and V-PETL Bench's 0.29M LoRA parameters (the fused qkv of each
    block, 12 × 8 × (768 + 2304)); targets='qkv,proj' adds the attention output (442,368). Its published VTAB-1k
    row is in --compare's table, shown unasked for the same timm start."""
    from vitx.tasks.published import PUBLISHED, matching

    head = 768 * 10 + 10
    for spec, lora in (("lora(rank=8)", 294_912), ("lora(rank=8, targets='qkv,proj')", 442_368)):
        with torch.device("meta"):  # shapes only: the count, without allocating B/16
            adapted = Supervised(vitx.create_backbone("vit-b/16"), 10, head="linear")
        create_adapter(spec).apply(adapted, AdaptContext(image_size=224, num_classes=10))
        assert trainable_parameters(adapted) - head == lora, spec
    assert {n.rsplit(".", 2)[-2] for n, p in adapted.named_parameters() if n.endswith("lora_a")} == {"qkv", "proj"}
    assert create_adapter("lora").describe() == "lora(rank=8, alpha=8.0, targets='qkv', init='noah', dropout=0.1)"
    row = PUBLISHED["vit-b16-i21k-lora"]
    assert row.adapter == "lora" and row.per_task()["vtab/dtd"] == pytest.approx(0.694)
    assert sum(row.values) / 19 == pytest.approx(72.25, abs=0.005)  # V-PETL Bench's mean over the 19 tasks
    assert [r.name for r in matching("timm:vit_base_patch16_224.orig_in21k", "lora")] == ["vit-b16-i21k-lora"]


def test_a_at_initialisation_is_noahs_on_b16_and_the_other_inits_are_options():
    """One B/16 qkv (768 -> 2304) at r = 8. NOAH's VTAB LoRA (supernet_train_prompt.py:21-23 imports
    model/supernet_vision_transformer_timm.py, whose LoRA_a/LoRA_b, :225-228, its init_weights re-draws with
    trunc_normal_(std=.02), :462, :531, :686): A and B of std 0.020. loralib (layers.py:124-125): A kaiming on
    (r, in), std 1/√(3·768) = 0.0208, B = 0. NOAH's unused supernet module (model/module/qkv_super_prompt.py:28-30):
    A kaiming on (in, r), std 1/√(3·8) = 0.204, B = 0."""
    from vitx_lora import LoRALinear

    torch.manual_seed(0)
    expected = {"noah": (0.02, 0.02), "peft": (1 / (3 * 768) ** 0.5, 0.0), "noah-supernet": (1 / (3 * 8) ** 0.5, 0.0)}
    for init, (a_std, b_std) in expected.items():
        layer = LoRALinear(torch.nn.Linear(768, 2304), rank=8, alpha=8.0, init=init)
        assert layer.lora_a.shape == (8, 768) and layer.lora_b.shape == (2304, 8)  # saved as (r, in), (out, r)
        assert layer.lora_a.std().item() == pytest.approx(a_std, rel=0.03), init
        assert layer.lora_b.std().item() == pytest.approx(b_std, rel=0.03, abs=1e-12), init
    assert expected["noah-supernet"][0] == pytest.approx(0.204, abs=5e-4)  # the 0.205: not what NOAH ran
    with pytest.raises(vitx.VitxError, match="lora init must be one of noah, peft, noah-supernet"):
        create_adapter("lora(init='xavier')")


def test_the_peft_preset_runs_lora_at_noahs_script_settings():
    """`--protocol peft --adapter lora` with nothing else given: NOAH's LoRA VTAB script (configs/LoRA/VTAB/
    slurm_train_lora_vtab.sh:22 `for LR in 0.001`, :12 WEIGHT_DECAY=0.0001, :36 --batch-size=64 --epochs=100) and the
    drop-path 0.1 its supernet_train_prompt.py:59 keeps; an explicit --lr wins; the header names the source."""
    from vitx.transfer.config import TransferConfig, describe_origins, protocol_origins, with_protocol

    cfg = TransferConfig(**with_protocol({"protocol": "peft", "adapters": ["lora"]})).validate()
    assert (cfg.optimizer, cfg.lr, cfg.weight_decay, cfg.batch_size, cfg.drop_path) == ("adamw", 1e-3, 1e-4, 64, 0.1)
    assert cfg.steps == round(100 * 1000 / 64)
    origins = protocol_origins(cfg)
    assert origins["lr"] == {"value": 1e-3, "from": origins["drop_path"]["from"]}
    assert "lora's reference, NOAH configs/LoRA/VTAB/slurm_train_lora_vtab.sh" in describe_origins(origins)
    mine = TransferConfig(**with_protocol({"protocol": "peft", "adapters": ["lora"], "lr": 5e-3})).validate()
    assert mine.lr == 5e-3 and "lr" not in protocol_origins(mine)
    assert with_protocol({"adapters": ["lora"]}) == {"adapters": ["lora"]}  # vtab: the paper's own defaults


def test_exported_weights_are_a_plain_backbone_with_the_same_outputs():
    backbone, model = lora_model("lora(rank=4, alpha=8, targets='qkv,proj')")
    model.eval()  # (the low-rank path's dropout off)
    for name, p in model.named_parameters():
        if name.endswith("lora_b"):
            torch.nn.init.normal_(p, std=0.05)  # as after some training
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state = export_state(model, state)
    plain = copy.deepcopy(backbone)
    plain.load_state_dict({k[len("backbone."):]: v for k, v in state.items() if k.startswith("backbone.")})
    x = torch.randn(2, 3, 32, 32)
    assert torch.allclose(plain(x), model.backbone(x), atol=1e-5)
    assert not torch.allclose(plain(x), backbone(x), atol=1e-3)  # the update is really in there


def test_bad_options_are_one_line_errors():
    for spec, message in [("lora(rank=0)", "rank must be an integer from 1 to 4096, got 0"),
                          ("lora(rank=True)", "rank must be an integer from 1 to 4096"),
                          ("lora(rank=100000)", "rank must be an integer from 1 to 4096, got 100000"),  # (memory)
                          ("lora(alpha='x')", "alpha must be a positive finite number"),
                          ("lora(alpha=1e400)", "alpha must be a positive finite number, got inf"),
                          ("lora(targets='nothing')", "no nn.Linear of the backbone is named nothing \\(its "
                                                      "names: qkv, proj, fc1, fc2\\)$"),
                          ("lora(targets='qvk,proj')", "lora targets: no nn.Linear of the backbone is named qvk \\(its "
                                                       "names: qkv, proj, fc1, fc2\\)$"),
                          ("lora(rank=128)", "lora rank 128 is not below the width of blocks.0.attn.qkv "
                                             "\\(128 in, 384 out\\): the update would not be low-rank; give rank "
                                             "below 128"),
                          ("lora(dropout=1)", "dropout must be a number in \\[0, 1\\)")]:
        with pytest.raises(vitx.VitxError, match=message):
            lora_model(spec)


def test_transfer_with_lora_saves_a_loadable_backbone(tmp_path, pretrained_run):
    out = tmp_path / "out"
    proc = vitx_cli("transfer", "--task", "vtab/dsprites_loc", "--from", str(pretrained_run), "--shots", "40",
                    "--adapter", "lora(rank=4)", "--batch-size", "16", "--no-sweep", "--lr", "0.03", "--steps", "6",
                    "--test-samples", "64", "--workers", "0", "--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    task_dir = out / "vtab-dsprites_loc"
    assert json.loads((task_dir / "result.json").read_text())["adapters"] == ["lora(rank=4)"]
    final = task_dir / "final"
    tuned = vitx.load_backbone(final)  # strict: no LoRA keys left over
    start = read_weights(pretrained_run / "model.safetensors")
    saved = read_weights(final / "model.safetensors")
    assert set(saved) == set(start)
    changed = {k for k in start if not torch.equal(start[k], saved[k])}
    assert changed == {k for k in start if k.endswith("attn.qkv.weight")}  # the default adapts qkv alone
    assert tuned(torch.rand(1, 3, 16, 16)).shape == (1, 64)


def test_lora_transfer_resumes_to_the_same_weights(tmp_path, pretrained_run, monkeypatch):
    """Killed after its step-3 checkpoint, a LoRA run resumes (factors from the training state, not from the
    merged model.safetensors) and ends bit-identical to the run that was never stopped."""
    from vitx.runner.loop import Trainer
    from vitx.transfer import TransferConfig, transfer

    def cfg(name):
        return TransferConfig(start=str(pretrained_run), adapters=["lora(rank=2)"], shots=40, batch_size=8,
                              sweep=False, lr=0.03, steps=6, save_every=3, test_samples=16, workers=0,
                              output_dir=str(tmp_path / name))

    transfer(cfg("whole"))
    save = Trainer.save

    def crash_after_step_3(self):
        path = save(self)
        if self.step_count == 3:
            raise RuntimeError("killed")
        return path

    monkeypatch.setattr(Trainer, "save", crash_after_step_3)
    with pytest.raises(RuntimeError, match="killed"):
        transfer(cfg("killed"))
    saved_steps = []

    def record(self):
        saved_steps.append(self.step_count)
        return save(self)

    monkeypatch.setattr(Trainer, "save", record)
    transfer(cfg("killed"), resume=True)
    assert saved_steps == [6]  # it continued from step 3, it did not start again
    whole = read_weights(tmp_path / "whole" / "vtab-dsprites_loc" / "final" / "model.safetensors")
    resumed = read_weights(tmp_path / "killed" / "vtab-dsprites_loc" / "final" / "model.safetensors")
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)

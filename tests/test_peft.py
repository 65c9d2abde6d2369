"""Parameter-efficient transfer methods (VPT shallow and deep, BitFit, SSF) and the --protocol peft preset: what
each trains, that the saved weights read back to the same function, and the one-line errors."""
from __future__ import annotations

import json

import pytest
import torch

from vitx import VitxError, create_backbone
from vitx.adapters import AdaptContext, create_adapter, trainable_parameters
from vitx.objectives.supervised import Supervised

from .helpers import vitx_cli

D, K, DEPTH = 64, 5, 4  # vit-nano/4: width 64, 4 blocks; a 5-class head


def _adapted(spec: str) -> Supervised:
    torch.manual_seed(0)
    model = Supervised(create_backbone("vit-nano/4"), num_classes=K, head="linear")
    create_adapter(spec).apply(model, AdaptContext(image_size=16, num_classes=K))
    return model


@pytest.mark.parametrize("spec,trained", [
    ("bitfit", None),  # every bias of the backbone, counted below
    ("vpt(tokens=10)", 10 * D),  # one set of prompts
    ("vpt(tokens=10, deep=True)", DEPTH * 10 * D),  # a set per block
    ("ssf", None),
])
def test_each_method_trains_its_own_weights_and_the_head(spec, trained):
    model = _adapted(spec)
    head = D * K + K
    named = {n: p for n, p in model.backbone.named_parameters() if p.requires_grad}
    if spec == "bitfit":
        assert named and all(n.endswith(".bias") for n in named)
        trained = sum(p.numel() for n, p in model.backbone.named_parameters() if n.endswith(".bias"))
    if spec == "ssf":  # γ and β after patch_embed, 8 per block (norm1, qkv, proj, norm2, fc1, fc2), the final norm
        assert all(n.endswith(("ssf_scale", "ssf_shift")) for n in named)
        trained = 2 * (D + DEPTH * (D + 3 * D + D + D + 4 * D + D) + D)
    assert trainable_parameters(model) == trained + head
    assert model.head.weight.requires_grad


def test_vpt_prompts_are_prefix_tokens_that_change_the_features():
    x = torch.randn(2, 3, 16, 16)
    plain = _adapted("finetune")
    for deep in (False, True):
        model = _adapted(f"vpt(tokens=3, deep={deep})")
        assert model.backbone.num_prefix_tokens == 4  # [class] + 3 prompts: patch means skip them
        tokens = model.backbone.forward_features(x)  # (2, 1 + 3 + 16, 64)
        assert tokens.shape == (2, 20, D)
        assert not torch.allclose(model.backbone(x), plain.backbone(x))  # same weights, prompts added
        assert not model.backbone.training  # the frozen backbone stays in eval mode


def test_ssf_folds_into_a_plain_backbone():
    """The saved weights (scale and shift folded into each layer) are a plain vit-nano/4 computing the same
    function as the adapted model."""
    from vitx.safe_io import export_state

    model = _adapted("ssf").eval()
    with torch.no_grad():
        for p in (p for n, p in model.named_parameters() if "ssf_" in n):
            p.add_(torch.randn_like(p) * 0.1)  # as if trained
    state = export_state(model, model.state_dict())
    assert not any("ssf_" in k for k in state)
    plain = Supervised(create_backbone("vit-nano/4"), num_classes=K, head="linear").eval()
    plain.load_state_dict(state)  # strictly: nothing left over
    x = torch.randn(3, 3, 16, 16)
    torch.testing.assert_close(plain.backbone(x), model.backbone(x), rtol=1e-4, atol=1e-5)


def test_a_vpt_transfer_reads_back_predicts_and_refuses_export(tmp_path):
    """A deep-VPT transfer saves its prompts in model.safetensors; `--from` and `vitx predict` rebuild them (the
    same logits as the trained model), and `vitx export` says why timm cannot hold it."""
    from PIL import Image

    from vitx.runs.start import load_start
    from vitx.transfer import TransferConfig, transfer

    out = tmp_path / "t"
    transfer(TransferConfig(start="scratch", model="vit-nano/4", adapters=["vpt(tokens=4, deep=True)"], sweep=False,
                            lr=0.05, steps=4, shots=40, batch_size=8, test_samples=16, workers=0, curves=False,
                            output_dir=str(out)))
    final = out / "vtab-dsprites_loc" / "final"
    backbone = load_start(str(final))
    assert backbone.num_prefix_tokens == 5 and all(hasattr(b, "vpt_prompt") for b in backbone.blocks)
    from safetensors.torch import load_file

    saved = load_file(final / "model.safetensors")
    assert all(torch.equal(v, saved[k]) for k, v in backbone.state_dict().items())
    Image.new("RGB", (64, 64), (255, 255, 255)).save(tmp_path / "white.png")
    proc = vitx_cli("predict", str(out), str(tmp_path / "white.png"), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = vitx_cli("export", str(out), "--to", str(tmp_path / "exported"))
    assert proc.returncode == 2 and "was transferred with VPT: its prompt tokens have no place in timm's ViT" in \
        proc.stderr and "Traceback" not in proc.stderr


def test_the_peft_protocol_fills_what_is_not_given():
    from vitx.transfer.config import TransferConfig, with_protocol

    chosen = with_protocol({"protocol": "peft", "shots": 200, "lr": 0.01})
    cfg = TransferConfig(**chosen).validate()
    assert (cfg.optimizer, cfg.lr, cfg.weight_decay, cfg.batch_size, cfg.grad_clip, cfg.sweep) == \
        ("adamw", 0.01, 1e-4, 64, 0.0, False)
    assert cfg.steps == round(100 * 200 / 64) and cfg.warmup == 0.1  # 100 epochs of the 200 images
    assert with_protocol({"protocol": "peft", "steps": 7})["steps"] == 7
    assert with_protocol({"lr": 0.5}) == {"lr": 0.5}  # vtab: the defaults are the paper's


@pytest.mark.parametrize("spec,needle", [
    ("vpt(tokens=0)", "vpt tokens must be an integer from 1 to 1024 (VPT sweeps up to 200), got 0"),
    ("vpt(tokens=100000)", "vpt tokens must be an integer from 1 to 1024"),  # (it grew to 9 GB, deaf to SIGTERM)
    ("vpt(deep=2)", "vpt deep must be True or False, got 2"),
    ("bitfit(rank=2)", "adapter 'bitfit' has no option 'rank' (its options: none)"),
    ("fewshot(reg='a')", "fewshot reg must be a positive number (big_vision's 1024), got 'a'"),  # (a traceback)
    ("fewshot(reg=-1)", "fewshot reg must be a positive number (big_vision's 1024), got -1"),  # (ran at 19.7%)
])
def test_bad_method_options_are_one_line(spec, needle, tmp_path):
    proc = vitx_cli("transfer", "--from", "scratch", "--model", "vit-nano/4", "--adapter", spec,
                    "--output-dir", str(tmp_path / "t"))
    assert proc.returncode == 2 and needle in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_bad_protocol_is_one_line(tmp_path):
    proc = vitx_cli("transfer", "--protocol", "lora", "--output-dir", str(tmp_path / "t"))
    assert proc.returncode == 2 and proc.stderr.strip() == "error: --protocol must be one of vtab, peft, got 'lora'"


def test_a_prompted_backbone_is_recorded_resized_and_read_back(tmp_path):
    """The prompts are in the backbone's record: a resize keeps them (the position embeddings interpolated over
    the patches alone), and a saved prompted backbone is rebuilt from its record alone."""
    from vitx.adapters import resize_backbone
    from vitx.safe_io import save_weights
    from vitx.runs.folder import load_backbone

    model = _adapted("vpt(tokens=3, deep=True)")
    backbone = model.backbone
    assert backbone.vitx_record["prompts"] == {"tokens": 3, "deep": True}
    bigger = resize_backbone(backbone, 32)
    assert bigger.num_prefix_tokens == 4 and bigger.pos_embed.shape == (1, 1 + 64, D)
    assert torch.equal(bigger.blocks[2].vpt_prompt, backbone.blocks[2].vpt_prompt)
    assert bigger(torch.randn(2, 3, 32, 32)).shape == (2, D)
    run = tmp_path / "run"
    run.mkdir()
    save_weights(backbone.state_dict(), run / "model.safetensors")
    (run / "config.json").write_text(json.dumps({"backbone": backbone.vitx_record}))
    again = load_backbone(run).eval()
    x = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(again(x), backbone.eval()(x))


def _peft(adapter: str, **given):
    from vitx.transfer.config import TransferConfig, with_protocol

    return TransferConfig(**with_protocol({"protocol": "peft", "adapters": [adapter], **given})).validate()


def test_vpt_under_peft_is_noahs_rerun_with_vpts_prompt_dropout():
    """`--protocol peft` runs VPT as NOAH's VPT VTAB script (configs/VPT/VTAB/slurm_train_vpt_vtab.sh:21
    `for LR in 0.001`, :12 WEIGHT_DECAY=0.0001, :34 --batch-size=64 --epochs=100 --drop_rate_prompt=0.1), and its
    prompts' dropout is VPT's VTAB runs' 0.1 (KMnP/vpt demo.ipynb: MODEL.PROMPT.DROPOUT "0.1"; vit.py:82)."""
    cfg = _peft("vpt(deep=True)")
    assert (cfg.optimizer, cfg.lr, cfg.weight_decay, cfg.batch_size, cfg.steps) == ("adamw", 1e-3, 1e-4, 64, 1562)
    assert create_adapter("vpt").describe() == "vpt(tokens=10, deep=False, dropout=0.1)"
    model = _adapted("vpt(tokens=3, deep=True)")
    x = torch.randn(2, 3, 16, 16)
    model.train()
    assert not model.backbone.blocks[0].training  # the frozen weights stay in eval mode
    torch.manual_seed(1)
    a = model.backbone(x)
    torch.manual_seed(2)
    assert not torch.allclose(a, model.backbone(x))  # the prompts' dropout, in training
    model.eval()
    torch.testing.assert_close(model.backbone(x), model.backbone(x))
    plain = _adapted("vpt(tokens=3, deep=True, dropout=0)").train()
    torch.testing.assert_close(plain.backbone(x), model.backbone(x))  # same seed, same prompts: eval = no dropout
    with pytest.raises(VitxError, match=r"vpt dropout must be a number in \[0, 1\), got 1.5"):
        create_adapter("vpt(dropout=1.5)")


def test_ssf_under_peft_takes_the_lr_and_weight_decay_of_ssfs_vtab_scripts():
    """SSF's scripts (dongzelian/SSF train_scripts/vit/vtab/cifar_100/train_ssf.sh:1 --nproc_per_node=2, :3
    --batch-size 32 --epochs 100, :4 --weight-decay 5e-5, :6 --lr 5e-3: the lr of 10 of the 19 VTAB scripts, the
    weight decay of 14, 2 × 32 = 64 images a step in all); an explicit setting wins."""
    cfg = _peft("ssf")
    assert (cfg.optimizer, cfg.lr, cfg.weight_decay, cfg.batch_size, cfg.steps, cfg.warmup) == \
        ("adamw", 5e-3, 5e-5, 64, 1562, 0.1)
    assert _peft("ssf", lr=2e-2, weight_decay=5e-2).lr == 2e-2


def test_bitfit_under_peft_has_no_reference_of_its_own_and_its_row_says_so():
    """The published BitFit row is VPT's "Bias" (tune_vtab.py:215-266: SGD, lr × weight decay per task): no one lr
    to take, so `--protocol peft` keeps the preset's (NOAH's shared AdamW 1e-3, weight decay 1e-4, batch 64, 100
    epochs), and the row beside the run names the differences."""
    from vitx.tasks.published import PUBLISHED, differences

    cfg = _peft("bitfit")
    assert (cfg.optimizer, cfg.lr, cfg.weight_decay, cfg.batch_size, cfg.steps) == ("adamw", 1e-3, 1e-4, 64, 1562)
    assert differences(PUBLISHED["vit-b16-i21k-bitfit"], cfg, create_adapter("bitfit")) == \
        ["optimizer adamw (row: sgd)", "sweep False (row: True)"]


def test_the_published_peft_rows_say_where_the_run_differs_from_their_setup():
    """The LoRA row's setup is NOAH's: a peft LoRA run with nothing else given has it; one under the vtab protocol
    or with init='peft' is told how it differs, in the results table's caption beside the row."""
    import io

    from rich.console import Console

    from vitx.tasks.published import PUBLISHED, differences
    from vitx.transfer.assemble import compare_with
    from vitx.transfer.config import TransferConfig
    from vitx.transfer.report import print_summary, summarise

    row = PUBLISHED["vit-b16-i21k-lora"]
    assert differences(row, _peft("lora"), create_adapter("lora")) == []
    loralib = "lora(init='peft', dropout=0)"
    assert differences(row, _peft(loralib, lr=5e-3), create_adapter(loralib)) == \
        ["lr 0.005 (row: 0.001)", "lora init peft (row: noah)", "lora dropout 0 (row: 0.1)"]
    vtab = TransferConfig(adapters=["lora"], sweep=False, steps=100).validate()
    assert differences(row, vtab, create_adapter("lora"))[:3] == \
        ["optimizer sgd (row: adamw)", "lr 0.01 (row: 0.001)", "weight_decay 0 (row: 0.0001)"]
    deep = differences(PUBLISHED["vit-b16-i21k-vpt-deep"], _peft("vpt"), create_adapter("vpt"))
    assert deep == ["optimizer adamw (row: sgd)", "sweep False (row: True)", "vpt deep False (row: True)"]

    results = [{"task": "vtab/dtd", "group": "natural", "test_top1": 0.6, "seconds": 1.0, "sweep": [], "chosen": None}]
    summary = summarise(results)
    for cfg, said in ((_peft("lora", compare=["vit-b16-i21k-lora"]), "this run has its setup (NOAH configs/LoRA"),
                      (_peft("lora", compare=["vit-b16-i21k-lora"], lr=0.01),
                       "this run differs from its setup (NOAH configs/LoRA/VTAB/slurm_train_lora_vtab.sh:12,22,36")):
        summary["compare"] = compare_with(cfg, results, summary)
        out = io.StringIO()
        print_summary(results, summary, Console(file=out, width=2000))
        text = " ".join(out.getvalue().split())
        assert said in text and "not in vitx's settings: the lr steps once per epoch" in text, text
    assert "lr 0.01 (row: 0.001)" in text

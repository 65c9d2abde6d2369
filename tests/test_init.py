"""`vitx pretrain --from` (formerly --init): a pre-training that continues. From a timm model folder with its
classifier (dropped, said), from a vitx run of the same objective with everything the objective owns (MAE's decoder: the first step's
loss is the source's last, not a new decoder's), from DINO's released checkpoint layout in safetensors (student,
head, teacher, centre), each part's source in the header and config.json; every --from that cannot be used is
one line and exit 2."""
from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from vitx.errors import VitxError

from .helpers import metrics, vitx_cli

timm = pytest.importorskip("timm")
# the plugins looked for, not imported: an import here, at collection, would register them outside the plugin
# loader (as built-in), and the entry-point tests of the same worker would see that
pytestmark = pytest.mark.skipif(not all(importlib.util.find_spec(p) for p in ("vitx_mae", "vitx_dino")),
                                reason="needs the vitx-mae and vitx-dino plugins (pip install -e plugins/vitx-*)")

MAE = "mae(decoder_dim=32, decoder_depth=1, decoder_heads=2)"
DINO = "dino(out_dim=64, hidden_dim=32, bottleneck_dim=16, local_crops=0)"
QUIET = {"workers": 0, "log_with": "none", "curves": False, "eval_samples": 0, "watch_every": 0}


def built(tmp_path, **options):
    """The run `vitx pretrain` would train (objective, EMA, record), built and not trained."""
    from vitx.runner.setup import build, resolve_config

    cfg, resume_from = resolve_config({**QUIET, "output_dir": str(tmp_path / "built"), **options}, False)
    return build(cfg, resume_from)


def flags(options: dict) -> list[str]:
    from .helpers import as_flags

    return as_flags({**QUIET, **options})


@pytest.fixture(scope="module")
def mae_run(tmp_path_factory):
    """A vit-nano/4 MAE on the shapes at 16px, trained until its loss levels off (40 steps of 32)."""
    from vitx.runner import pretrain

    out = tmp_path_factory.mktemp("mae") / "run"
    pretrain({**QUIET, "objective": MAE, "model": "vit-nano/4", "data": "embedded:shapes", "batch_size": 32,
              "steps": 40, "warmup_steps": 3, "lr": 2e-3, "log_every": 1, "save_every": 40, "output_dir": str(out)})
    return out


@pytest.fixture(scope="module")
def timm_folder(tmp_path_factory):
    """A 1-block ViT-Ti at 32px with timm's default 1000-class head, saved as timm saves it (save_for_hf)."""
    from timm.models import save_for_hf

    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", img_size=32, depth=1)
    folder = tmp_path_factory.mktemp("timm") / "vit"
    save_for_hf(model, str(folder), model_args={"img_size": 32, "depth": 1}, safe_serialization=True)
    return folder


def test_a_timm_folder_with_its_classifier_continues_and_says_the_head_is_dropped(timm_folder, tmp_path):
    out = tmp_path / "run"
    result = vitx_cli("pretrain", "--objective", MAE, "--from", str(timm_folder), "--image-size", "64", "--data",
                      "embedded:shapes", "--steps", "1", "--batch-size", "4", "--warmup-steps", "0",
                      *flags({"output_dir": str(out)}))
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert f"start: {timm_folder} (timm model folder: vit_tiny_patch16_224)" in lines
    assert f"  backbone: {timm_folder} (position embeddings resampled 2×2 → 4×4)" in lines
    assert "  decoder: new (a timm model folder: vit_tiny_patch16_224 holds none)" in lines
    assert "  head: dropped (timm's 1000-class classifier, not used by mae)" in lines
    config = json.loads((out / "config.json").read_text())
    assert config["start"]["parts"]["head"] == "dropped (timm's 1000-class classifier, not used by mae)"
    assert config["backbone"]["overrides"]["num_classes"] == 0 and config["backbone"]["overrides"]["img_size"] == 64


def test_the_backbone_is_the_folders_even_where_the_objective_initialises_its_own(timm_folder, tmp_path):
    """MAE's masked ViT re-draws every weight of the backbone it is given: the start's are loaded after it."""
    from vitx.runs.start import load_start

    setup = built(tmp_path, objective=MAE, start=str(timm_folder), data="embedded:shapes")
    start = load_start(str(timm_folder), files=True).state_dict()
    for name, tensor in setup.objective.backbone.state_dict().items():
        assert torch.equal(tensor, start[name]), name


def test_a_mae_run_continues_with_its_decoder(mae_run, tmp_path):
    """Every tensor of the source's encoder and decoder, as they were; the first step's loss beside the source's
    last (today's new decoder: 2.4× it at the first step on this run)."""
    setup = built(tmp_path, objective=MAE, start=str(mae_run), data="embedded:shapes")
    heads, backbone = load_file(str(mae_run / "heads.safetensors")), load_file(str(mae_run / "model.safetensors"))
    state = setup.objective.state_dict()
    assert {k for k in state if not k.startswith("backbone.")} == set(heads)
    assert all(torch.equal(state[k], v) for k, v in heads.items())
    assert all(torch.equal(state[f"backbone.{k}"], v) for k, v in backbone.items())
    assert setup.record["start"]["parts"] == {"backbone": f"{mae_run} step 40", "decoder": f"{mae_run} step 40"}

    from vitx.runner import pretrain

    out = tmp_path / "continued"
    pretrain({**QUIET, "objective": MAE, "start": str(mae_run), "data": "embedded:shapes", "batch_size": 32,
              "steps": 2, "warmup_steps": 1, "lr": 2e-3, "log_every": 1, "save_every": 2, "output_dir": str(out)})
    source, continued = metrics(mae_run)[-1]["loss"], metrics(out)[0]["loss"]
    assert abs(continued / source - 1) < 0.2, (source, continued)
    assert json.loads((out / "config.json").read_text())["start"]["step"] == 40
    setup = built(tmp_path / "32px", objective=MAE, start=str(mae_run), data="embedded:shapes", image_size=32)
    assert setup.record["start"]["parts"] == {
        "backbone": f"{mae_run} step 40 (position embeddings resampled 4×4 → 8×8)",
        "decoder": f"{mae_run} step 40 (decoder.pos_embed resampled as the backbone's)"}
    assert setup.objective.decoder.pos_embed.shape == (1, 1 + 64, 32)


def test_a_dino_run_continues_with_its_head_teacher_and_centre(tmp_path):
    from vitx.runner import pretrain

    source = tmp_path / "dino"
    pretrain({**QUIET, "objective": DINO, "model": "vit-nano/4", "data": "embedded:shapes", "batch_size": 8,
              "steps": 2, "warmup_steps": 0, "save_every": 2, "output_dir": str(source)})
    setup = built(tmp_path, objective=DINO, start=str(source), data="embedded:shapes", batch_size=8)
    heads, state = load_file(str(source / "heads.safetensors")), setup.objective.state_dict()
    assert set(heads) == {k for k in state if not k.startswith("backbone.")}
    assert all(torch.equal(state[k], v) for k, v in heads.items())
    assert float(heads["criterion.center"].abs().sum()) > 0  # the centre moved in the source: it is its, not 0
    where = f"{source} step 2"
    assert setup.record["start"]["parts"] == {"backbone": where, "head": where, "teacher": where, "centre": where}


def test_a_runs_moving_average_continues_where_this_run_keeps_one(tmp_path):
    from vitx.runner import pretrain

    source = tmp_path / "ema"
    tiny = {**QUIET, "data": "embedded:shapes", "batch_size": 8, "steps": 2, "warmup_steps": 0, "save_every": 2}
    pretrain({**tiny, "model": "vit-nano/4", "ema_decay": 0.9, "output_dir": str(source)})
    setup = built(tmp_path / "a", start=str(source), data="embedded:shapes", ema_decay=0.99)
    average = load_file(str(source / "ema.safetensors"))
    ema = setup.ema.module.state_dict()
    assert all(torch.equal(ema[f"backbone.{k}"], v) for k, v in average.items())
    heads, state = load_file(str(source / "heads.safetensors")), setup.objective.state_dict()
    assert set(heads) == {k for k in state if k.startswith("head.")}  # the supervised head continues, every tensor
    assert all(torch.equal(state[k], v) for k, v in heads.items())
    assert all(torch.equal(ema[k], v) for k, v in load_file(str(source / "ema_heads.safetensors")).items())
    where = f"{source} step 2"
    assert setup.record["start"]["parts"] == {"backbone": where, "pre-logits": where, "classifier": where, "ema": where}
    setup = built(tmp_path / "b", start=str(source), data="embedded:shapes(classes=3)")
    parts = setup.record["start"]["parts"]
    assert parts["ema"] == f"not continued ({source} kept one: add --ema-decay to continue it)"
    # other data's classes: the classifier starts new, said; the pre-logits layer under it continues
    assert parts["pre-logits"] == where and torch.equal(setup.objective.head.pre_logits.fc.weight,
                                                        heads["head.pre_logits.fc.weight"])
    assert parts["classifier"] == "new (sized by other data: head.fc.bias is 10 there, 3 here)"
    assert not setup.objective.head.fc.weight.any()  # the paper's zero-initialised classifier
    # as many classes, other ones: the classifier's rows would mean the source's classes, so it starts new too
    setup = built(tmp_path / "c", start=str(source), data="embedded:digits")
    parts = setup.record["start"]["parts"]
    assert parts["classifier"] == "new (trained on other classes: class 0 is 'circle' there, '0' here)"
    assert parts["pre-logits"] == where and not setup.objective.head.fc.weight.any()  # zero, as any new one
    config = json.loads((source / "config.json").read_text())
    del config["data"]["class_names"]  # (an older or edited record): kept, and said that nothing was compared
    (source / "config.json").write_text(json.dumps(config))
    parts = built(tmp_path / "d", start=str(source), data="embedded:digits").record["start"]["parts"]
    assert parts["classifier"] == f"{where} (its class names unrecorded there: not compared)"
    config["data"]["num_classes"] = "ten"  # damaged: one line, as export and predict say it
    (source / "config.json").write_text(json.dumps(config))
    with pytest.raises(VitxError, match=r"config.json: data.num_classes must be an integer from 0 to \d+, got "
                                        r"\"ten\"$"):
        built(tmp_path / "e", start=str(source), data="embedded:digits")


def test_an_mpp_run_continues_with_its_head_and_mask_token(tmp_path):
    """MPP's colour-prediction head and [mask] embedding, every tensor the source's; a run of the same objective
    with another target is refused in one line (its head's size is an option)."""
    from vitx.runner import pretrain

    source = tmp_path / "mpp"
    pretrain({**QUIET, "objective": "mpp", "model": "vit-nano/4", "data": "embedded:shapes", "batch_size": 8,
              "steps": 2, "warmup_steps": 0, "save_every": 2, "output_dir": str(source)})
    setup = built(tmp_path, objective="mpp", start=str(source), data="embedded:shapes", batch_size=8)
    heads, state = load_file(str(source / "heads.safetensors")), setup.objective.state_dict()
    assert set(heads) == {"head.weight", "head.bias", "mask_token"}
    assert all(torch.equal(state[k], v) for k, v in heads.items())
    where = f"{source} step 2"
    assert setup.record["start"]["parts"] == {"backbone": where, "head": where, "mask token": where}
    with pytest.raises(VitxError, match=r"its head does not fit this run's mpp \(head.weight is 512×64 there, "
                                        r"4096×64 here\); give --objective \"mpp\" as it was trained$"):
        built(tmp_path / "b", objective="mpp(bits=4)", start=str(source), data="embedded:shapes", batch_size=8)


@pytest.fixture(scope="module")
def dino_checkpoint(tmp_path_factory):
    """DINO's full checkpoint layout (main_dino.py's save_dict, flattened), made from a vitx DINO on a ViT-Ti of 1
    block at 32px: DINOHead's `mlp.N` for lightly's `layers.N`, DDP's `module.` on the student, DINOLoss's (1, K)
    centre; teacher and centre made different from the student's so that each is seen to come from the file."""
    import vitx

    torch.manual_seed(0)
    backbone = vitx.create_backbone("timm:vit_tiny_patch16_224", img_size=32, depth=1)
    dino = vitx.create_objective("dino", backbone, None, out_dim=64, hidden_dim=32, bottleneck_dim=16, local_crops=0)
    state = {}
    for key, value in dino.state_dict().items():
        value = value.clone()
        if key.startswith("teacher."):
            value = value + 0.01 * torch.randn_like(value)
        renamed = (key.replace("backbone.", "student.module.backbone.", 1) if key.startswith("backbone.") else
                   key.replace("head.layers.", "student.module.head.mlp.", 1) if key.startswith("head.layers.") else
                   key.replace("head.", "student.module.head.", 1) if key.startswith("head.") else
                   key.replace("teacher.head.layers.", "teacher.head.mlp.") if key.startswith("teacher.head.") else
                   key if key.startswith("teacher.") else None)
        if renamed is not None:
            state[renamed] = value.contiguous()
    state["dino_loss.center"] = torch.randn(1, 64)
    root = tmp_path_factory.mktemp("dino")
    save_file(state, str(root / "dino_full_checkpoint.safetensors"))
    bare = {k[len("student.module.backbone."):]: v for k, v in state.items() if k.startswith("student.module.backbone.")}
    save_file(bare, str(root / "dino_vitt16_pretrain.safetensors"))
    return root


def test_dinos_checkpoint_layout_restores_student_head_teacher_and_centre(dino_checkpoint, tmp_path):
    file = dino_checkpoint / "dino_full_checkpoint.safetensors"
    setup = built(tmp_path, objective=DINO, start=str(file), data="embedded:shapes", batch_size=4)
    given, state = load_file(str(file)), setup.objective.state_dict()
    for key, value in given.items():
        ours = (key.replace("student.module.backbone.", "backbone.").replace("student.module.head.mlp.", "head.layers.")
                .replace("student.module.head.", "head.").replace("teacher.head.mlp.", "teacher.head.layers.")
                .replace("dino_loss.center", "criterion.center"))
        assert torch.equal(state[ours].reshape(value.shape), value), key
    assert not torch.equal(state["teacher.head.layers.0.weight"], state["head.layers.0.weight"])
    record = setup.record["start"]
    assert record["kind"].startswith("DINO checkpoint (student): a ViT 192 wide, 1 block, patch 16 at 32px, 3 "
                                     "attention heads of 64 channels")
    assert record["parts"] == {"backbone": str(file), "head": str(file), "teacher": str(file), "centre": str(file)}
    assert setup.preprocess.mean == pytest.approx((0.485, 0.456, 0.406))  # DINO's normalisation


def test_a_start_with_non_finite_weights_is_refused_naming_the_tensor(pretrained_run, tmp_path):
    """Every step from NaN weights is skipped as non-finite, and the run then blamed its lr: refused at the start."""
    import shutil

    run = shutil.copytree(pretrained_run, tmp_path / "nan", ignore=shutil.ignore_patterns("checkpoints"))
    state = load_file(run / "model.safetensors")
    state["blocks.0.attn.qkv.weight"][0, 0] = float("nan")
    save_file(state, run / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(VitxError, match=rf"^--from {run}: blocks.0.attn.qkv.weight holds NaN or infinite values"):
        built(tmp_path, start=str(run), data="embedded:shapes", batch_size=4)


def test_a_timm_folder_with_pickled_weights_only_says_so(tmp_path):
    """A folder saved without safe_serialization holds pytorch_model.bin: said as such (it was 'model.safetensors
    is not a readable safetensors file (No such file ...)')."""
    folder = tmp_path / "tf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architecture": "vit_tiny_patch16_224", "model_args": {}}))
    (folder / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(VitxError, match=r"has no model.safetensors \(weights found: pytorch_model.bin\); vitx reads "
                                        "safetensors only"):
        built(tmp_path, start=str(folder), data="embedded:shapes", batch_size=4)


def test_a_start_that_stopped_before_its_first_checkpoint_says_so(tmp_path):
    from vitx.runs.rundir import RUN_MARK

    (tmp_path / "early").mkdir()
    (tmp_path / "early" / RUN_MARK).write_text("")
    with pytest.raises(VitxError, match=r"is a vitx run that has no checkpoint yet \(it stopped before its first"):
        built(tmp_path, start=str(tmp_path / "early"), data="embedded:shapes", batch_size=4)


def test_a_resumed_objective_is_compared_by_what_it_means_not_its_spelling():
    from vitx.runner.config import PretrainConfig, merge_for_resume

    saved = PretrainConfig(objective="dino(local_crops=1,hidden_dim=32)")
    for same in ("dino(hidden_dim=32, local_crops=1)", "dino(local_crops=1, hidden_dim=32, momentum=0.996)"):
        assert merge_for_resume(saved, {"objective": same}).objective == saved.objective
    with pytest.raises(VitxError, match="cannot resume with different settings: --objective"):
        merge_for_resume(saved, {"objective": "dino(local_crops=2, hidden_dim=32)"})


def test_mean_and_std_given_to_a_pretraining_win_over_the_starts(tmp_path):
    """DINO and MAE normalise with ImageNet's statistics (docs/recipes.md): `--mean/--std` give them to a run from
    scratch (0.5 otherwise), and the run records them in config.json as it does the start's."""
    imagenet = dict(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    assert built(tmp_path / "a", data="embedded:shapes", batch_size=4).preprocess.mean == (0.5, 0.5, 0.5)
    setup = built(tmp_path / "b", data="embedded:shapes", batch_size=4, **imagenet)
    assert (setup.preprocess.mean, setup.preprocess.std) == (tuple(imagenet["mean"]), tuple(imagenet["std"]))


def test_dinos_bare_backbone_and_another_objective(dino_checkpoint, tmp_path):
    bare = dino_checkpoint / "dino_vitt16_pretrain.safetensors"
    setup = built(tmp_path / "a", objective=DINO, start=str(bare), data="embedded:shapes", batch_size=4)
    assert setup.record["start"]["parts"] == {"backbone": str(bare), "head": "new (the file holds a backbone only)",
                                             "teacher": "new (the file holds a backbone only)",
                                             "centre": "new (the file holds a backbone only)"}
    full = dino_checkpoint / "dino_full_checkpoint.safetensors"
    setup = built(tmp_path / "b", objective=MAE, start=str(full), data="embedded:shapes", batch_size=4)
    assert setup.record["start"]["parts"]["head, teacher, centre"] == "dropped (DINO's, not used by mae)"
    prefixed = tmp_path / "mae_visualize.safetensors"  # MAE's layout: the ViT under `model.`, its decoder beside it
    save_file({**{f"model.{k}": v for k, v in load_file(str(bare)).items()},
               "model.decoder_embed.weight": torch.zeros(2, 192)}, str(prefixed))
    setup = built(tmp_path / "c", start=str(prefixed), data="embedded:shapes", batch_size=4)
    assert setup.record["start"]["parts"]["other weights"] == "dropped (decoder_embed.weight: not the ViT's)"
    assert torch.equal(setup.objective.backbone.pos_embed, load_file(str(bare))["pos_embed"])


def test_the_readme_gives_the_conversion_that_the_refusal_gives():
    from pathlib import Path

    from vitx.runs.released import convert_line

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert convert_line(Path("dino_vitbase16_full_checkpoint.pth")) in readme


def one_line(result) -> str:
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_every_start_that_cannot_be_used_is_one_line(mae_run, dino_checkpoint, timm_folder, tmp_path):
    import shutil

    from timm.models import save_for_hf

    pth = tmp_path / "dino_vits16_pretrain.pth"
    pth.write_bytes(b"never read")
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage")
    not_vit = tmp_path / "linear.safetensors"
    save_file({"weight": torch.zeros(2, 2)}, str(not_vit))
    resnet = tmp_path / "resnet"
    save_for_hf(timm.create_model("resnet10t", num_classes=0), str(resnet), safe_serialization=True)
    broken_folder = tmp_path / "broken-timm"
    shutil.copytree(timm_folder, broken_folder)
    (broken_folder / "model.safetensors").write_bytes(b"\x00" * 10)
    listed = tmp_path / "listed"  # a config.json that is a JSON list
    listed.mkdir()
    (listed / "config.json").write_text("[1, 2]")
    broken_run = tmp_path / "broken-run"
    shutil.copytree(mae_run, broken_run)
    (broken_run / "heads.safetensors").write_bytes((mae_run / "heads.safetensors").read_bytes()[:100])
    run = ["--data", "embedded:shapes", "--steps", "1", "--output-dir", str(tmp_path / "out")]
    cases = [
        (["--from", str(tmp_path / "missing")], "no such file or folder; give a vitx run or checkpoint folder, a timm "
                                                "model folder (config.json and model.safetensors, as timm's "
                                                "save_for_hf writes it), a .safetensors file"),
        (["--from", str(pth)], "vitx does not unpickle checkpoints"),
        (["--from", str(text)], "is a file vitx does not read"),
        (["--from", str(corrupt)], "is not a readable safetensors file"),
        (["--from", str(not_vit)], "holds no Vision Transformer weights"),
        (["--from", str(resnet)], "is not a Vision Transformer"),
        (["--from", str(listed)], "config.json has no backbone record; not a vitx checkpoint"),
        (["--from", str(broken_folder)], "model.safetensors is not a readable safetensors file"),
        (["--objective", MAE, "--from", str(broken_run)], "heads.safetensors is not a readable safetensors file"),
        (["--objective", "mae(decoder_dim=16, decoder_depth=1, decoder_heads=2)", "--from", str(mae_run)],
         f"its decoder does not fit this run's mae (decoder_embed.weight is 32×64 there, 16×64 here); give "
         f"--objective \"{MAE}\" as it was trained"),
        (["--objective", "dino(out_dim=32, hidden_dim=32, bottleneck_dim=16, local_crops=0)", "--from",
          str(dino_checkpoint / "dino_full_checkpoint.safetensors")], "its head does not fit this run's dino"),
    ]
    for args, needle in cases:
        line = one_line(vitx_cli("pretrain", *args, *run))
        assert line.startswith("error: --from ") and needle in line, line
    line = one_line(vitx_cli("pretrain", "--from", str(pth), *run))
    assert "torch.load('" in line and "weights_only=True" in line and "st.save_file(" in line
    odd = tmp_path / "odd-cfg"  # a timm folder whose pretrained_cfg was edited: two means, zero stds
    shutil.copytree(timm_folder, odd)
    config = json.loads((odd / "config.json").read_text())
    for key, value, said in (("mean", [0.5, 0.5], "mean must be a list of 3 finite numbers, got [0.5, 0.5]"),
                             ("std", [0, 0, 0], "std must be a list of 3 positive finite numbers, got [0, 0, 0]")):
        (odd / "config.json").write_text(json.dumps({**config, "pretrained_cfg": {**config["pretrained_cfg"],
                                                                                  key: value}}))
        line = one_line(vitx_cli("pretrain", "--from", str(odd), *run))
        assert line == f"error: --from {odd}: {odd}/config.json: pretrained_cfg: {said}", line

"""`vitx export`: a run as a Hugging Face hub folder that plain timm loads (`local-dir:`) with the run's own
numbers: the same features, the same classifier and labels, the same preprocessing."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from .helpers import metrics, vitx_cli


def _images(size: int):
    import torch

    return torch.randn(5, 3, size, size, generator=torch.Generator().manual_seed(0))  # (B, 3, S, S)


def test_an_exported_pretraining_loads_in_timm_with_the_runs_features(pretrained_run, tmp_path):
    import timm
    import torch

    import vitx
    from vitx.safe_io import read_config

    out = tmp_path / "export"
    proc = vitx_cli("export", str(pretrained_run), "--to", str(out))
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in out.iterdir()} == {"README.md", "config.json", "model.safetensors", "curves.png"}
    config = read_config(pretrained_run)
    x = _images(config["preprocess"]["image_size"])
    ours = vitx.load_backbone(pretrained_run).eval()
    for options in ({}, {"num_classes": 0}):
        model = timm.create_model(f"local-dir:{out}", pretrained=True, **options).eval()
        with torch.no_grad():
            assert torch.allclose(model.forward_features(x), ours.forward_features(x), atol=1e-5)  # (B, 17, D)
            assert torch.allclose(model(x), ours(x), atol=1e-5)  # (B, D): the pooled [class] token
        assert model.num_classes == 0
    cfg = model.pretrained_cfg
    assert tuple(cfg["input_size"]) == (3, 16, 16) and cfg["crop_mode"] == "center"
    assert list(cfg["mean"]) == config["preprocess"]["mean"] and list(cfg["std"]) == config["preprocess"]["std"]

    card = (out / "README.md").read_text()
    val = metrics(pretrained_run)[-1]["val_top1"]
    assert f"| val_top1 | {val:.4g} |" in card and "pipeline_tag: image-feature-extraction" in card
    # the fixture ran from Python: the command is rebuilt from config.json's settings
    assert "vitx pretrain --objective supervised --model vit-nano/4 --data embedded:digits --steps 150 " \
        "--workers 0 --batch-size 64" in card and f"--output-dir {pretrained_run}" in card


def test_an_exported_transfer_keeps_its_classifier_and_labels(transfer_run, tmp_path):
    import timm
    import torch

    from vitx.predict import classify
    from vitx.runs.trained import load_classifier, resolve_run

    out, results = transfer_run
    folder = tmp_path / "export"
    assert vitx_cli("export", str(out), "--to", str(folder)).returncode == 0
    run = resolve_run(out)
    ours = load_classifier(run)
    x = _images(32)
    model = timm.create_model(f"local-dir:{folder}", pretrained=True).eval()
    features = timm.create_model(f"local-dir:{folder}", pretrained=True, num_classes=0).eval()
    with torch.no_grad():
        assert torch.allclose(model(x), classify(ours, x), atol=1e-5)  # (B, 16) logits
        assert torch.allclose(features(x), ours.backbone(x), atol=1e-5)  # (B, D)
    assert model.pretrained_cfg["label_names"] == run.class_names()[0] == [str(i) for i in range(16)]
    assert model.pretrained_cfg["crop_mode"] == "squash" and tuple(model.pretrained_cfg["input_size"]) == (3, 32, 32)
    card = (folder / "README.md").read_text()
    assert f"Test top-1 {results['tasks'][0]['test_top1']:.2%}" in card
    assert "vitx transfer --task vtab/dsprites_loc" in card

    # the same folder again: refused as it is not empty, replaced with --force
    proc = vitx_cli("export", str(out / "vtab-dsprites_loc"), "--to", str(folder))
    assert proc.returncode == 2 and "is not empty" in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert vitx_cli("export", str(out / "vtab-dsprites_loc"), "--to", str(folder), "--force").returncode == 0


def test_a_damaged_result_json_is_said_as_damaged_not_as_an_unfinished_transfer(transfer_run, tmp_path):
    import shutil

    out, _ = transfer_run
    task = shutil.copytree(out / "vtab-dsprites_loc", tmp_path / "t" / "vtab-dsprites_loc")
    said = f"error: {task / 'result.json'} is damaged (not a JSON object with a numeric test_top1)"
    for text in ("junk", '{"test_top1": "x"}'):
        (task / "result.json").write_text(text)
        for args in (["export", str(task), "--to", str(tmp_path / "e")], ["export", str(task / "final"), "--to",
                                                                        str(tmp_path / "e")]):
            proc = vitx_cli(*args)
            assert proc.returncode == 2 and proc.stderr.startswith(said) and len(proc.stderr.splitlines()) == 1, \
                proc.stderr
    assert not (tmp_path / "e").exists()


def test_a_run_started_by_the_command_records_it_in_its_card(mpp_run, tmp_path):
    from vitx.safe_io import read_config

    recorded = read_config(mpp_run)["command"]
    assert recorded.startswith("vitx pretrain --recipe recipes/cpu/pretrain-mpp.toml --set")
    assert vitx_cli("export", str(mpp_run), "--to", str(tmp_path)).returncode == 0
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["num_classes"] == 0 and "label_names" not in config  # MPP's patch predictor is not a classifier
    card = (tmp_path / "README.md").read_text()
    assert f"```bash\n{recorded}\n```" in card and "rebuilt" not in card


def test_push_offline_is_one_line_and_keeps_the_export(pretrained_run, tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as conftest sets it for every test: said here, as it is the point
    proc = vitx_cli("export", str(pretrained_run), "--to", str(tmp_path / "export"), "--push", "someone/tiny-vit")
    assert proc.returncode != 0
    assert len(proc.stderr.strip().splitlines()) == 1 and "offline" in proc.stderr and "someone/tiny-vit" in proc.stderr
    assert (tmp_path / "export" / "model.safetensors").is_file() and (tmp_path / "export" / "config.json").is_file()
    assert "hf-hub:someone/tiny-vit" in (tmp_path / "export" / "README.md").read_text()

    # "online" with no hub to reach (a closed port): the same, one line saying so
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    proc = vitx_cli("export", str(pretrained_run), "--to", str(tmp_path / "export"), "--force", "--push",
                    "someone/tiny-vit")  # --force: the first export is there
    assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1
    assert "cannot reach the Hugging Face hub" in proc.stderr and str(tmp_path / "export") in proc.stderr


def _copy_run(run: Path, to: Path) -> Path:
    """A copy of a session run (its checkpoints left out) that a test may write beside, or lose."""
    shutil.copytree(run, to, ignore=shutil.ignore_patterns("checkpoints"))
    return to


def _one_line(proc, fragment: str) -> None:
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and fragment in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_export_never_deletes_what_it_did_not_write(pretrained_run, tmp_path):
    """An earlier export with the user's own files beside it: refused without --force; with it only the export's
    files are replaced. (Once, any folder whose config.json had a `vitx` key was deleted whole.)"""
    folder = tmp_path / "export"
    assert vitx_cli("export", str(pretrained_run), "--to", str(folder)).returncode == 0
    (folder / "NOTES.md").write_text("mine")
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (folder / "results").mkdir()
    (folder / "results" / "r.txt").write_text("keep")
    (folder / "config.json").write_text('{"vitx": {}, "stale": true}')
    proc = vitx_cli("export", str(pretrained_run), "--to", str(folder))
    _one_line(proc, "is not empty (it holds .git, NOTES.md, README.md, ...)")
    assert "--force" in proc.stderr and json.loads((folder / "config.json").read_text())["stale"]

    assert vitx_cli("export", str(pretrained_run), "--to", str(folder), "--force").returncode == 0
    assert (folder / "NOTES.md").read_text() == "mine" and (folder / "results" / "r.txt").read_text() == "keep"
    assert (folder / ".git" / "HEAD").is_file() and "stale" not in json.loads((folder / "config.json").read_text())
    assert {p.name for p in folder.iterdir()} == {".git", "NOTES.md", "results", "README.md", "config.json",
                                                 "model.safetensors", "curves.png"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]  # no staging folder left beside it


def test_export_never_writes_over_the_run_it_exports(pretrained_run, tmp_path):
    """A folder holding the run (here an earlier export, as `vitx export proj/run --to proj` found it), the run
    itself or a folder inside it: refused with or without --force, the run left whole. `--to .` needs --force."""
    proj = tmp_path / "proj"
    run = _copy_run(pretrained_run, proj / "run")
    (proj / "config.json").write_text('{"vitx": {"version": "0.1.0"}}')  # an earlier export there
    before = sorted(p.name for p in run.iterdir())
    for to, fragment in ((proj, "holds the run being exported"), (run, "is the run being exported"),
                         (run / "export", "is inside the run being exported")):
        for force in ([], ["--force"]):
            _one_line(vitx_cli("export", str(run), "--to", str(to), *force), fragment)
    assert sorted(p.name for p in run.iterdir()) == before and (proj / "config.json").is_file()

    other = _copy_run(pretrained_run, tmp_path / "other")  # another run, or one of its checkpoints: its own files
    (other / "checkpoints" / "step_00000001").mkdir(parents=True)
    (other / "checkpoints" / "step_00000001" / "trainer_state.json").write_text('{"step": 1}')
    kept = {p.name: p.read_bytes() for p in other.iterdir() if p.is_file()}
    for to in (other, other / "checkpoints" / "step_00000001"):
        _one_line(vitx_cli("export", str(run), "--to", str(to), "--force"), "whose own config.json and weights the "
                  "export would replace (--force or not)")
    assert {p.name: p.read_bytes() for p in other.iterdir() if p.is_file()} == kept

    here = tmp_path / "here"
    here.mkdir()
    (here / "NOTES.md").write_text("mine")
    _one_line(vitx_cli("export", str(run), "--to", ".", cwd=here), "--to . is the current directory")
    assert vitx_cli("export", str(run), "--to", ".", "--force", cwd=here).returncode == 0
    assert (here / "NOTES.md").read_text() == "mine" and (here / "model.safetensors").is_file()


def test_push_uploads_the_exports_files_alone(pretrained_run, tmp_path, monkeypatch):
    """With --force among the user's files, --push uploads what the export wrote, not NOTES.md or .git."""
    import huggingface_hub

    from vitx.export import push

    calls = []

    class Hub:
        def create_repo(self, repo_id, **kw):
            return huggingface_hub.RepoUrl(f"https://huggingface.co/{repo_id}")

        def upload_folder(self, **kw):
            calls.append(kw)

    monkeypatch.setattr(push, "unreachable", lambda: None)  # (the hub answers, as the fake client does)
    monkeypatch.setattr(huggingface_hub, "HfApi", Hub)
    folder = tmp_path / "clone"
    folder.mkdir()
    (folder / "NOTES.md").write_text("private")
    proc = vitx_cli("export", str(pretrained_run), "--to", str(folder), "--force", "--push", "me/tiny")
    assert proc.returncode == 0, proc.stderr
    assert sorted(calls[0]["allow_patterns"]) == ["README.md", "config.json", "curves.png", "model.safetensors"]


def test_a_full_disk_is_one_line_and_leaves_no_staging_folder(pretrained_run, tmp_path, monkeypatch):
    """The disk fills up while the weights are written (safetensors raises its own error, not an OSError): one
    line saying so, `--to` not made, and the staging folder beside it removed."""
    import vitx.safe_io as safe_io
    from safetensors import SafetensorError

    def full(tensors, path, metadata=None):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safe_io, "save_file", full)
    out = tmp_path / "exports"
    out.mkdir()
    proc = vitx_cli("export", str(pretrained_run), "--to", str(out / "exp"))
    _one_line(proc, f"--to {out / 'exp'}: cannot write the export (no space left on the device)")
    assert list(out.iterdir()) == []  # neither the export nor its .exp.tmp-* staging folder


def test_a_tampered_config_is_one_line_not_a_model_card(pretrained_run, tmp_path):
    """config.json is read as flags are: an edited `"step": "abc"` (which the card printed as "steps: abc"), a
    learning rate that is not a number, and a file nested 200,000 deep (a RecursionError) are one line each,
    and nothing is exported."""
    run = _copy_run(pretrained_run, tmp_path / "run")
    config = json.loads((run / "config.json").read_text())
    cases = [({**config, "step": "abc"}, f'{run}/config.json: step must be a whole number of steps, got "abc"'),
             ({**config, "run": {**config["run"], "lr": "fast"}}, f'{run}/config.json: run.lr must be a number, '
                                                                  'got "fast"'),
             ("[" * 200_000 + "]" * 200_000, f"{run}/config.json is not valid JSON (nested too deeply to read")]
    for i, (tampered, said) in enumerate(cases):
        (run / "config.json").write_text(tampered if isinstance(tampered, str) else json.dumps(tampered))
        _one_line(vitx_cli("export", str(run), "--to", str(tmp_path / f"exp{i}")), said)
        assert not (tmp_path / f"exp{i}").exists()


def test_the_card_shows_the_figures_of_the_exported_step_not_those_logged_after_it(pretrained_run, tmp_path):
    """A run stopped between checkpoints has logged steps its weights do not hold: the card's figures are those
    of the exported step (the last checkpoint), never a later loss beside the earlier weights."""
    run = _copy_run(pretrained_run, tmp_path / "run")
    step = json.loads((run / "config.json").read_text())["step"]
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": step + 20, "loss": 9.5, "top1": 0.01}) + "\n")
    assert vitx_cli("export", str(run), "--to", str(tmp_path / "exp")).returncode == 0
    card = (tmp_path / "exp" / "README.md").read_text()
    assert f"At step {step} (training figures: the last logged step of the exported weights" in card
    assert "9.5" not in card and f"At step {step + 20}" not in card


def test_class_names_are_text_on_the_card_not_markup():
    """A class folder named `<script>cat` is shown as text where the hub renders the card as HTML."""
    from vitx.export.card import _labels

    assert _labels({"label_names": ["<script>cat", "dog & co"]}, True) == [
        "## Classes", "", "0: &lt;script&gt;cat, 1: dog &amp; co", ""]

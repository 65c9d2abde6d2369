"""`vitx predict`: image files in, top-k classes out, preprocessed as the run's evaluation was, so the run's own
test images saved as (lossless) PNG files give exactly the accuracy it reported."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from .helpers import TRANSFER, metrics, vitx_cli


def _save_test_pngs(folder: Path, limit: int, seed: int = 0) -> dict[str, int]:
    """The `limit` test images the transfer evaluated (`--test-samples`' seeded, class-stratified draw) as PNG
    files, spread over nested folders: {path: label}."""
    from vitx.data.draws import test_rows
    from vitx.tasks import get_task, open_full_splits

    _, test, _ = open_full_splits(get_task(TRANSFER["task"]))
    labels = {}
    for i, row in enumerate(test_rows(test, limit, seed)):
        image, label = test.load(int(row))
        path = folder / f"part{i % 3}" / ("deeper" if i % 2 else "") / f"{i:03d}.png"  # the i-th image drawn
        path.parent.mkdir(parents=True, exist_ok=True)
        image.save(path)
        labels[str(path)] = label
    return labels


def test_predict_on_the_test_images_as_png_gives_the_reported_accuracy(transfer_run, tmp_path):
    import torch

    from vitx.safe_io import read_weights
    from vitx.data import decode
    from vitx.tasks import get_task, open_full_splits
    from vitx.runs.trained import resolve_run

    out, results = transfer_run
    labels = _save_test_pngs(tmp_path / "images", TRANSFER["test_samples"])
    proc = vitx_cli("predict", str(out), str(tmp_path / "images"), "--json", "--top-k", "100", "--batch-size", "24")
    assert proc.returncode == 0, proc.stderr
    records = json.loads(proc.stdout)
    assert [r["image"] for r in records] == sorted(labels, key=lambda p: Path(p).relative_to(tmp_path).parts)
    assert all(len(r["predictions"]) == 16 for r in records)  # --top-k 100 is capped at the 16 classes
    correct = sum(r["predictions"][0]["class"] == labels[r["image"]] for r in records)
    reported = results["tasks"][0]["test_top1"]
    assert correct == round(reported * len(records)) and abs(correct / len(records) - reported) < 1e-6

    # every probability as the saved model gives it on the task's own (undecoded-to-file) images
    run = resolve_run(out)
    from vitx.runs import load_backbone

    backbone, head = load_backbone(run.path).eval(), read_weights(run.path / "heads.safetensors")
    _, test, _ = open_full_splits(get_task(TRANSFER["task"]))
    from vitx.data.draws import test_rows

    rows = test_rows(test, TRANSFER["test_samples"], 0)  # what the transfer evaluated, as _save_test_pngs saved
    index = {path: int(rows[int(Path(path).stem)]) for path in labels}
    pre = run.preprocess()
    x = torch.stack([pre.eval(decode(test.load(index[r["image"]])[0])) for r in records])  # (N, 3, 32, 32) uint8
    with torch.no_grad():
        probs = (backbone(pre.normalise(x)) @ head["head.weight"].T + head["head.bias"]).softmax(-1)  # (N, 16)
    got = torch.tensor([[p["probability"] for p in sorted(r["predictions"], key=lambda p: p["class"])]
                        for r in records])  # (N, 16) in class order
    assert torch.allclose(got, probs, atol=1e-6)
    names = run.class_names()[0]
    assert run.class_names()[1] and names == [str(i) for i in range(16)]  # dSprites' x-position bins, recorded
    assert all(p["label"] == names[p["class"]] for r in records for p in r["predictions"])


def test_predict_with_a_supervised_pretraining_gives_its_validation_accuracy(pretrained_run, tmp_path):
    from vitx.safe_io import read_config
    from vitx.data import open_source

    config = read_config(pretrained_run)
    val = open_source(config["data"]["spec"], "validation", image_size=config["preprocess"]["image_size"], seed=0)
    labels = []
    for i in range(len(val)):
        image, label = val.load(i)
        image.save(tmp_path / f"{i:03d}.png")
        labels.append(label)
    proc = vitx_cli("predict", str(pretrained_run), str(tmp_path), "--csv", "--top-k", "1", "--batch-size", "128")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split(",") for line in proc.stdout.splitlines()]
    assert rows[0] == ["image", "rank", "class", "label", "probability"] and len(rows) == len(val) + 1
    correct = sum(int(row[2]) == label and row[3] == val.class_names[label] for row, label in zip(rows[1:], labels))
    reported = [m for m in metrics(pretrained_run) if "val_top1" in m][-1]["val_top1"]
    assert abs(correct / len(val) - reported) < 1e-6


def test_a_corrupt_image_is_one_line_and_skip_corrupt_goes_past_it(transfer_run, tmp_path, monkeypatch):
    out, _ = transfer_run
    monkeypatch.setenv("COLUMNS", "240")  # the table's file names whole, however long the temporary folder's path
    _save_test_pngs(tmp_path, 2)
    (tmp_path / "part1" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    proc = vitx_cli("predict", str(out), str(tmp_path), "--json")
    assert proc.returncode != 0 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "broken.png" in proc.stderr
    assert "Traceback" not in proc.stderr

    proc = vitx_cli("predict", str(out), str(tmp_path), "--skip-corrupt", "--top-k", "3")
    assert proc.returncode == 0, proc.stderr
    skipped = [line for line in proc.stderr.splitlines() if line.startswith("skipped")]
    assert len(skipped) == 1 and "broken.png" in skipped[0]
    assert "top-3 predictions" in proc.stdout and "000.png" in proc.stdout and "001.png" in proc.stdout


def test_an_image_claiming_too_many_pixels_is_one_line_naming_it(transfer_run, tmp_path, monkeypatch):
    """Refused from its header before decoding (PIL's limit, lowered here; a 50 KB PNG claiming 20000x20000
    once took 1.9 GB), and --skip-corrupt goes past it."""
    from PIL import Image

    out, _ = transfer_run
    _save_test_pngs(tmp_path, 1)
    Image.new("1", (400, 300)).save(tmp_path / "huge.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100_000)
    proc = vitx_cli("predict", str(out), str(tmp_path), "--json")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "huge.png is 400x300 pixels, more than the 100,000 pixels" in proc.stderr
    proc = vitx_cli("predict", str(out), str(tmp_path), "--json", "--skip-corrupt")
    assert proc.returncode == 0 and [r["image"] for r in json.loads(proc.stdout)] == [str(tmp_path / "part0/000.png")]


NAN = float("nan")
TAMPERED = {  # a run's config.json edited on disk: (where, key, value) -> what the one line says
    "image_size as text": ("preprocess", "image_size", "16", "preprocess: image_size must be an integer, got '16'"),
    "huge image_size": ("preprocess", "image_size", 10 ** 9, "preprocess: image_size must be from 1 to 4096"),
    "negative image_size": ("preprocess", "image_size", -16, "preprocess: image_size must be from 1 to 4096"),
    "image_size not the model's": ("preprocess", "image_size", 32,
                                   "preprocess image_size 32 differs from the backbone's img_size 16"),
    "mean as text": ("preprocess", "mean", "x", 'preprocess: mean must be a list of 3 finite numbers, got "x"'),
    "zero std": ("preprocess", "std", [0, 0, 0], "preprocess: std must be a list of 3 positive finite numbers"),
    "NaN std": ("preprocess", "std", [NAN, 1, 1], "preprocess: std must be a list of 3 positive finite numbers"),
    "unknown preprocess key": ("preprocess", "colour", 1, "preprocess: unknown key 'colour'"),
    "unknown architecture argument": ("backbone.overrides", "foo", 1, "backbone.overrides: unknown argument 'foo'"),
    "img_size as text": ("backbone.overrides", "img_size", "16", "backbone.overrides: img_size must be an integer"),
    "a million blocks": ("backbone.overrides", "depth", 10 ** 6,
                         "backbone.overrides: depth must be an integer from 1 to 256, got 1000000"),
    "depth not the weights'": ("backbone.timm_kwargs", "depth", 8,
                               "backbone.timm_kwargs: depth is 8, but model.safetensors holds 4 blocks"),
    "width not the weights'": ("backbone.overrides", "embed_dim", 128, "embed_dim is 128, but model.safetensors"),
    "a billion classes": ("data", "num_classes", 10 ** 9, "data.num_classes must be an integer from 0 to 1000000"),
}


@pytest.mark.parametrize("case", list(TAMPERED))
def test_a_tampered_config_is_one_line_for_predict_and_export(pretrained_run, tmp_path, case):
    """Values read from disk are checked as flags are, and against the weights' shapes, before anything is
    built: once these were tracebacks, a hang (a million blocks built) or an export of the tampered values."""
    import shutil

    where, key, value, message = TAMPERED[case]
    run = tmp_path / "run"
    shutil.copytree(pretrained_run, run, ignore=shutil.ignore_patterns("checkpoints"))
    config = json.loads((run / "config.json").read_text())
    record = config
    for part in where.split("."):
        record = record[part]
    record[key] = value
    (run / "config.json").write_text(json.dumps(config))
    (tmp_path / "a.png").write_bytes((pretrained_run / "curves.png").read_bytes())
    for args in (["predict", str(run), str(tmp_path / "a.png")], ["export", str(run), "--to", str(tmp_path / "x")]):
        proc = vitx_cli(*args)
        assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
        line = proc.stderr.strip()
        assert line.startswith(f"error: {run}/config.json") and len(line.splitlines()) == 1
        assert message in line, line
    assert not (tmp_path / "x").exists()


def test_what_run_may_be(transfer_run, mpp_run, tmp_path):
    from vitx.errors import VitxError
    from vitx.runs.trained import resolve_run

    out, _ = transfer_run
    task = out / "vtab-dsprites_loc"
    assert resolve_run(out).path == resolve_run(task).path == resolve_run(task / "final").path == task / "final"
    assert resolve_run(out).task_dir == task and resolve_run(task / "final").result()["test_top1"] >= 0
    with pytest.raises(VitxError, match="sweep point"):
        resolve_run(next((task / "sweep").iterdir()))
    with pytest.raises(VitxError, match="not a vitx run"):
        resolve_run(tmp_path)
    for name, result in (("a", {"task": "vtab/a", "chosen": None, "test_top1": 0.5}), ("b", None)):  # closed form; unfinished
        (tmp_path / "many" / name).mkdir(parents=True)
        (tmp_path / "many" / name / "transfer.json").write_text("{}")
        if result:
            (tmp_path / "many" / name / "result.json").write_text(json.dumps(result))
    with pytest.raises(VitxError, match="holds 2 transferred tasks"):
        resolve_run(tmp_path / "many")
    with pytest.raises(VitxError, match="closed form"):
        resolve_run(tmp_path / "many" / "a")
    with pytest.raises(VitxError, match="has not finished"):
        resolve_run(tmp_path / "many" / "b")
    (tmp_path / "image.png").write_bytes(b"")
    proc = vitx_cli("predict", str(mpp_run), str(tmp_path / "image.png"))
    assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1
    assert "mpp objective, which has no classifier" in proc.stderr

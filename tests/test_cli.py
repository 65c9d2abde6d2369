"""The command line: user errors are one line and a non-zero exit, never a traceback."""
import pytest

from .conftest import run_vitx


def _one_line_error(result, needle):
    assert result.returncode != 0
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and lines[0].startswith("error: ")
    assert needle in lines[0]


@pytest.mark.parametrize("args,needle", [
    (["--model", "vit-b/17"], "unknown backbone 'vit-b/17'; did you mean vit-b/16"),
    (["--model", "vit-ti/16", "--image-size", "33"], "image size 33 is not divisible by the patch size 16"),
    (["--data", "/no/such/dir"], "data path /no/such/dir does not exist"),
    (["--optimizer", "lamb"], "--optimizer must be one of adamw, adam, sgd"),
    (["--precision", "fp16"], "fp16 mixed precision needs a GPU"),
    (["--batch-size", "10", "--grad-accum", "3"], "must divide evenly"),
    (["--objective", "supervised(colour=1)"], "no option(s) colour"),
])
def test_user_errors_are_one_line(tmp_path, args, needle):
    result = run_vitx("pretrain", "--output-dir", str(tmp_path / "run"), "--log-with", "none", *args)
    _one_line_error(result, needle)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_version_and_models():
    version = run_vitx("--version")
    assert version.returncode == 0 and version.stdout.startswith("vitx 0.")
    table = run_vitx("models")
    assert table.returncode == 0
    for name in ["vit-ti/16", "vit-s/16", "vit-s/32", "vit-b/16", "vit-b/32", "vit-b/8", "vit-l/16", "vit-l/32",
                 "vit-h/14", "r50+vit-b/16", "vit-micro/4", "vit-nano/4", "timm:"]:
        assert name in table.stdout, name
    assert "85.8M" in table.stdout and "630.8M" in table.stdout


def test_objectives_listed():
    listing = run_vitx("objectives")
    assert listing.returncode == 0
    assert "supervised" in listing.stdout and "mpp" in listing.stdout and "masked patch prediction" in listing.stdout

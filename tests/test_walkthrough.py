"""The README's walkthrough (pre-train → transfer → predict → export → load in timm) runs exactly as printed."""
import json
import os
import re
import shlex

from .helpers import ROOT, vitx_cli

README = (ROOT / "README.md").read_text()


def block(marker: str) -> str:
    """The fenced code block right after `<!-- walkthrough: marker -->`."""
    found = re.search(rf"<!-- walkthrough: {re.escape(marker)} -->\n```\w+\n(.*?)\n```", README, re.S)
    assert found, f"no walkthrough block '{marker}' in README.md"
    return found.group(1) + "\n"


def run_commands(marker: str, cwd) -> list[str]:
    outputs = []
    for line in block(marker).strip().splitlines():
        argv = shlex.split(line)
        assert argv[0] == "vitx", line
        proc = vitx_cli(*argv[1:], cwd=cwd)
        assert proc.returncode == 0, (line, proc.stderr[-2000:])
        outputs.append(proc.stdout)
    return outputs


def run_python(marker: str, cwd) -> dict:
    here = os.getcwd()
    namespace: dict = {}
    try:
        os.chdir(cwd)
        exec(compile(block(marker), f"README.md:{marker}", "exec"), namespace)
    finally:
        os.chdir(here)
    return namespace


def test_walkthrough_runs_as_printed(tmp_path):
    run_commands("train", tmp_path)
    task = tmp_path / "runs/walk/transfer/embedded-digits"
    result = json.loads((task / "result.json").read_text())
    assert result["test_samples"] == 360 and result["test_top1"] > 0.5, result  # 10 classes: chance 0.10
    for picture in (tmp_path / "runs/walk/pretrain/curves.png", task / "sweep.png", task / "final/curves.png"):
        assert picture.stat().st_size > 10_000, picture

    run_python("images", tmp_path)
    files = sorted(p.name for p in (tmp_path / "digits").iterdir())
    assert len(files) == 8
    table, exported = run_commands("use", tmp_path)
    assert all(name in table for name in files), table  # one row per image
    assert "local-dir:exported/vit-nano-digits" in exported

    timm_ns = run_python("timm", tmp_path)
    assert tuple(timm_ns["logits"].shape) == (1, 10)
    cfg = timm_ns["model"].pretrained_cfg
    assert list(cfg["input_size"]) == [3, 16, 16] and cfg["label_names"] == [str(i) for i in range(10)]

"""The "Writing a plugin" guide (plugins/README.md): its example file and commands run exactly as printed."""
import json
import re
import shlex

import pytest

from .helpers import ROOT, metrics, saved_model_accuracy, vitx_cli

GUIDE = (ROOT / "plugins" / "README.md").read_text()


def block(marker: str) -> str:
    """The fenced code block right after `<!-- example: marker -->`."""
    found = re.search(rf"<!-- example: {re.escape(marker)} -->\n```\w+\n(.*?)\n```", GUIDE, re.S)
    assert found, f"no example block '{marker}' in plugins/README.md"
    return found.group(1) + "\n"


def test_guide_example_plugin_pretrains_and_transfers_as_printed(tmp_path):
    (tmp_path / "rotation.py").write_text(block("rotation.py"))
    commands = [shlex.split(line) for line in block("commands").strip().splitlines()]
    assert [c[:2] for c in commands] == [["vitx", "pretrain"], ["vitx", "transfer"]]
    for argv in commands:
        proc = vitx_cli(*argv[1:], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
    rows = metrics(tmp_path / "runs/rotation")
    assert rows[-1]["val_top1"] > 0.4, rows[-1]  # four rotations: chance is 0.25
    config = json.loads((tmp_path / "runs/rotation/config.json").read_text())
    assert config["run"]["objective"] == "rotation"
    result = json.loads((tmp_path / "runs/rotation-transfer/vtab-dsprites_ori/result.json").read_text())
    assert result["test_samples"] == 2000
    final = tmp_path / "runs/rotation-transfer/vtab-dsprites_ori/final"  # the reported number is the saved model's
    assert result["test_top1"] == pytest.approx(saved_model_accuracy(final, "vtab/dsprites_ori", 2000), abs=1e-6)

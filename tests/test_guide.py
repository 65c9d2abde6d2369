"""The "Writing a plugin" guide (plugins/README.md): its example file and commands run exactly as printed, the
continued run restoring the example's declared head (`init_parts`)."""
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


def continued_head(folder) -> list[str]:
    """The example's `init_parts` at work: the head of the rotation objective that `--from runs/rotation` builds
    (before its first step) holds the source run's tensors, each equal to the one saved; the names compared."""
    import torch
    from safetensors.torch import load_file

    import vitx
    from vitx.runner.setup import build, resolve_config

    with vitx.temporary():  # registers the example's objective here, as --plugin does, and undoes it after
        exec(compile(block("rotation.py"), "rotation.py", "exec"), {"__name__": "rotation"})
        cfg, resume_from = resolve_config({"objective": "rotation", "start": str(folder / "runs/rotation"),
                                           "data": "embedded:digits", "workers": 0, "log_with": "none",
                                           "output_dir": str(folder / "built")}, False)
        head = build(cfg, resume_from).objective.head.state_dict()
    source = load_file(str(folder / "runs/rotation/heads.safetensors"))
    assert all(torch.equal(head[k.removeprefix("head.")], v) for k, v in source.items())
    return sorted(source)


def test_guide_example_plugin_pretrains_and_transfers_as_printed(tmp_path):
    (tmp_path / "rotation.py").write_text(block("rotation.py"))
    commands = [shlex.split(line) for line in block("commands").strip().splitlines()]
    assert [c[:2] for c in commands] == [["vitx", "pretrain"], ["vitx", "pretrain"], ["vitx", "transfer"]]
    for argv in commands:
        proc = vitx_cli(*argv[1:], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
    rows = metrics(tmp_path / "runs/rotation")
    assert rows[-1]["val_top1"] > 0.4, rows[-1]  # four rotations: chance is 0.25
    config = json.loads((tmp_path / "runs/rotation/config.json").read_text())
    assert config["run"]["objective"] == "rotation"
    continued = json.loads((tmp_path / "runs/rotation-more/config.json").read_text())["start"]
    assert continued["parts"] == {"backbone": "runs/rotation step 150", "head": "runs/rotation step 150"}
    assert continued_head(tmp_path) == ["head.bias", "head.weight"]
    result = json.loads((tmp_path / "runs/rotation-transfer/vtab-dsprites_ori/result.json").read_text())
    assert result["test_samples"] == 2000
    final = tmp_path / "runs/rotation-transfer/vtab-dsprites_ori/final"  # the reported number is the saved model's
    assert result["test_top1"] == pytest.approx(saved_model_accuracy(final, "vtab/dsprites_ori", 2000), abs=1e-6)

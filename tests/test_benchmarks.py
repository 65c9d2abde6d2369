"""The GPU acceptance script (benchmarks/gpu_acceptance.py), checked on the CPU by its dry run: the commands it
would run on a GPU, the Accelerate config files it generates, and its options (validated by vitx itself)."""
import importlib.util
import shlex
import sys

import yaml

from .helpers import ROOT


def _acceptance(monkeypatch):
    """The script as a module (benchmarks/ is no package): imported in-process, without a second interpreter."""
    spec = importlib.util.spec_from_file_location("gpu_acceptance", ROOT / "benchmarks" / "gpu_acceptance.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_acceptance", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_gpu_acceptance_dry_run_prints_every_command_and_checks_its_configs(tmp_path, monkeypatch, capsys):
    out = tmp_path / "acceptance"
    monkeypatch.setattr(sys, "argv", ["gpu_acceptance.py", "--dry-run", "--output-dir", str(out)])
    _acceptance(monkeypatch).main()
    printed = capsys.readouterr().out
    commands = [shlex.split(line.strip()[2:]) for line in printed.splitlines() if line.strip().startswith("$ ")]
    assert len(commands) == 11  # MFU, 3 per engine, DINO's input (the JPEGs, DINO, supervised), the reproduction

    fsdp, deepspeed = (yaml.safe_load((out / f"{e}.yaml").read_text()) for e in ("fsdp", "deepspeed"))
    assert fsdp["distributed_type"] == "FSDP" and fsdp["num_processes"] == 1
    assert fsdp["fsdp_config"]["fsdp_state_dict_type"] == "FULL_STATE_DICT"
    assert deepspeed["distributed_type"] == "DEEPSPEED" and deepspeed["deepspeed_config"]["zero_stage"] == 2
    assert f"config {out / 'fsdp.yaml'}: parses" in printed and f"config {out / 'deepspeed.yaml'}: parses" in printed

    mfu = commands[0]
    assert mfu[1].endswith("benchmarks/train_step.py") and "vitx,vitx-compile,plain,plain-compile" in mfu
    for engine, (uninterrupted, killed, resumed) in (("fsdp", commands[1:4]), ("deepspeed", commands[4:7])):
        for cmd in (uninterrupted, killed, resumed):
            assert cmd[:4] == ["accelerate", "launch", "--config_file", str(out / f"{engine}.yaml")]
            assert cmd[cmd.index("--steps") + 1] == "60" and cmd[cmd.index("--save-every") + 1] == "20"
        assert uninterrupted[-1] == str(out / engine / "uninterrupted")
        assert killed[-1] == str(out / engine / "killed") and resumed[-2:] == [str(out / engine / "killed"), "--resume"]
    assert "killed after step 20 and resumed" in printed

    folder, dino, supervised = commands[7:10]
    assert "write_folder" in folder[-1] and "/tmp/vitx-bench-jpegs" in folder[-1]
    for cmd, objective in ((dino, "dino(local_crops=8)"), (supervised, "supervised")):
        assert cmd[1:4] == ["-m", "vitx", "pretrain"] and cmd[cmd.index("--objective") + 1] == objective
        assert cmd[cmd.index("--model") + 1] == "vit-s/16" and cmd[cmd.index("--workers") + 1] == "15"
    reproduce = commands[10]
    assert reproduce[1:5] == ["-m", "vitx", "reproduce", "--plan"] and reproduce[5] == "gpu"
    sets = [reproduce[i + 1] for i, a in enumerate(reproduce) if a == "--set"]
    assert sets == ["pretrain_steps=1500", "seeds=[0,1,2,3]", "transfer_lrs=[0.1]", "hires_seeds=1",
                    "compute_points=[0.3]", 'curve=["mpp","dino"]', "jobs=8"]
    assert "total limit: 1470 s (24.5 min)" in printed  # under the 25 minutes
    assert "options: pretrain valid; reproduce plan gpu with" in printed and "seeds [0, 1, 2, 3]" in printed
    assert not (out / "fsdp").exists() and not (out / "summary.json").exists()  # a dry run runs nothing

"""The GPU acceptance script (benchmarks/gpu_acceptance.py), checked on the CPU by its dry run: the commands it
would run on a GPU, the Accelerate config files it generates, its options (validated by vitx itself), and with
--cpu-smoke the measurements run CPU-sized."""
import importlib.util
import json
import math
import shlex
import sys
from pathlib import Path

import yaml

from .helpers import ROOT


def _acceptance(monkeypatch):
    """The script as a module (benchmarks/ is no package): imported in-process, without a second interpreter."""
    spec = importlib.util.spec_from_file_location("gpu_acceptance", ROOT / "benchmarks" / "gpu_acceptance.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_acceptance", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _commands(printed: str) -> list[list[str]]:
    return [shlex.split(line.strip()[2:]) for line in printed.splitlines() if line.strip().startswith("$ ")]


def _dry_run(monkeypatch, capsys, out, *args):
    """The script's dry run (`args`: --cpu-smoke, --only ...) into `out`, in this process: the module and what it
    printed."""
    monkeypatch.setattr(sys, "argv", ["gpu_acceptance.py", "--dry-run", *args, "--output-dir", str(out)])
    module = _acceptance(monkeypatch)
    module.main()
    return module, capsys.readouterr().out


def test_gpu_acceptance_measurements_dry_run_and_cpu_smoke(tmp_path, monkeypatch, capsys):
    """The default group (one device command): each command printed, its options checked, and each run CPU-sized."""
    out = tmp_path / "acceptance"
    module, printed = _dry_run(monkeypatch, capsys, out, "--cpu-smoke")
    mfu, variants, folder, *dino, bench, bench_cpu = _commands(printed)
    assert mfu[1].endswith("benchmarks/train_step.py") and mfu[mfu.index("--sides") + 1] == \
        "vitx,vitx+compile,plain,plain+compile" and mfu[mfu.index("--model") + 1] == "vit-b/16"
    assert variants[variants.index("--sides") + 1].split(",") == [
        "plain", "plain+unfused", "plain+nosync", "plain+sdpa=flash", "plain+sdpa=cudnn", "plain+bf16w",
        "plain+compile=reduce-overhead", "plain+bf16w+compile"]
    assert "write_folder" in folder[-1] and "/tmp/vitx-bench-jpegs" in folder[-1]
    cases = [("off", "off", False), ("off+compile", "off", True), ("local+compile", "local", True)]
    assert len(dino) == len(cases)
    for cmd, (name, packed, compiled) in zip(dino, cases):
        assert cmd[1:4] == ["-m", "vitx", "bench"] and cmd[cmd.index("--objective") + 1] == \
            f"dino(local_crops=8,packed='{packed}')"
        assert cmd[cmd.index("--model") + 1] == "vit-s/16" and cmd[cmd.index("--workers") + 1] == "15"
        assert cmd[cmd.index("--data") + 1] == "/tmp/vitx-bench-jpegs" and cmd[-1] == str(out / f"dino-{name}.json")
        assert ("--compile" in cmd) == compiled and ("--profile" in cmd) == (not compiled)  # the baseline profiled
    assert dino[0][dino[0].index("--profile") + 1] == str(out / "dino-profile.txt")
    assert bench[bench.index("--profile") + 1] == str(out / "profile.txt") and "--device" not in bench
    assert bench_cpu[bench_cpu.index("--device") + 1] == "cpu"
    assert "total limit: 550 s (9.2 min) within --deadline 575 s" in printed  # one command, under 10 minutes
    assert "cpu-smoke: mfu, variants, dino, bench ran CPU-sized" in printed
    for packed in ("off", "local"):  # the DINO benches ran, each with its packing
        assert f"packed='{packed}'), batch 16, precision no; CPU" in printed
    assert "img/s: " in printed and "plain+bf16w: " in printed and (out / "cpu-smoke-profile.txt").exists()
    assert not (out / "summary.json").exists()  # a dry run runs nothing
    assert module.selected(module.plan(out), "bench,dino")[0].name == "dino"  # the plan's order


def test_gpu_acceptance_reproduction_and_engines_each_fit_one_device_command(tmp_path, monkeypatch, capsys):
    out = tmp_path / "acceptance"
    module, printed = _dry_run(monkeypatch, capsys, out, "--only", "reproduce,engines")
    commands = _commands(printed)
    assert len(commands) == 7  # the reproduction, 3 per engine
    assert {s.name: s.budget_s for s in module.plan(out)}["reproduce"] <= module.DEADLINE_S
    assert sum(s.budget_s for s in module.selected(module.plan(out), "engines")) <= module.DEADLINE_S

    fsdp, deepspeed = (yaml.safe_load((out / f"{e}.yaml").read_text()) for e in ("fsdp", "deepspeed"))
    assert fsdp["distributed_type"] == "FSDP" and fsdp["num_processes"] == 1
    assert fsdp["fsdp_config"]["fsdp_state_dict_type"] == "FULL_STATE_DICT"
    assert deepspeed["distributed_type"] == "DEEPSPEED" and deepspeed["deepspeed_config"]["zero_stage"] == 2
    assert f"config {out / 'fsdp.yaml'}: parses" in printed and f"config {out / 'deepspeed.yaml'}: parses" in printed

    reproduce = commands[0]
    assert reproduce[1:5] == ["-m", "vitx", "reproduce", "--plan"] and reproduce[5] == "gpu"
    sets = [reproduce[i + 1] for i, a in enumerate(reproduce) if a == "--set"]
    assert sets == ["pretrain_steps=1500", "pretrain_seeds=[0]", "seeds=[0,1,2]", "transfer_lrs=[0.1]",
                    "hires_seeds=1", "compute_points=[0.3]", 'curve=["mpp"]', "jobs=8"]
    assert "pre-training seeds [0], seeds [0, 1, 2]" in printed  # the plan's own check passed them
    for engine, (uninterrupted, killed, resumed) in (("fsdp", commands[1:4]), ("deepspeed", commands[4:7])):
        for cmd in (uninterrupted, killed, resumed):
            assert cmd[:4] == ["accelerate", "launch", "--config_file", str(out / f"{engine}.yaml")]
            assert cmd[cmd.index("--steps") + 1] == "60" and cmd[cmd.index("--save-every") + 1] == "20"
        assert uninterrupted[-1] == str(out / engine / "uninterrupted")
        assert killed[-1] == str(out / engine / "killed") and resumed[-2:] == [str(out / engine / "killed"), "--resume"]
    assert "killed after step 20 and resumed" in printed
    assert not (out / "fsdp").exists() and not (out / "summary.json").exists()  # a dry run runs nothing


def test_gpu_acceptance_speed_group_benches_the_user_run_under_each_engine(tmp_path, monkeypatch, capsys):
    """`--only speed`: the user's `vitx bench` alone, then the same flags under `accelerate launch` with each
    engine's generated config, each writing its own figures (the summary compares them with the run alone)."""
    out = tmp_path / "acceptance"
    module, printed = _dry_run(monkeypatch, capsys, out, "--cpu-smoke", "--only", "speed")
    bench, _cpu, fsdp, deepspeed = _commands(printed)
    alone = bench[bench.index("bench") + 1:bench.index("--profile")]
    for engine, cmd in (("fsdp", fsdp), ("deepspeed", deepspeed)):
        assert cmd[:6] == ["accelerate", "launch", "--config_file", str(out / f"{engine}.yaml"), "-m", "vitx"]
        assert cmd[6] == "bench" and cmd[7:-2] == alone  # the same run as the bench alone
        assert cmd[-2:] == ["--output", str(out / f"bench-{engine}.json")]
    assert sum(s.budget_s for s in module.selected(module.plan(out), "speed")) <= 230  # beside the reproduction
    assert "cpu-smoke: engine-speed needs a GPU" in printed and "cpu-smoke: bench ran CPU-sized" in printed


def test_dino_row_refit_runs_each_variant_through_the_pipeline_and_tabulates_it(tmp_path, monkeypatch, capsys):
    """`--only dino-row`: the GPU plan's DINO row refitted three ways (benchmarks/dino_row.py), each pre-trained
    and transferred by the reproduction's own pipeline; CPU-sized, the table has scratch and each variant with its
    figures read from its run, and the GPU-sized variants are the ones its docstring names."""
    out = tmp_path / "acceptance"
    module, printed = _dry_run(monkeypatch, capsys, out, "--cpu-smoke", "--only", "dino-row")
    (command,) = _commands(printed)
    assert command[1].endswith("benchmarks/dino_row.py") and command[-1] == str(out / "dino-row")
    assert module.selected(module.plan(out), "dino-row")[0].budget_s <= module.DEADLINE_S
    rows = json.loads((out / "dino-row-smoke" / "dino-row.json").read_text())
    assert [r["start"] for r in rows] == ["scratch", "b128x1000", "cpu-head", "lr1e-3"]
    for row in rows[1:]:
        assert row["steps"] == 2 and all(0 < loss < math.log(256) * 2 for loss in row["loss"])  # (first, last)
        assert 0 < row["knn"][0] <= 1 and 0 < row["knn"][1] <= 1  # the monitor at steps 0 and 2
        assert row["out_dim"] == 256 and row["teacher_entropy"] < math.log(256)
        assert len(row["seeds"]) == 1 and row["test_top1"] == row["seeds"][0] and 0 <= row["test_top1"] <= 1
    table = (out / "dino-row-smoke" / "dino-row.md").read_text()
    assert table.count("\n") == 2 + len(rows) and "| lr1e-3 | 2 × 8, 0.001 |" in table

    spec = importlib.util.spec_from_file_location("dino_row", ROOT / "benchmarks" / "dino_row.py")
    dino_row = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dino_row)
    gpu = dino_row.trial_plan(cpu_smoke=False)
    row = dino_row.ROW
    shapes = {name: (p.steps_in(gpu), p.settings.get("batch_size", gpu.batch_size), p.lr, p.objective)
              for name, p in gpu.pretrainings.items()}
    assert shapes == {"b128x1000": (1000, 128, row.lr, row.objective), "lr1e-3": (500, 256, 1e-3, row.objective),
                      "cpu-head": (1000, 128, row.lr, "dino(hidden_dim=256,bottleneck_dim=64,local_crops=4)")}
    assert gpu.model == "vit-ti/4" and gpu.image_size == 64 and gpu.seeds == [0, 1, 2] and gpu.jobs == 8
    assert all(p.settings["monitor_every"] == p.steps_in(gpu) // 4 for p in gpu.pretrainings.values())


def test_the_batch_step_benches_b16_compiled_at_each_larger_batch(tmp_path, monkeypatch, capsys):
    """`--only batch`: `vitx bench` B/16 bf16 compiled at 256, 512 and 1024, each writing its own figures (a batch
    that does not fit ends its own command in one line; the next still runs), its options checked on the CPU."""
    out = tmp_path / "acceptance"
    module, printed = _dry_run(monkeypatch, capsys, out, "--cpu-smoke", "--only", "batch")
    commands = _commands(printed)
    assert [c[c.index("--batch-size") + 1] for c in commands] == ["256", "512", "1024"]
    for batch, command in zip((256, 512, 1024), commands):
        assert command[1:4] == ["-m", "vitx", "bench"] and "--compile" in command
        assert command[command.index("--model") + 1] == "vit-b/16" and command[-1] == str(out / f"bench-b{batch}.json")
    assert module.FIGURES["batch"] == ("bench-b256.json", "bench-b512.json", "bench-b1024.json")
    assert "cpu-smoke: batch compiles B/16" in printed and not (out / "summary.json").exists()


def test_the_drop_path_step_benches_mask_against_skip_on_the_same_run(tmp_path, monkeypatch, capsys):
    """`--only drop-path`: the user's B/16 compiled bench twice, at drop path 0.3, timm's mask then DINOv2's skip,
    the same flags otherwise; each mode runs CPU-sized in the smoke, and the summary's ratio reads their files."""
    out = tmp_path / "acceptance"
    module, printed = _dry_run(monkeypatch, capsys, out, "--cpu-smoke", "--only", "drop-path")
    mask, skip = _commands(printed)
    assert mask[-4:] == ["--set", "drop_path=0.3", "--set", "drop_path_mode=mask"]
    assert skip[-4:] == ["--set", "drop_path=0.3", "--set", "drop_path_mode=skip"]
    assert mask[:-6] == skip[:-6] and "--compile" in mask and mask[mask.index("--model") + 1] == "vit-b/16"
    assert mask[-6:-4] == ["--output", str(out / "bench-drop-mask.json")]
    assert printed.count("img/s:") == 2  # both modes ran CPU-sized

    def measured(cmd, deadline, log):  # each command's figures, as its bench would write them
        mode = cmd[-1].split("=")[1]
        Path(cmd[-5]).write_text(json.dumps({"images_per_s": {"mask": 100.0, "skip": 130.0}[mode], "device": "cpu"}))
        return 0

    monkeypatch.setattr(module, "_run", measured)
    result = module.run_step(module.selected(module.plan(out), "drop-path")[0], out, 10)
    assert result["ok"] and result["skip_over_mask"] == 1.3

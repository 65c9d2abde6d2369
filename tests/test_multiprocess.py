"""Acceptance: `accelerate launch` with 2 CPU processes gives the 1-process loss curve at the same global batch,
and each process draws its own randomness."""
import json
import os
import shutil
import subprocess

import pytest

from .helpers import ROOT, as_flags, metrics


FUSED = '''
"""Fused AdamW, as on CUDA: the runner skips non-finite updates on the device and agrees on stop/save over a
gloo group off the device (a test plugin: fused Adam runs on the CPU too)."""
import vitx.runner.optim

vitx.runner.optim.fuse = lambda device: True
'''


@pytest.mark.skipif(shutil.which("accelerate") is None, reason="accelerate CLI not on PATH")
def test_two_processes_match_one(tmp_path, monkeypatch):
    """With fused AdamW on both sides, so that the device-side skip and the host-side stop/save agreement (a gloo
    group beside the default one) run on 2 processes; the non-fused path's collective runs in test_streams."""
    # 33 validation images: 17 and 16 per process, 3 and 2 batches of 8; the short process runs a filler forward
    opts = dict(model="vit-nano/4", data="embedded:shapes", batch_size=16, steps=8, warmup_steps=2, save_every=8,
                log_every=1, eval_samples=33, workers=0, log_with="none", curves=False)
    from vitx.runner import pretrain

    plugin = tmp_path / "fused.py"
    plugin.write_text(FUSED)
    monkeypatch.setattr("vitx.runner.optim.fuse", lambda device: True)
    pretrain({**opts, "output_dir": str(tmp_path / "one")})  # one process: this one
    # On machines without a GPU, accelerate's --cpu flag hands multi-process runs to mpirun; torchrun (which
    # --multi_gpu selects) starts them directly, and vitx picks the gloo backend when there is no GPU.
    two = subprocess.run(["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                          "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29517",
                          "-m", "vitx", "--plugin", str(plugin), "pretrain",
                          *as_flags({**opts, "output_dir": str(tmp_path / "two")})],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    assert "2 process(es)" in two.stdout

    def curve(name):
        return metrics(tmp_path / name)

    a, b = curve("one"), curve("two")
    assert [m["step"] for m in a] == [m["step"] for m in b] == list(range(1, 9))
    for x, y in zip(a, b):
        assert y["loss"] == pytest.approx(x["loss"], rel=1e-4, abs=1e-5), (x, y)
        assert y["top1"] == pytest.approx(x["top1"], abs=1e-6)
    assert b[-1]["val_loss"] == pytest.approx(a[-1]["val_loss"], rel=1e-4)


@pytest.mark.skipif(shutil.which("accelerate") is None, reason="accelerate CLI not on PATH")
def test_a_transfer_runs_its_runs_one_after_another_on_two_processes(tmp_path):
    """A transfer runs several runs in one process (here two seeds' final runs, each tested after its fit): the
    first run's end used to take the process group down (Accelerate's end_training), so its test evaluation, and
    the next run, failed on 2 processes. Each seed's result is the 1-process one at the same global batch. One
    test image: the process with none takes part in the reduction (it used to return early and leave the other
    waiting), as a validation does."""
    from vitx.transfer import TransferConfig, transfer

    opts = dict(task="embedded/digits", shots=10, start="scratch", model="vit-nano/4", image_size=16, sweep=False,
                steps=1, batch_size=4, test_samples=1, workers=0, curves=False, seeds=[0, 1])
    transfer(TransferConfig(**opts, output_dir=str(tmp_path / "one")))  # one process: this one
    two = subprocess.run(["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                          "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29520",
                          "-m", "vitx", "transfer", "--task", "embedded/digits", "--shots", "10", "--from", "scratch",
                          "--model", "vit-nano/4", "--image-size", "16", "--no-sweep", "--steps", "1",
                          "--batch-size", "4", "--test-samples", "1", "--workers", "0", "--no-curves",
                          "--seeds", "0,1", "--output-dir", str(tmp_path / "two")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    for run in ("final", "final-seed1"):  # seed 0's run, seed 1's
        here, there = (tmp_path / side / "embedded-digits" / run for side in ("one", "two"))
        a, b = (json.loads((side / "final.json").read_text()) for side in (here, there))
        assert b["test_samples"] == a["test_samples"] == 1 and b["test_top1"] == a["test_top1"]
        assert b["test_loss"] == pytest.approx(a["test_loss"], rel=1e-5), (run, a, b)
        (x,), (y,) = metrics(here), metrics(there)  # the one step's gradient: the same global batch
        assert y["grad_norm"] == pytest.approx(x["grad_norm"], rel=1e-5), (run, x, y)


STOP_IN_VALIDATION = '''
"""Rank 1 sends itself SIGTERM at the first validation round after step 4, and every round writes a line to
$VITX_TEST_ROUNDS/rank<r>.txt (a test plugin)."""
import os
import signal

import torch.distributed as dist

from vitx.runner.evaluating import Evaluating

original = Evaluating.evaluation_round


def evaluation_round(self, more):
    rank = dist.get_rank()
    if rank == 1 and self.step_count == 4 and not os.environ.get("VITX_TEST_SENT"):
        os.environ["VITX_TEST_SENT"] = "1"
        os.kill(os.getpid(), signal.SIGTERM)
    answer = original(self, more)
    with open(os.path.join(os.environ["VITX_TEST_ROUNDS"], f"rank{rank}.txt"), "a") as f:
        f.write(f"{self.step_count} {answer[0]} {answer[1]}\\n")
    return answer


Evaluating.evaluation_round = evaluation_round
'''


@pytest.mark.slow  # 25 s: a third launch of 2 processes
@pytest.mark.skipif(shutil.which("accelerate") is None, reason="accelerate CLI not on PATH")
def test_a_stop_on_one_process_during_validation_gives_it_up_on_both_at_the_same_batch(tmp_path):
    """SIGTERM reaches one of 2 processes while the step-4 validation runs (5 rounds of 8 images each): both give
    it up at that round (a forward more on one would hang the other), the checkpoint of step 4 is written
    without val_* figures, and the run stops there, exit 75, with its line."""
    plugin, rounds = tmp_path / "stop_in_validation.py", tmp_path / "rounds"
    plugin.write_text(STOP_IN_VALIDATION)
    rounds.mkdir()
    opts = dict(model="vit-nano/4", data="embedded:shapes", batch_size=16, steps=8, save_every=4, log_every=1,
                eval_samples=80, workers=0, log_with="none", curves=False, output_dir=str(tmp_path / "run"))
    two = subprocess.run(["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                          "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29523",
                          "-m", "vitx", "--plugin", str(plugin), "pretrain", *as_flags(opts)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "VITX_TEST_ROUNDS": str(rounds)})
    # each process exits 75 (torchrun then says 1 and lists them)
    assert two.returncode == 1 and two.stderr.count("exitcode  : 75") == 2, two.stderr[-3000:]
    said = sorted(line for line in two.stderr.splitlines() if line.startswith("stopped:"))
    assert [line.split(" written;")[0] for line in said] == [  # each process's line, true to what is on disk
        f"stopped: {who} at step 4: checkpoint {tmp_path / 'run' / 'checkpoints' / 'step_00000004'}"
        for who in ("SIGTERM", "a stop signal (on another process)")], said
    seen = [[line.split() for line in (rounds / f"rank{r}.txt").read_text().splitlines()] for r in (0, 1)]
    assert seen[0] == seen[1] == [["4", "True", "True"]], seen  # both gave up at the first round of step 4's
    log = metrics(tmp_path / "run")
    assert [m["step"] for m in log] == [1, 2, 3, 4] and not any(k.startswith("val_") for k in log[3])
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step_00000004"]


RECORDING_MPP = '''
"""MPP that writes every corruption plan it draws to $VITX_TEST_PLANS/rank<r>.txt (a test plugin)."""
import os

import torch.distributed as dist

import vitx
from vitx.objectives.mpp import MaskedPatchPrediction


@vitx.register_objective("mpp-recording")
class RecordingMPP(MaskedPatchPrediction):
    def sample_corruption(self, b, device):
        plan = super().sample_corruption(b, device)
        rank = dist.get_rank() if dist.is_initialized() else 0
        with open(os.path.join(os.environ["VITX_TEST_PLANS"], f"rank{rank}.txt"), "a") as f:
            f.write(" ".join(map(str, plan.index.flatten().tolist())) + "\\n")
        return plan
'''


@pytest.mark.slow  # 30 s: a third launch of 2 processes; the default suite launches 2 (a run, a transfer)
@pytest.mark.skipif(shutil.which("accelerate") is None, reason="accelerate CLI not on PATH")
def test_each_process_draws_its_own_mpp_corruption(tmp_path):
    """Two processes, two micro-steps each: the ranks' MPP corruption plans differ (they were identical when
    every process seeded the same generator), and a rank's plans differ from step to step."""
    plugin, plans = tmp_path / "recording.py", tmp_path / "plans"
    plugin.write_text(RECORDING_MPP)
    plans.mkdir()
    opts = dict(objective="mpp-recording", model="vit-nano/4", data="embedded:leaves", batch_size=16, steps=2,
                warmup_steps=1, save_every=2, eval_samples=0, workers=0, log_with="none", curves=False,
                output_dir=str(tmp_path / "run"))
    res = subprocess.run(["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                          "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29518",
                          "-m", "vitx", "--plugin", str(plugin), "pretrain", *as_flags(opts)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "VITX_TEST_PLANS": str(plans)})
    assert res.returncode == 0, res.stderr[-3000:]
    rank0, rank1 = ((plans / f"rank{r}.txt").read_text().splitlines() for r in (0, 1))
    assert len(rank0) == len(rank1) == 2  # one plan per micro-step on each rank
    assert rank0[0] != rank1[0] and rank0[1] != rank1[1]  # 8 images × 8 of 16 patches: equal by chance ~1e-31
    assert rank0[0] != rank0[1]


@pytest.mark.slow  # 9 s for a warning about an Accelerate quirk: kept out of the 5-minute default suite
@pytest.mark.skipif(shutil.which("accelerate") is None, reason="accelerate CLI not on PATH")
def test_cpu_flag_launch_warns_that_it_runs_one_process(tmp_path):
    opts = dict(model="vit-nano/4", batch_size=8, steps=1, eval_samples=0, workers=0, log_with="none",
                output_dir=str(tmp_path / "run"))
    res = subprocess.run(["accelerate", "launch", "--cpu", "--num_processes", "2", "--num_machines", "1",
                          "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "vitx", "pretrain",
                          *as_flags(opts)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "started a single process" in res.stderr and "1 process(es)" in res.stdout


MULTI_CPU_CONFIG = """compute_environment: LOCAL_MACHINE
distributed_type: MULTI_CPU
num_machines: 1
num_processes: 2
mixed_precision: 'no'
use_cpu: true
"""


def test_single_process_warning_names_no_flag_and_says_what_to_change(monkeypatch, capsys):
    """The environment `accelerate launch --config_file` leaves for a MULTI_CPU config of 2 processes (the same
    as `--cpu --num_processes 2`): the warning must not name --cpu, which the user may not have passed, and must
    say what to write in the config file instead."""
    from vitx.runner.launch import _warn_single_process_cpu_launch

    for key in ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    _warn_single_process_cpu_launch()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("warning: accelerate launch started a single process")
    assert "--cpu" not in err
    assert "`distributed_type: MULTI_GPU`" in err and "`--multi_gpu --num_processes N`" in err
    monkeypatch.setenv("WORLD_SIZE", "2")  # torchrun (--multi_gpu, or a MULTI_GPU config): several processes
    _warn_single_process_cpu_launch()
    assert capsys.readouterr().err == ""


@pytest.mark.slow  # two launches, 20-60 s on 2 shared cores
@pytest.mark.skipif(shutil.which("accelerate") is None, reason="accelerate CLI not on PATH")
def test_multi_cpu_config_file_warns_and_its_multi_gpu_fix_runs_two_processes(tmp_path):
    """A MULTI_CPU config file of 2 processes runs one (Accelerate needs mpirun) and says what to change; the
    change it names, `distributed_type: MULTI_GPU`, then runs 2 processes on the CPU."""
    opts = dict(model="vit-nano/4", batch_size=8, steps=1, eval_samples=0, workers=0, log_with="none")
    for name, kind, port in (("cpu", "MULTI_CPU", "29541"), ("gpu", "MULTI_GPU", "29542")):
        config = tmp_path / f"{name}.yaml"
        config.write_text(MULTI_CPU_CONFIG.replace("MULTI_CPU", kind))
        res = subprocess.run(["accelerate", "launch", "--config_file", str(config), "--main_process_port", port,
                              "-m", "vitx", "pretrain", *as_flags({**opts, "output_dir": str(tmp_path / name)})],
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        if kind == "MULTI_CPU":
            assert "1 process(es)" in res.stdout and "distributed_type: MULTI_GPU" in res.stderr
            assert "--cpu" not in res.stderr
        else:
            assert "2 process(es)" in res.stdout and "started a single process" not in res.stderr

"""The runner: learning, checkpoints timm can load, exact resume after kill -9, atomic saves."""
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import load_file

import vitx
from vitx.errors import VitxError
from vitx.runner import build, pretrain, resolve_config
from vitx.runner.loop import Trainer
from vitx.runner.optim import lr_factor

from .helpers import ROOT, as_flags, tiny, vitx_cli
from .helpers import metrics as _metrics


def test_learning_curve_beats_chance(pretrained_run):
    """Supervised pre-training of vit-nano/4 on embedded digits (the session's `pretrained_run`, 150 steps):
    the loss falls and validation top-1 is far above 10% chance."""
    log = [m for m in _metrics(pretrained_run) if "loss" in m]  # (step 0: the collapse watch's starting point)
    assert [m["step"] for m in log] == list(range(10, 151, 10))
    curve = [m["loss"] for m in log]
    assert curve[-1] < curve[0] - 0.5, curve  # measured: 2.30 → 1.21
    assert log[-1]["val_top1"] > 0.4, log[-1]  # chance is 0.1; measured 0.54 on 360 validation images


def test_checkpoint_layout_and_timm_loads_it(tmp_path):
    pretrain(tiny(tmp_path, hflip=False))
    run = tmp_path / "run"
    config = json.loads((run / "config.json").read_text())
    assert config["step"] == 6 and config["backbone"]["name"] == "vit-nano/4"
    assert config["preprocess"]["image_size"] == 16 and config["data"]["num_classes"] == 10
    assert config["preprocess"]["hflip"] is False and config["run"]["hflip"] is False  # --no-hflip reached both
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_00000003", "step_00000006"]
    weights = load_file(str(run / "model.safetensors"))
    assert "pos_embed" in weights and "blocks.0.attn.qkv.weight" in weights  # timm key names
    heads = load_file(str(run / "heads.safetensors"))
    assert set(heads) == {"head.pre_logits.fc.weight", "head.pre_logits.fc.bias", "head.fc.weight", "head.fc.bias"}

    # timm alone rebuilds the backbone from config.json and loads the weights strictly
    record = config["backbone"]
    timm_model = timm.create_model(record["timm_arch"], **record["timm_kwargs"])
    timm_model.load_state_dict(weights, strict=True)
    ours = vitx.load_backbone(run)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        assert torch.equal(timm_model.eval()(x), ours.eval()(x))


def test_existing_run_is_never_overwritten(tmp_path):
    pretrain(tiny(tmp_path))
    before = (tmp_path / "run" / "model.safetensors").read_bytes()
    with pytest.raises(VitxError, match="already holds a run"):
        resolve_config(tiny(tmp_path), resume=False)
    with pytest.raises(VitxError, match="cannot resume with different settings: --seed"):
        resolve_config(tiny(tmp_path, seed=5), resume=True)
    assert (tmp_path / "run" / "model.safetensors").read_bytes() == before
    assert pretrain(tiny(tmp_path), resume=True) == {"step": 6}  # a finished run stays as it is
    assert (tmp_path / "run" / "model.safetensors").read_bytes() == before


def test_kill_during_save_keeps_previous_checkpoint(tmp_path, monkeypatch):
    """A crash in the middle of writing checkpoint 6 leaves checkpoint 3 complete and resumable."""
    import vitx.runs.rundir as loop  # where the weight files are written

    real = loop.save_weights
    calls = {"n": 0}

    def dying_save(tensors, path, metadata=None):
        calls["n"] += 1
        if calls["n"] == 3:  # second checkpoint: model.safetensors
            path.write_bytes(b"half a file")
            raise KeyboardInterrupt
        return real(tensors, path, metadata)

    monkeypatch.setattr(loop, "save_weights", dying_save)
    with pytest.raises(KeyboardInterrupt):
        pretrain(tiny(tmp_path))
    run = tmp_path / "run"
    done = sorted(p.name for p in (run / "checkpoints").iterdir() if not p.name.startswith("."))
    assert done == ["step_00000003"]
    assert json.loads((run / "config.json").read_text())["step"] == 3
    vitx.load_backbone(run)  # the top-level files are the intact step-3 ones
    monkeypatch.setattr(loop, "save_weights", real)
    last = pretrain(tiny(tmp_path), resume=True)
    assert last["step"] == 6
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]  # partial one cleaned


# A --plugin for the run these tests kill or signal: after step $VITX_TEST_HOLD_AT it waits until a stop signal
# reaches it (a kill -9 never lets it go on), so the signal lands mid-run however slowly a loaded machine runs it
# and however late the test's polling sees that the run is ready.
HOLD = """
import os, time
from vitx.runner import loop

_step = loop.Trainer.step


def step(self, *args):
    _step(self, *args)
    if self.step_count == int(os.environ["VITX_TEST_HOLD_AT"]):
        while self.agreement.requests is None or self.agreement.requests.received is None:
            time.sleep(0.01)


loop.Trainer.step = step
"""


def _start_pretrain_until(flags: list[str], ready, hold_at: int, tmp_path: Path) -> subprocess.Popen:
    """`vitx pretrain FLAGS` in a new process (the process is what these tests kill or signal), held after step
    `hold_at` until it is signalled, and returned once `ready()` holds (polled every 20 ms; the deadline only
    catches a run that never gets there)."""
    plugin = tmp_path / "hold.py"
    plugin.write_text(HOLD)
    proc = subprocess.Popen([sys.executable, "-m", "vitx", "--plugin", str(plugin), "pretrain", *flags], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "VITX_TEST_HOLD_AT": str(hold_at)})
    deadline = time.time() + 900
    while not ready():
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        assert time.time() < deadline
        time.sleep(0.02)
    return proc


KILL_9 = {  # objective → data: every built-in and first-party objective, each drawing its own randomness
    "supervised": "embedded:shapes",
    "mpp": "embedded:leaves",
    "mae(decoder_dim=32, decoder_depth=1, decoder_heads=2)": "embedded:leaves",
    "simclr(temperature=0.2)": "embedded:shapes",
    # multi-crop views from the loader's workers, an EMA teacher, centres and iBOT masks
    "dino(out_dim=256, hidden_dim=64, bottleneck_dim=32, local_crops=4, ibot=0.5, koleo=0.1)": "embedded:shapes",
}


@pytest.mark.parametrize("objective", [  # MPP's and the plugins' draws follow the same contract: under -m slow
    o if o == "supervised" else pytest.param(o, marks=pytest.mark.slow) for o in KILL_9],  # (20 s each)
    ids=lambda o: o.split("(")[0])
def test_kill_9_then_resume_gives_identical_weights(objective, tmp_path):
    """Acceptance: a run killed with SIGKILL after a periodic checkpoint and resumed ends with the same weights,
    bit for bit, for every objective: stochastic ones too (MPP plans, MAE masks, SimCLR views are drawn from
    (seed, process, micro-step), see vitx/runner/randomness.py)."""
    # the run is held after step 10 (HOLD): the kill lands after the step-8 checkpoint and before the end
    opts = dict(objective=objective, model="vit-nano/4", data=KILL_9[objective], batch_size=32, steps=24,
                warmup_steps=4, save_every=8, log_every=1, eval_samples=0, workers=1, log_with="none", curves=False)
    full = tmp_path / "full"
    pretrain({**opts, "output_dir": str(full)})

    broken = tmp_path / "broken"
    flags = as_flags({**opts, "output_dir": str(broken)})
    proc = _start_pretrain_until(flags, lambda: (broken / "checkpoints" / "step_00000008").exists(), 10, tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    steps_logged = [m["step"] for m in _metrics(broken)]
    assert max(steps_logged) < 24  # it really was killed mid-run

    # resumed in this process, whose generators hold whatever the full run left: only the checkpoint and the
    # randomness contract decide what the rest of the run draws
    resumed = vitx_cli("pretrain", *flags, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming" in resumed.stdout
    a, b = load_file(str(full / "model.safetensors")), load_file(str(broken / "model.safetensors"))
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) == 0.0  # bit-identical
    ha, hb = load_file(str(full / "heads.safetensors")), load_file(str(broken / "heads.safetensors"))
    assert ha.keys() == hb.keys() and all(torch.equal(ha[k], hb[k]) for k in ha)
    assert [m["step"] for m in _metrics(broken)] == list(range(1, 25))  # no duplicated steps in the log
    assert [m["loss"] for m in _metrics(broken)] == [m["loss"] for m in _metrics(full)]
    # each objective's clipping rule is recorded and resumed: DINO's per parameter (main_dino.py's clip_gradients)
    run = json.loads((broken / "config.json").read_text())["run"]
    assert run["grad_clip_mode"] == ("per-parameter" if objective.startswith("dino") else "global")


def test_grad_accumulation_matches_full_batch(tmp_path):
    """Accumulating 4 micro-batches of 4 is the same optimisation as one batch of 16 (within float error).

    SGD keeps the update linear in the gradient; Adam would magnify float noise on near-zero gradients."""
    common = dict(eval_samples=0, save_every=100, optimizer="sgd", lr=0.05)
    a = pretrain(tiny(tmp_path / "a", **common))
    b = pretrain(tiny(tmp_path / "b", **common, grad_accum=4))
    wa, wb = load_file(str(tmp_path / "a/run/model.safetensors")), load_file(str(tmp_path / "b/run/model.safetensors"))
    assert all(torch.allclose(wa[k], wb[k], atol=1e-5) for k in wa)
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)


def test_schedule_shapes():
    assert lr_factor(0, 100, 10, "cosine") == pytest.approx(0.1)
    assert lr_factor(9, 100, 10, "cosine") == pytest.approx(1.0)
    assert lr_factor(55, 100, 10, "cosine") == pytest.approx(0.5)
    assert lr_factor(55, 100, 10, "linear") == pytest.approx(0.5)
    assert lr_factor(100, 100, 10, "linear") == 0.0


def test_bf16_autocast_follows_the_float32_run(tmp_path):
    """bf16 mixed precision (SGD) tracks the float32 run: same data and initialisation, losses within bf16's
    precision at every step, and the weights move from the start."""
    common = dict(optimizer="sgd", lr=0.05, eval_samples=0, steps=6, save_every=6)
    pretrain(tiny(tmp_path / "fp32", **common))
    last = pretrain(tiny(tmp_path / "bf16", precision="bf16", **common))
    assert last["step"] == 6
    fp32, bf16 = _metrics(tmp_path / "fp32" / "run"), _metrics(tmp_path / "bf16" / "run")
    for a, b in zip(fp32, bf16):
        assert b["loss"] == pytest.approx(a["loss"], rel=2e-2), (a, b)  # bf16 keeps 8 bits of mantissa
    assert fp32[0]["loss"] == bf16[0]["loss"] == pytest.approx(math.log(10))  # zero-init head: uniform at first
    assert any(a["loss"] != b["loss"] for a, b in zip(fp32[1:], bf16[1:]))  # then autocast shows: it ran bf16
    config = json.loads((tmp_path / "bf16" / "run" / "config.json").read_text())
    assert config["run"]["precision"] == "bf16"


def test_optimizer_excludes_norms_and_position_embeddings_from_decay(tmp_path):
    setup = build(resolve_config(tiny(tmp_path), resume=False)[0])
    groups = setup.optimizer.param_groups
    no_decay = {id(p) for p in groups[1]["params"]}
    backbone = setup.objective.backbone
    assert groups[0]["weight_decay"] == 0.1 and groups[1]["weight_decay"] == 0.0
    assert id(backbone.pos_embed) in no_decay and id(backbone.cls_token) in no_decay
    assert id(backbone.norm.weight) in no_decay and id(backbone.blocks[0].attn.qkv.weight) not in no_decay
    assert Trainer(setup).micro == 16


def test_corrupt_image_in_a_run_stops_with_its_name_or_is_skipped(tmp_path):
    from .helpers import write_image_folder

    folder = str(write_image_folder(tmp_path / "imgs", corrupt=True))
    with pytest.raises(VitxError, match=r"broken\.png"):
        pretrain(tiny(tmp_path / "strict", data=folder, steps=2, eval_samples=0))
    last = pretrain(tiny(tmp_path / "lenient", data=folder, steps=2, eval_samples=0, skip_corrupt=True))
    assert last["skipped_images"] >= 1  # 9 files, batch 16: every step meets the broken one
    assert last["step"] == 2


def test_runner_calls_objective_hooks_once_per_optimiser_step(tmp_path):
    from vitx.objectives.supervised import Supervised
    from vitx.registry import OBJECTIVES, temporary

    calls = {"after_backward": 0, "step_end": []}

    class Counting(Supervised):
        def on_after_backward(self):
            calls["after_backward"] += 1
            assert all(p.grad is not None for p in self.head.parameters())  # gradients are complete

        def on_step_end(self, step):
            calls["step_end"].append(step)

    with temporary():  # the registration is undone after the block
        OBJECTIVES.register("counting-test", Counting, overwrite=True)
        pretrain(tiny(tmp_path, objective="counting-test", grad_accum=2, eval_samples=0))
    assert "counting-test" not in OBJECTIVES
    assert calls["after_backward"] == 6 and calls["step_end"] == [1, 2, 3, 4, 5, 6]


NAN_OBJECTIVE = '''
"""Supervised, but the loss is NaN on the training forwards listed in NAN_AT (1-based), as a diverging run's is."""
import os

import vitx
from vitx.objectives.supervised import Supervised

NAN_AT = {int(x) for x in os.environ.get("VITX_TEST_NAN_AT", "").split(",") if x}


@vitx.register_objective("nan-sometimes")
class NanSometimes(Supervised):
    calls = 0

    def forward(self, batch):
        out = super().forward(batch)
        if self.training:
            NanSometimes.calls += 1
            if NanSometimes.calls in NAN_AT or (NAN_AT and -1 in NAN_AT and NanSometimes.calls >= max(NAN_AT)):
                out["loss"] = out["loss"] * float("nan")
        return out
'''


def _all_finite(path: Path) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in load_file(str(path)).values())


@pytest.fixture(params=["host", "device"])
def skip_decided_on(request, monkeypatch) -> str:
    """Both ways a non-finite update is skipped: decided on the host (SGD, Adam on the CPU), or on the device by
    fused Adam(W)'s found_inf (what CUDA runs get; fused Adam runs on the CPU too, so it is tested here)."""
    if request.param == "device":
        monkeypatch.setattr("vitx.runner.optim.fuse", lambda device: True)
    return request.param


def test_nonfinite_steps_are_skipped_and_never_checkpointed(tmp_path, monkeypatch, skip_decided_on):
    """NaN loss on 3 micro-steps (2 of them in one accumulated step): those 2 optimiser steps are skipped on
    the weights, counted in metrics.jsonl, and every checkpoint is finite; the run finishes."""
    plugin = tmp_path / "nan_objective.py"
    plugin.write_text(NAN_OBJECTIVE)
    monkeypatch.setenv("VITX_TEST_NAN_AT", "3,4,9")  # micro-steps 3, 4 → step 2; micro-step 9 → step 5
    out = tmp_path / "run"
    proc = vitx_cli("--plugin", str(plugin), "pretrain", *as_flags(tiny(tmp_path, objective="nan-sometimes",
                    grad_accum=2, steps=8, save_every=2, keep_checkpoints=10, eval_samples=0, output_dir=str(out))))
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = _metrics(out)
    assert [m["step"] for m in log] == list(range(1, 9))
    assert [m.get("skipped_nonfinite", 0) for m in log] == [0, 1, 1, 1, 2, 2, 2, 2]
    assert all(math.isfinite(m["loss"]) for m in log if m["step"] not in (2, 5))  # skipped steps leave no mean
    checkpoints = sorted((out / "checkpoints").iterdir())
    assert [c.name for c in checkpoints] == [f"step_{s:08d}" for s in (2, 4, 6, 8)]
    assert all(_all_finite(c / "model.safetensors") and _all_finite(c / "heads.safetensors") for c in checkpoints)


def test_a_diverged_run_stops_in_one_line_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch, skip_decided_on):
    plugin = tmp_path / "nan_objective.py"
    plugin.write_text(NAN_OBJECTIVE)
    monkeypatch.setenv("VITX_TEST_NAN_AT", "-1,5")  # every training forward from the 5th on
    out = tmp_path / "run"
    opts = tiny(tmp_path, objective="nan-sometimes", steps=20, save_every=2, eval_samples=0, max_nonfinite_steps=3,
                keep_checkpoints=5, output_dir=str(out))
    proc = vitx_cli("--plugin", str(plugin), "pretrain", *as_flags(opts))
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "3 optimiser steps in a row (up to step 7)" in lines[0], proc.stderr[-2000:]
    # the last applied update (step 4) made the weights every later step failed on; step 6 holds them too
    # (skipped steps change nothing): the last good checkpoint is step 2, and the later ones are to go
    assert f"the last good checkpoint is {out / 'checkpoints' / 'step_00000002'}: delete the later ones " \
           "(step_00000004, step_00000006), then continue with --resume and a lower --lr" in lines[0]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [f"step_{s:08d}" for s in (2, 4, 6)]
    assert _all_finite(out / "model.safetensors")
    assert json.loads((out / "config.json").read_text())["step"] == 6

    # the advice can be followed: resume from step 2 with a lower --lr (the data is fine again)
    for later in ("step_00000004", "step_00000006"):
        shutil.rmtree(out / "checkpoints" / later)
    monkeypatch.setenv("VITX_TEST_NAN_AT", "")
    proc = vitx_cli("--plugin", str(plugin), "pretrain", *as_flags({**opts, "lr": 1e-4}), "--resume")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "resuming" in proc.stdout and "at step 2" in proc.stdout and "note: --lr 0.0001 from step 2" in proc.stdout
    assert json.loads((out / "config.json").read_text())["step"] == 20


def test_stop_signal_checkpoints_the_step_reached_and_resumes_exactly(tmp_path):
    """Acceptance: a scheduler's SIGTERM mid-run: the run finishes its step, checkpoints it, exits 75 with one
    line saying how to continue; --resume then ends bit-identical to a run that was never
    stopped (MPP: stochastic, so the randomness contract is part of what is tested). SIGUSR1 takes the same
    path (test_stop_signals_are_checked_and_restored)."""
    sig = "SIGTERM"
    opts = dict(objective="mpp", model="vit-nano/4", data="embedded:shapes", batch_size=16, steps=20,
                warmup_steps=4, save_every=1000, log_every=1, eval_samples=16, workers=1, log_with="none")
    full = tmp_path / "full"
    pretrain({**opts, "output_dir": str(full)})

    stopped = tmp_path / "stopped"
    flags = as_flags({**opts, "output_dir": str(stopped)})
    log = stopped / "metrics.jsonl"
    proc = _start_pretrain_until(flags, lambda: log.exists() and len(log.read_text().splitlines()) >= 8, 10,
                                 tmp_path)
    os.kill(proc.pid, getattr(signal, sig))
    _, err = proc.communicate(timeout=900)  # it stops after the step it is in; the limit only catches a hang
    assert proc.returncode == 75, err[-2000:]
    lines = [line for line in err.splitlines() if line.startswith("stopped:")]
    assert len(lines) == 1 and sig.removeprefix("SIG") in lines[0] and "--resume" in lines[0], err[-2000:]
    at = json.loads((stopped / "config.json").read_text())["step"]
    assert 8 <= at <= 11 and f"step {at}:" in lines[0]  # the step it had reached (held at 10 at the latest)
    assert (stopped / "checkpoints" / f"step_{at:08d}").is_dir()
    assert _metrics(stopped)[-1]["step"] == at

    resumed = vitx_cli("pretrain", *flags, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a, b = load_file(str(full / "model.safetensors")), load_file(str(stopped / "model.safetensors"))
    assert max((a[k] - b[k]).abs().max().item() for k in a) == 0.0
    steps = [m["step"] for m in _metrics(stopped)]
    assert steps == sorted(set(steps)) and steps[-1] == 20


def test_stop_signals_are_checked_and_restored(tmp_path):
    from vitx.runner.preemption import StopRequests, parse_signals

    assert parse_signals("TERM, usr1,SIGINT") == [signal.SIGTERM, signal.SIGUSR1, signal.SIGINT]
    assert parse_signals("") == []
    with pytest.raises(VitxError, match="'KILL' is not a signal a process can catch"):
        parse_signals("TERM,KILL")
    before = signal.getsignal(signal.SIGUSR1)
    with StopRequests([signal.SIGUSR1]) as requests:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert requests.received == "SIGUSR1"  # a request, not a death
    assert signal.getsignal(signal.SIGUSR1) is before


def test_a_signal_not_chosen_keeps_its_default_action_inside_the_command():
    """`--stop-signals USR1`: SIGTERM during the loop has its action from before vitx's (here the default: the
    process dies by it), not the line of a stop "as the command started, before it began"."""
    script = ("import os, signal, sys, time\n"
              "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
              "sys.argv[0] = os.path.join(sys.prefix, 'bin', 'vitx')  # as the console script starts\n"
              "from vitx.runner import preemption\n"
              "preemption.starting()\n"
              "with preemption.command_stops(), preemption.StopRequests([signal.SIGUSR1]):\n"
              "    os.kill(os.getpid(), signal.SIGTERM)\n"
              "    time.sleep(5)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert (proc.returncode, proc.stderr) == (-signal.SIGTERM, "")


def test_a_stop_signal_delivered_twice_is_one_request_and_a_second_one_says_it_exits():
    """SIGTERM twice 50 ms apart (a scheduler signals the process group and the launcher forwards it again) is one
    request: the process lives on to checkpoint. A second request later exits at once with the signal's status,
    after one line saying so (it used to die with 143 and no word)."""
    script = ("import os, signal, time\n"
              "from vitx.runner import preemption\n"
              "with preemption.StopRequests([signal.SIGTERM]) as requests:\n"
              "    os.kill(os.getpid(), signal.SIGTERM)\n"
              "    time.sleep(0.05)\n"
              "    os.kill(os.getpid(), signal.SIGTERM)\n"
              "    print(requests.received, flush=True)\n"
              "    time.sleep(preemption.REPEAT_S + 0.2)\n"
              "    os.kill(os.getpid(), signal.SIGTERM)\n"
              "    time.sleep(5)\n"
              "print('not reached', flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == -signal.SIGTERM and proc.stdout == "SIGTERM\n", (proc.stdout, proc.stderr[-2000:])
    assert proc.stderr == ("stopped: a second stop signal (SIGTERM): exiting at once, without a checkpoint of this "
                           "step; run the same command again (given --resume, a run or a suite continues from what "
                           "is on disk)\n")


def test_two_runs_cannot_write_one_directory(tmp_path):
    """While a run holds its directory, a second one started on it stops in one line and writes nothing; once
    the first is gone (killed, even), the directory is free."""
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom vitx.runs.rundir import RunDir\n"
                               f"with RunDir({str(out)!r}).exclusive() as owned:\n"
                               "    print(owned, flush=True); time.sleep(600)"],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)  # holds the lock as a training run does
    try:
        assert holder.stdout.readline().strip() == "True"
        proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, output_dir=str(out))))
        assert proc.returncode == 2, proc.stderr
        assert f"another vitx process (pid {holder.pid}) is writing {out}" in proc.stderr
        assert not (out / "checkpoints").exists() and not (out / "metrics.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()
    assert pretrain(tiny(tmp_path, output_dir=str(out)))["step"] == 6


def test_deepspeed_is_told_the_micro_batch_and_the_clip():
    """vitx hands DeepSpeed no DataLoader, so `train_micro_batch_size_per_gpu: auto` must be filled in; its
    engine clips, so --grad-clip goes into its config, and a config that disagrees is refused (DeepSpeed is
    not installed here: the plugin's config is what Accelerate would hold)."""
    from types import SimpleNamespace

    from vitx.runner.config import PretrainConfig
    from vitx.runner.launch import configure_deepspeed

    def accelerator(config):
        plugin = SimpleNamespace(deepspeed_config=config)
        return SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=plugin), num_processes=4)

    acc = accelerator({"train_micro_batch_size_per_gpu": "auto", "gradient_clipping": "auto"})
    configure_deepspeed(acc, PretrainConfig(batch_size=512, grad_accum=2, grad_clip=1.0))
    assert acc.state.deepspeed_plugin.deepspeed_config == {
        "train_micro_batch_size_per_gpu": 64, "gradient_accumulation_steps": 2, "gradient_clipping": 1.0}
    with pytest.raises(VitxError, match="clips gradients at 0.5 but --grad-clip is 1.0"):
        configure_deepspeed(accelerator({"gradient_clipping": 0.5}), PretrainConfig(grad_clip=1.0))
    configure_deepspeed(SimpleNamespace(state=SimpleNamespace()), PretrainConfig())  # no DeepSpeed: nothing


def test_save_every_minutes_checkpoints_on_the_clock(tmp_path):
    """--save-every-minutes: a checkpoint whenever that much time has passed since the last one, whatever
    --save-every says (here a hair of a minute: every step)."""
    out = tmp_path / "run"
    pretrain(tiny(tmp_path, steps=4, save_every=1000, save_every_minutes=1e-9, keep_checkpoints=10,
                  eval_samples=0, output_dir=str(out)))
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [f"step_{s:08d}" for s in (1, 2, 3, 4)]


@pytest.mark.parametrize("tracker, modules, install", [
    ("tensorboard", ("tensorboard", "tensorboardX"), "pip install tensorboard"),
    ("wandb", ("wandb",), "pip install wandb"),
    ("mlflow", ("mlflow",), "pip install mlflow"),
])
def test_a_tracker_that_cannot_start_is_one_line_before_the_run(tracker, modules, install, tmp_path, monkeypatch):
    """`--log-with X` where X does not import (made so here, whatever is installed): one line naming what to
    install, exit 2, and nothing written, for pretrain and transfer alike (Accelerate alone warns and trains on
    without it)."""
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)  # `import X` now raises ModuleNotFoundError
    out = tmp_path / "run"
    proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, output_dir=str(out), log_with=tracker)))
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (f"error: --log-with {tracker}: {modules[0]} is not installed here; {install} (or choose "
                           "another tracker, or --log-with none)\n")
    assert not out.exists()
    proc = vitx_cli("transfer", "--from", "scratch", "--model", "vit-nano/4", "--log-with", tracker,
                    "--output-dir", str(out))
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: --log-with {tracker}: {modules[0]} is not")
    assert not out.exists()


def test_an_unknown_tracker_is_one_line():
    proc = vitx_cli("pretrain", "--log-with", "tensorbord", "--output-dir", "never-written")
    assert proc.returncode == 2 and proc.stderr == (
        "error: --log-with must be auto, none or one or more of tensorboard, wandb, mlflow, comet_ml, aim, clearml, "
        "dvclive, got 'tensorbord'\n")
    assert not (ROOT / "never-written").exists()

"""A run ends, and says how it goes while it runs: loader workers that stop with their process (never a hang at
exit, even with garbage collection off), and progress as plain or JSON lines where the output is a log file."""
from __future__ import annotations

import json
import math
import multiprocessing
import re
import subprocess
import sys
import textwrap

import pytest

from .helpers import ROOT, as_flags, metrics, tiny, vitx_cli

# A loader with one worker whose iterator is kept alive by a reference cycle, with garbage collection off: at
# interpreter exit multiprocessing sends the worker SIGTERM and joins it. The worker first proves that a SIGTERM
# from anyone else (a scheduler signalling the whole job) leaves it working.
WORKER_SCRIPT = textwrap.dedent("""
    import gc, sys
    gc.disable()
    from vitx.data.loader import train_loader
    from vitx.data.procedural import Shapes
    from vitx.data.transforms import Preprocess

    loader = train_loader(Shapes(size=16, length=64), Preprocess(image_size=16), global_micro_batch=8, rank=0,
                          world=1, seed=0, start_micro_step=0, workers=1, skip_corrupt=False)
    batches = iter(loader)
    next(batches)
    print(*(w.pid for w in batches._workers), flush=True)
    sys.stdin.readline()  # the test signals the worker meanwhile
    print(tuple(next(batches)["image"].shape), flush=True)
    cycle = [batches]
    cycle.append(cycle)  # only the (disabled) collector could free the iterator: exit must stop its worker
    print("done", flush=True)
""")


def test_worker_ignores_others_sigterm_and_exits_with_its_process():
    proc = subprocess.Popen([sys.executable, "-c", WORKER_SCRIPT], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        worker = int(proc.stdout.readline())
        subprocess.run(["kill", "-TERM", str(worker)], check=True)  # from this process: not the worker's parent
        proc.stdin.write("\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=120)  # a hang, not a speed: it ends in seconds, or never
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert out.split() == ["(8,", "3,", "16,", "16)", "done"]


def test_run_stops_its_loader_workers(tmp_path):
    """The training stream's workers are stopped when the run ends (here while the trainer, which holds the
    stream, is still referenced), not left to the garbage collector or the interpreter's exit."""
    from vitx.runner.loop import Trainer
    from vitx.runner.setup import build, resolve_config

    cfg, _ = resolve_config(tiny(tmp_path, steps=2, save_every=2, workers=1, eval_samples=4), resume=False)
    trainer = Trainer(build(cfg))
    trainer.fit()
    assert trainer.step_count == 2 and multiprocessing.active_children() == []


def test_ctrl_c_is_one_line_and_the_run_resumes(tmp_path, monkeypatch):
    """Ctrl-C in the middle of a run (at step 4; the checkpoint of step 3 is on disk): one line, status 130
    (typer alone exits 130 in silence), the loader stopped, and --resume continues from step 3."""
    import os
    import signal

    from vitx.runner.loop import Trainer

    step = Trainer.step

    def step_then_ctrl_c(self, *args):
        step(self, *args)
        if self.step_count == 4:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(Trainer, "step", step_then_ctrl_c)
    # Python's own Ctrl-C handler, as a terminal gives it: a shell's background job inherits SIGINT ignored
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        flags = as_flags(tiny(tmp_path, workers=1))
        proc = vitx_cli("pretrain", *flags)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert proc.returncode == 130
    checkpoint = tmp_path / "run" / "checkpoints" / "step_00000003"
    assert proc.stderr.splitlines()[-1] == \
        f"interrupted: Ctrl-C; the last checkpoint, {checkpoint} (step 3), is intact: continue from it with --resume"
    assert multiprocessing.active_children() == []
    monkeypatch.setattr(Trainer, "step", step)
    resumed = vitx_cli("pretrain", *flags, "--resume")
    assert resumed.returncode == 0 and "resuming" in resumed.stdout and "at step 3" in resumed.stdout


LINE = re.compile(r"^pretrain (\d+)/6 \(\d+%\) \| loss [\d.]+ \| top1 [\d.]+ \| lr [\d.e+-]+ \| [\d.]+ img/s \| input wait \d+% \| "
                  r"grad_norm [\d.]+( \| val_loss [\d.]+ \| val_top1 [\d.]+)? \| \d+:\d\d:\d\d, ETA (\d+:\d\d:\d\d|-)$")


def test_log_lines_when_output_is_not_a_terminal(tmp_path):
    """In a log file (captured stdout is not a terminal: `vitx pretrain > log.txt`): one flushed line per
    --log-every steps, with the validation figures on the checkpoint's line; no progress bar; errors alone on
    stderr."""
    proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, log_every=2)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr == ""
    lines = [m for m in map(LINE.match, proc.stdout.splitlines()) if m]
    assert [int(m.group(1)) for m in lines] == [2, 3, 4, 6]  # every 2 steps, and the checkpoints at 3 and 6
    assert [m.group(2) is not None for m in lines] == [False, True, False, True]  # validation at checkpoints
    assert "━" not in proc.stdout and proc.stdout.splitlines()[-1].startswith("done: step 6")


def test_log_format_json_and_quiet(tmp_path):
    """--log-format json: stdout is one JSON object per line and nothing else (`| jq` reads it); the lines for
    people (header, data, done) go to stderr."""
    proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, log_every=2, output_dir=str(tmp_path / "a"))),
                    "--log-format", "json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in proc.stdout.splitlines()]  # every line: a JSON object
    assert all(isinstance(r, dict) for r in records)
    assert [line.split(":")[0] for line in proc.stderr.splitlines()] == ["vitx 0.1.0", "threads", "optimisation", "data",
                                                                    "done"]
    assert [r["step"] for r in records] == [2, 3, 4, 6]
    assert all(r["run"] == "pretrain" and r["total"] == 6 and r["loss"] > 0 and r["eta_s"] >= 0 for r in records)
    assert records[-1]["eta_s"] == 0 and "val_top1" in records[-1]

    quiet = vitx_cli("pretrain", *as_flags(tiny(tmp_path, output_dir=str(tmp_path / "b"))), "--quiet")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    assert len(metrics(tmp_path / "b")) == 6  # written as always

    bad = vitx_cli("pretrain", "--log-format", "xml", "--output-dir", str(tmp_path / "c"))
    assert bad.returncode == 2 and bad.stderr.strip() == \
        "error: --log-format must be one of auto, bar, lines, json, got 'xml'"


def test_a_transfer_in_json_prints_only_json_on_stdout(tmp_path):
    """The same for `vitx transfer`: each run's records on stdout, the task's lines and the results table on
    stderr."""
    proc = vitx_cli("transfer", "--from", "scratch", "--model", "vit-nano/4", "--shots", "20", "--batch-size", "8",
                    "--no-sweep", "--steps", "2", "--test-samples", "8", "--workers", "0", "--no-curves",
                    "--log-format", "json", "--output-dir", str(tmp_path / "t"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r["run"], r["step"], r["total"]) for r in records] == [("vtab/dsprites_loc final lr 0.01 × 2 on 20", 2, 2)]
    assert "vtab/dsprites_loc: test top-1" in proc.stderr and "transfer results (test top-1)" in proc.stderr


def test_a_full_or_read_only_disk_is_one_line_in_every_command(monkeypatch):
    """Whatever command meets a full, over-quota or read-only disk (inspect, eval fewshot --output, reproduce, ...)
    says so in one line, exit 2; other OS errors stay bugs with their traceback."""
    import errno

    import vitx.cli

    def write_fails(code: int):
        def app(**kw):
            raise OSError(code, "os says no", "/data/out/analysis.json")
        return app

    expected = {errno.EROFS: "the filesystem is read-only", errno.ENOSPC: "no space left on the device",
                errno.EDQUOT: "the disk quota is used up"}
    for code, reason in expected.items():
        monkeypatch.setattr(vitx.cli, "app", write_fails(code))
        proc = vitx_cli("inspect", "runs/x")
        assert (proc.returncode, proc.stderr) == (2, f"error: cannot write /data/out/analysis.json: {reason}\n")
    monkeypatch.setattr(vitx.cli, "app", write_fails(errno.EBADF))
    with pytest.raises(OSError):
        vitx_cli("inspect", "runs/x")


@pytest.fixture
def ctrl_c_handler():
    """Python's own Ctrl-C handler, as a terminal gives it (a shell's background job, or a worker of pytest-xdist,
    inherits SIGINT ignored, which vitx leaves alone)."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_while_a_figure_is_drawn_or_a_checkpoint_written_stops_and_resume_draws_the_curves(
        tmp_path, monkeypatch, ctrl_c_handler):
    """Ctrl-C in curves.png's drawing (which catches every failure to draw as a warning) and in Accelerate's
    state saving: exit 130 with its line each time, never a warning and a run that carries on; a matplotlib import
    cut short is forgotten, not left half-made; --resume then finishes the run with its curves.png."""
    import os
    import signal
    import sys
    import types

    import accelerate
    import vitx.plots

    draw, save_state = vitx.plots.draw_run, accelerate.Accelerator.save_state
    out = tmp_path / "run"
    flags = as_flags(tiny(tmp_path, steps=1, save_every=1, warmup_steps=0, eval_samples=0, curves=True))

    def drawing(*args, **kwargs):  # a Ctrl-C in the middle of an import of matplotlib's
        sys.modules["matplotlib._vitx_cut_short"] = types.ModuleType("matplotlib._vitx_cut_short")
        os.kill(os.getpid(), signal.SIGINT)
        return draw(*args, **kwargs)

    def saving(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return save_state(self, *args, **kwargs)

    for patch, resume in [((vitx.plots, "draw_run", drawing), ()), ((accelerate.Accelerator, "save_state", saving),
                                                                    ("--resume",))]:
        monkeypatch.setattr(*patch)
        proc = vitx_cli("pretrain", *flags, *resume)
        monkeypatch.undo()
        assert (proc.returncode, proc.stderr.splitlines()[-1]) == \
            (130, f"interrupted: Ctrl-C; no checkpoint of {out} had been written yet (--resume would start the run "
                  "over)"), \
            proc.stderr[-2000:]
        assert "warning" not in proc.stderr and not list(out.glob("checkpoints/step_*"))  # stopped in the first save
        assert not any(name.startswith("matplotlib._vitx") for name in sys.modules)
    resumed = vitx_cli("pretrain", *flags, "--resume")
    assert resumed.returncode == 0 and "warning" not in resumed.stderr, resumed.stderr[-2000:]
    assert (out / "curves.png").is_file() and json.loads((out / "config.json").read_text())["step"] == 1


def test_a_stop_signal_in_start_up_or_a_stalled_wait_for_input_stops_at_once(tmp_path, monkeypatch):
    """SIGTERM during start-up, or while the loop waits for a batch that does not come (a stalled loader): the
    run stops within a second, one line, exit 75, rather than never (the flag was read at step ends only). In
    the wait the loop is at a step boundary: the steps since the last checkpoint are saved there."""
    import os
    import signal
    import threading
    import time

    import vitx.runner.setup as setup
    from vitx.runner.loop import Trainer
    from vitx.runner.stepping import Stepping

    build, batches = setup.build, Stepping.batches

    def signalled_build(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return build(*args, **kwargs)

    monkeypatch.setattr(setup, "build", signalled_build)
    monkeypatch.setattr("vitx.runner.entry.build", signalled_build)
    proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, output_dir=str(tmp_path / "start"))))
    assert (proc.returncode, proc.stderr.splitlines()[-1]) == (75, (
        "stopped: SIGTERM during start-up, before the first step: stopped at once; run the same command again "
        "(given --resume, the run continues from what is on disk)"))
    monkeypatch.undo()

    def stalled_from_step_2(self):
        if self.step_count < 2:
            return batches(self)
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
        while True:  # a batch that never comes
            time.sleep(0.05)

    monkeypatch.setattr(Stepping, "batches", stalled_from_step_2)
    flags = as_flags(tiny(tmp_path, save_every=100, eval_samples=0, output_dir=str(tmp_path / "stall")))
    began = time.perf_counter()
    proc = vitx_cli("pretrain", *flags)
    assert time.perf_counter() - began < 30  # (the run itself is seconds; a stall is forever)
    out = tmp_path / "stall"
    assert (proc.returncode, proc.stderr.splitlines()[-1]) == (75, (
        f"stopped: SIGTERM at step 2: checkpoint {out / 'checkpoints' / 'step_00000002'} written; run the same "
        "command with --resume to continue")), proc.stderr[-2000:]
    monkeypatch.setattr(Trainer, "step", lambda self, *a: pytest.fail("no step after the stop"))
    monkeypatch.setattr(Stepping, "batches", lambda self: stalled_from_step_2(self) if self.step_count >= 2 else
                        pytest.fail("resumed at step 2"))
    again = vitx_cli("pretrain", *flags, "--resume")  # at step 2 and stalled again: nothing new to save
    assert (again.returncode, again.stderr.splitlines()[-1]) == (75, (
        f"stopped: SIGTERM at step 2, before its next step began: checkpoint {out / 'checkpoints' / 'step_00000002'}"
        " holds it; run the same command with --resume to continue"))


def test_a_disk_that_fills_under_the_training_state_is_one_line_and_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    """torch.save (Accelerate's optimizer and random states) on a full disk raises a RuntimeError without an OS
    error (`[enforce fail at inline_container.cc:672] . unexpected pos`): the one "no space" line every other
    file gives, exit 2, the partial checkpoint removed and the last one intact."""
    import os

    import torch

    real_save, real_statvfs = torch.save, os.statvfs

    def full(obj, f, *args, **kwargs):
        if "step_00000004" in str(f):
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 4352 vs 4240")
        return real_save(obj, f, *args, **kwargs)

    def nearly_full(path):
        found = real_statvfs(path)
        return os.statvfs_result((found.f_bsize, found.f_frsize, found.f_blocks, 0, 0, *found[5:]))

    monkeypatch.setattr(torch, "save", full)
    monkeypatch.setattr(os, "statvfs", nearly_full)
    out = tmp_path / "run"
    proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, steps=6, save_every=2, eval_samples=0)))
    assert "Traceback" not in proc.stderr and proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.splitlines()[-1] == (
        f"error: cannot write {out / 'checkpoints' / 'step_00000004'}: no space left on the device; the earlier "
        "checkpoints are intact (the newest: step_00000002): fix that, then continue with --resume")
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000002"]
    assert json.loads((out / "config.json").read_text())["step"] == 2
    monkeypatch.undo()
    resumed = vitx_cli("pretrain", *as_flags(tiny(tmp_path, steps=6, save_every=2, eval_samples=0)), "--resume")
    assert resumed.returncode == 0 and json.loads((out / "config.json").read_text())["step"] == 6


def test_a_stop_acted_on_at_once_names_the_last_checkpoint_or_says_there_is_none(tmp_path):
    """Ctrl-C, or a stop signal outside a training loop, while a run writes its folder: the line names the last
    complete checkpoint and its step, or says that none was written (a partial one, without its marker, is not
    one); with no run writing, it claims no checkpoint at all."""
    import contextlib
    import os
    import signal
    import time

    from vitx.runner.preemption import Stop, command_stops, doing, writing
    from vitx.runs.rundir import MARKER, RunDir

    run = RunDir(tmp_path / "run")
    (run.checkpoints / "step_00000004").mkdir(parents=True)  # being written: no marker yet

    def stopped(signum: int, writes: RunDir | None) -> str:
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            with pytest.raises(Stop) as caught, command_stops(), doing("in its evaluation"), \
                    writing(writes) if writes else contextlib.nullcontext():
                os.kill(os.getpid(), signum)
                time.sleep(5)
        finally:
            signal.signal(signal.SIGINT, previous)
        return f"{caught.value.error.label}: {caught.value.error} ({caught.value.error.exit_code})"

    assert stopped(signal.SIGINT, run) == (f"interrupted: Ctrl-C; no checkpoint of {run.path} had been written yet "
                                           "(--resume would start the run over) (130)")
    assert stopped(signal.SIGTERM, run) == (f"stopped: SIGTERM in its evaluation: stopped at once; no checkpoint of "
                                            f"{run.path} had been written yet (--resume would start the run over) (75)")
    for step in (2, 4):
        (run.checkpoints / f"step_{step:08d}").mkdir(exist_ok=True)
        (run.checkpoints / f"step_{step:08d}" / MARKER).write_text("{}")
    last = run.checkpoints / "step_00000004"
    assert stopped(signal.SIGINT, run) == (f"interrupted: Ctrl-C; the last checkpoint, {last} (step 4), is intact: "
                                           "continue from it with --resume (130)")
    assert stopped(signal.SIGTERM, run) == (f"stopped: SIGTERM in its evaluation: stopped at once; the last "
                                            f"checkpoint, {last} (step 4), is intact: continue from it with --resume "
                                            "(75)")
    assert stopped(signal.SIGINT, None) == ("interrupted: Ctrl-C; run the same command again (given --resume, a run "
                                            "or a suite continues from what is on disk) (130)")


def test_a_stopped_evaluation_offers_no_resume(tmp_path, monkeypatch):
    """`vitx eval` keeps nothing between calls: its stop line says to run it again, not to give --resume (which
    it has not)."""
    import os
    import signal
    import time

    from vitx.evaluators.frozen import Frozen

    def signalled(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        return []

    monkeypatch.setattr(Frozen, "datasets", signalled)
    proc = vitx_cli("eval", "knn", "--from", "scratch", "--model", "vit-nano/4")
    assert (proc.returncode, proc.stderr.strip()) == (75, "stopped: SIGTERM: stopped at once; run the same command "
                                                          "again"), proc.stderr[-2000:]


@pytest.mark.parametrize("signum, expected", [
    ("SIGTERM", (75, "stopped: SIGTERM as the command started, before it began: nothing was written; run the same "
                     "command again\n")),
    ("SIGINT", (130, "interrupted: Ctrl-C as the command started, before it began: nothing was written; run the same "
                     "command again\n"))])
def test_the_start_up_handlers_come_with_vitx_s_first_line(signum, expected):
    """`vitx` and `python -m vitx` take a stop signal or Ctrl-C as one line with the stop's status from the first
    line of vitx/__init__.py on (they came at the command line's imports, 0.6 s later on a loaded machine, which
    ended the process with 143 and no word); only Python's own start-up is before it. A program that merely
    imports vitx (a plugin's module run with -m, a notebook) keeps its signals."""
    import ast

    body = ast.parse((ROOT / "vitx" / "__init__.py").read_text()).body
    assert [ast.unparse(node) for node in body[1:3]] == ["from .runner.preemption import starting as _starting",
                                                         "_starting()"]  # (body[0]: the docstring)
    script = ("import os, signal, sys, time\n"
              # as a shell starts a command (pytest-xdist's workers ignore SIGINT, and a child inherits that)
              "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
              "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
              "sys.argv[0], sys.orig_argv = '-m', [sys.executable, '-m', {module!r}]  # as -m imports the package\n"
              "import vitx\n"
              "print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL,\n"
              "      signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True)\n"
              f"os.kill(os.getpid(), signal.{signum})\n"
              "time.sleep(5)\n")
    proc = subprocess.run([sys.executable, "-c", script.format(module="vitx")], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert (proc.returncode, proc.stderr) == expected, proc.stderr[-2000:]
    proc = subprocess.run([sys.executable, "-c", script.format(module="vitx_mae.tool")], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert proc.stdout == "True True\n" and proc.returncode in (-15, -2), (proc.stdout, proc.stderr[-2000:])


def test_a_stop_that_lands_in_a_finalizer_or_before_the_command_line_still_stops():
    """Python ignores an exception raised in a finalizer (a `__del__`, a generator the collector closes), so a
    Ctrl-C landing there would be lost and the run carry on: it is raised again a moment later. And in the
    console script's first imports, before the command line installs its handlers, a stop signal is one line
    with its status rather than 143 and no word."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from vitx.runner.preemption import Stop, StopRequests, Waiting, command_stops

    class Collected:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)  # its handler runs in here, and Python ignores what it raises

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(Stop) as stopped, command_stops():
            Collected()
            time.sleep(5)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert str(stopped.value.error).startswith("Ctrl-C; ") and stopped.value.error.exit_code == 130

    class CollectedInTheWait:  # a stop signal while the loop waits for its input, landing in a finalizer
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)

    with command_stops(), StopRequests([signal.SIGTERM]) as requests:
        with pytest.raises(Waiting), requests.at_once():
            CollectedInTheWait()
            time.sleep(5)
        assert requests.received == "SIGTERM"

    script = ("import os, signal, sys, time\n"
              # as a shell starts a command (pytest-xdist's workers ignore SIGINT, and a child inherits that)
              "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
              "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
              "sys.argv[0] = os.path.join(sys.prefix, 'bin', 'vitx')  # as the console script starts\n"
              "from vitx.runner.preemption import starting\n"
              "starting()\n"
              "os.kill(os.getpid(), signal.SIGTERM)\n"
              "time.sleep(5)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert (proc.returncode, proc.stderr) == (75, "stopped: SIGTERM as the command started, before it began: "
                                                  "nothing was written; run the same command again\n")


def test_a_stop_during_validation_gives_up_the_validation_but_not_the_last_steps(tmp_path, monkeypatch):
    """A stop that comes while the validation split is evaluated: the checkpoint comes next and the run stops, so
    the validation is given up (16 s of a 4,000-image split was past a scheduler's grace period; several
    processes agree on it each batch: test_distributed); at the last step the run finishes, so it is done there."""
    from types import SimpleNamespace

    from vitx.runner.loop import Trainer
    from vitx.runner.setup import build, resolve_config

    cfg, _ = resolve_config(tiny(tmp_path, steps=2, save_every=2, workers=0, eval_samples=8), resume=False)
    trainer = Trainer(build(cfg))
    assert "val_loss" in trainer.evaluate()  # no stop: evaluated
    trainer.agreement.requests = SimpleNamespace(received="SIGTERM")  # as the loop's StopRequests on a signal
    assert trainer.evaluate() == {} and trainer.setup.model.training  # given up, the model back in training mode
    trainer.step_count = cfg.steps
    assert "val_loss" in trainer.evaluate()  # the last step's: done


def test_json_log_lines_are_strict_json_with_non_finite_figures_named():
    """A diverged figure (NaN) is null in a --log-format json line and in metrics.jsonl, named in `nonfinite`:
    collectors' strict parsers reject NaN; vitx reads it back as NaN."""
    from vitx.runner.reporting import strict_json

    line = strict_json({"step": 4, "loss": float("nan"), "val_loss": float("inf"), "top1": 0.25})
    assert json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in a strict JSON line")) == {
        "step": 4, "loss": None, "val_loss": None, "top1": 0.25, "nonfinite": ["loss", "val_loss"]}


def test_metrics_jsonl_is_strict_json_and_reads_back_nan(tmp_path):
    from vitx.plots.series import read_metrics
    from vitx.runner.reporting import MetricsLog

    log = MetricsLog(tmp_path / "metrics.jsonl", None)
    log.write({"step": 1, "loss": float("nan"), "top1": 0.5, "watch": [{"value": float("inf"), "kind": "head"}]})
    log.close()
    text = (tmp_path / "metrics.jsonl").read_text()
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in metrics.jsonl")) == {
        "step": 1, "loss": None, "top1": 0.5, "watch": [{"value": None, "kind": "head"}], "nonfinite": ["loss"]}
    [back] = read_metrics(tmp_path)
    assert math.isnan(back.pop("loss")) and back == {"step": 1, "top1": 0.5, "watch": [{"value": None, "kind": "head"}]}


def test_a_loader_workers_hangup_at_a_stop_prints_no_traceback(capsys):
    """A stop ends the main process mid-handshake with a worker's resource sharer (about 1 stop in 5): that
    worker thread's ConnectionResetError is the stop, not a failure; any other error still prints."""
    import threading

    from vitx.data.loader import _quiet_hangups

    def raised(exc: BaseException) -> threading.ExceptHookArgs:
        try:
            raise exc
        except BaseException as caught:  # noqa: BLE001
            return threading.ExceptHookArgs([type(caught), caught, caught.__traceback__, None])

    _quiet_hangups(raised(ConnectionResetError(104, "Connection reset by peer")))
    _quiet_hangups(raised(EOFError()))
    assert capsys.readouterr().err == ""
    _quiet_hangups(raised(ValueError("a real failure")))
    assert "ValueError: a real failure" in capsys.readouterr().err
    # the resource sharer's own loop reports through sys.excepthook (multiprocessing/resource_sharer.py `_serve`)
    from vitx.data.loader import _quiet_sharer

    reset = raised(ConnectionResetError(104, "Connection reset by peer"))
    _quiet_sharer(reset.exc_type, reset.exc_value, reset.exc_traceback)
    assert capsys.readouterr().err == ""
    failed = raised(ValueError("a real failure"))
    _quiet_sharer(failed.exc_type, failed.exc_value, failed.exc_traceback)
    assert "ValueError: a real failure" in capsys.readouterr().err


def test_evaluation_builds_no_graph(tmp_path):
    """evaluate runs under torch.no_grad (a DDP forward with gradients on waits for the other processes: a
    process with no test image then hangs its partner, as a decorator moved by one line once did)."""
    import torch

    from vitx.runner.loop import Trainer
    from vitx.runner.setup import build, resolve_config

    cfg, _ = resolve_config(tiny(tmp_path, steps=2, save_every=2, workers=0, eval_samples=4), resume=False)
    trainer = Trainer(build(cfg))
    seen = []
    hook = trainer.setup.model.register_forward_hook(lambda *a: seen.append(torch.is_grad_enabled()))
    trainer.evaluate()
    hook.remove()
    assert seen and not any(seen)

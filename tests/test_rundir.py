"""The run folder never loses or misstates work: a run never overwrites another, the top-level files are the
newest checkpoint's, a half-removed checkpoint never passes for complete, names that are not ours are left
alone, a write that fails (full or read-only disk, a file in the way) or a damaged training state is one line,
and config.json says truthfully how the run was made and changed."""
from __future__ import annotations

import errno
import json
import os
import pickle
import shlex
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

import vitx
from vitx.runner import pretrain
from vitx.runner.config import PretrainConfig
from vitx.runs.rundir import OWNED, RUN_MARK, RunDir

from .helpers import as_flags, metrics, tiny, vitx_cli

SHORT = dict(steps=4, save_every=2, warmup_steps=1, eval_samples=0)  # two checkpoints: step 2 and step 4


def _errors(proc) -> list[str]:
    """The error lines (progress lines go to stderr too); a traceback fails the test."""
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


def _fake_checkpoint(run: RunDir, step: int, complete: bool = True, marked: bool = True) -> Path:
    """A checkpoint folder as vitx lays one out (`marked`: with the marker vitx writes first; False: as vitx wrote
    them before the marker existed)."""
    path = run.checkpoints / f"step_{step:08d}"
    (path / "accelerate").mkdir(parents=True)
    (path / "accelerate" / "optimizer.bin").write_text(f"optimizer of step {step}")
    if marked:
        (path / OWNED).write_text("")
    (path / "config.json").write_text(f"config.json of step {step}")
    save_file({"w": torch.zeros(2)}, str(path / "model.safetensors"), metadata={"step": str(step)})
    if complete:
        (path / "trainer_state.json").write_text(json.dumps({"step": step}))
    return path


def test_a_run_that_finished_while_another_was_setting_up_is_never_overwritten(tmp_path, monkeypatch):
    """Run B looks at the folder (empty), spends its setup indexing data; run A completes there meanwhile; B
    reaches the lock: it refuses in one line and A's run is as A left it."""
    import vitx.runner.entry as loop

    real = loop.build
    finished: dict[str, bytes] = {}

    def build_while_a_finishes(cfg, resume_from=None):
        setup = real(cfg, resume_from)
        monkeypatch.setattr(loop, "build", real)
        pretrain(tiny(tmp_path, seed=1, **SHORT))  # run A, same --output-dir
        finished["model"] = (tmp_path / "run" / "model.safetensors").read_bytes()
        return setup

    monkeypatch.setattr(loop, "build", build_while_a_finishes)
    proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, seed=2, **SHORT)))  # run B
    assert proc.returncode == 2
    assert len(_errors(proc)) == 1 and "another vitx process wrote to" in proc.stderr, proc.stderr
    assert "step_00000004" in proc.stderr and "nothing was overwritten" in proc.stderr
    run = tmp_path / "run"
    assert (run / "model.safetensors").read_bytes() == finished["model"]
    assert json.loads((run / "config.json").read_text())["run"]["seed"] == 1


def test_a_kill_before_the_top_level_follows_its_checkpoint_is_repaired(tmp_path, monkeypatch):
    """Killed after checkpoints/step_4 is in place but before model.safetensors etc. point at it: --resume
    (here: already complete) makes the top level step 4's, not step 2's."""
    real = os.link

    def killed(src, dst):
        if "step_00000004" in str(src):
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(os, "link", killed)
    with pytest.raises(KeyboardInterrupt):
        pretrain(tiny(tmp_path, **SHORT))
    monkeypatch.setattr(os, "link", real)
    run = tmp_path / "run"
    assert json.loads((run / "config.json").read_text())["step"] == 2  # stale: what the probe found

    # step 4's model.safetensors truncated (a copy that stopped short): refused in one line before any link, and
    # the top level stays step 2's good files
    newest = run / "checkpoints" / "step_00000004" / "model.safetensors"
    whole, before = newest.read_bytes(), (run / "model.safetensors").read_bytes()
    newest.write_bytes(whole[:len(whole) // 2])
    proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, **SHORT)), "--resume")
    assert proc.returncode == 2 and _errors(proc) == [
        f"error: {newest} is damaged (incomplete metadata, file not fully covered); the top-level files were left "
        "as they are: delete checkpoints/step_00000004 to continue from the checkpoint before it"], proc.stderr
    assert (run / "model.safetensors").read_bytes() == before
    assert json.loads((run / "config.json").read_text())["step"] == 2

    newest.write_bytes(whole)
    assert pretrain(tiny(tmp_path, **SHORT), resume=True) == {"step": 4}
    assert json.loads((run / "config.json").read_text())["step"] == 4
    for name in ("model.safetensors", "heads.safetensors", "config.json"):
        assert os.path.samefile(run / name, run / "checkpoints" / "step_00000004" / name)


def test_a_start_repairs_the_top_level_and_removes_half_pruned_checkpoints(tmp_path):
    run = RunDir(tmp_path / "run")
    _fake_checkpoint(run, 2)
    newest = _fake_checkpoint(run, 4)
    half = _fake_checkpoint(run, 1, complete=False)  # a prune killed after its marker went
    (run.path / "config.json").write_text("config.json of step 2")  # a kill left the top level behind
    assert run.latest() == newest
    run.repair()
    assert (run.path / "config.json").read_text() == "config.json of step 4"
    with safe_open(str(run.path / "model.safetensors"), framework="pt") as mirrored:
        assert mirrored.metadata() == {"step": "4"}
    run.clean_partial()
    assert not half.exists() and sorted(p.name for p in run.steps()) == ["step_00000002", "step_00000004"]


def test_a_folder_in_the_way_of_a_top_level_file_is_one_line_and_leaves_no_link(tmp_path):
    run = RunDir(tmp_path / "run")
    _fake_checkpoint(run, 2)
    newest = _fake_checkpoint(run, 4)
    (run.path / "config.json").write_text("config.json of step 2")
    (run.path / "curves.png").mkdir()  # (and no curves.png in the checkpoint: the stale top-level file goes)
    (newest / "curves.png").write_bytes(b"png of step 4")
    with pytest.raises(vitx.VitxError, match=rf"^cannot write {run.path / 'curves.png'}: a folder of that name is in the "
                                        "way; move it aside and run the same command again$"):
        run.repair()
    assert not list(run.path.glob(".*.link"))


def test_pruning_removes_the_completeness_marker_first(tmp_path, monkeypatch):
    """A kill while pruning the oldest checkpoint must never leave its marker over missing weights."""
    import vitx.runs.rundir as rundir

    run = RunDir(tmp_path / "run")
    _fake_checkpoint(run, 2)
    _fake_checkpoint(run, 4)
    staged = run.staging(6)
    save_file({"w": torch.zeros(2)}, str(staged / "model.safetensors"))

    def killed_rmtree(path, ignore_errors=False):  # the weights go first, then the kill
        (Path(path) / "model.safetensors").unlink(missing_ok=True)
        raise KeyboardInterrupt

    monkeypatch.setattr(rundir.shutil, "rmtree", killed_rmtree)
    with pytest.raises(KeyboardInterrupt):
        run.publish(staged, 6, {"step": 6}, keep=2)
    monkeypatch.undo()  # (rundir.shutil is shutil: the patched rmtree is shutil.rmtree until undone)
    for p in run.checkpoints.iterdir():
        assert (p / "model.safetensors").exists() or not (p / "trainer_state.json").exists(), p.name
    assert run.latest().name == "step_00000006"
    half = run.checkpoints / "step_00000002"
    assert sorted(p.name for p in half.iterdir()) == [OWNED, "accelerate"]  # vitx's marker goes last
    run.clean_partial()  # so the next start recognises the half-removed folder as its own, and finishes the job
    assert sorted(p.name for p in run.checkpoints.iterdir()) == ["step_00000004", "step_00000006"]


def test_names_that_are_not_checkpoints_are_left_alone(tmp_path):
    """A user's step_old or step_00000020.bak (even with a trainer_state.json in it) is neither the latest
    checkpoint nor pruned, and crashes nothing."""
    out = tmp_path / "run"
    pretrain(tiny(tmp_path, **SHORT))
    shutil.rmtree(out / "checkpoints" / "step_00000004")  # resumed from step 2 among the strays
    stray = [out / "checkpoints" / name for name in ("step_old", "step_00000020.bak", "step_")]
    for p in stray:
        p.mkdir(parents=True)
        (p / "trainer_state.json").write_text(json.dumps({"step": 20}))
    proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, **SHORT)), "--resume")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert RunDir(out).latest().name == "step_00000004"
    assert all(p.is_dir() for p in stray)
    assert sorted(p.name for p in RunDir(out).steps()) == ["step_00000002", "step_00000004"]


@pytest.mark.parametrize("where", ["file", "under a file"])
def test_an_output_dir_that_is_a_file_is_one_line(tmp_path, where):
    (tmp_path / "notes.txt").write_text("mine")
    out = tmp_path / "notes.txt" if where == "file" else tmp_path / "notes.txt" / "run"
    proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, output_dir=str(out))))
    assert proc.returncode == 2 and len(_errors(proc)) == 1, proc.stderr
    assert f"error: cannot write {out}: " in proc.stderr and "choose another --output-dir" in proc.stderr
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.fixture
def read_only(tmp_path, monkeypatch) -> Path:
    """A folder nothing can be made in: chmod 0o555, and where that does not bind (root), mkdir under it fails
    and os.access says so, as on a read-only filesystem."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    if os.access(folder, os.W_OK):  # root
        real_mkdir = os.mkdir

        def mkdir(path, *args, **kwargs):
            if str(path).startswith(str(folder)):
                raise OSError(errno.EROFS, "Read-only file system", str(path))
            return real_mkdir(path, *args, **kwargs)

        real_access = os.access
        monkeypatch.setattr(os, "mkdir", mkdir)
        monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if str(path).startswith(str(folder))
                            and mode & os.W_OK else real_access(path, mode, **kw))
    yield folder
    folder.chmod(0o755)


def test_a_read_only_output_dir_is_one_line(read_only, tmp_path):
    proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, output_dir=str(read_only / "run"))))
    assert proc.returncode == 2 and len(_errors(proc)) == 1, proc.stderr
    assert f"error: cannot write {read_only / 'run'}: " in proc.stderr and "choose another --output-dir" in proc.stderr

    proc = vitx_cli("transfer", "--task", "embedded/digits", "--from", "scratch", "--model", "vit-nano/4",
                    "--image-size", "16", "--shots", "20", "--output-dir", str(read_only / "transfer"))
    assert proc.returncode == 2 and len(_errors(proc)) == 1, proc.stderr
    assert f"error: cannot write {read_only / 'transfer'}" in proc.stderr


def test_a_full_disk_while_saving_is_one_line_and_keeps_the_earlier_checkpoints(tmp_path, monkeypatch):
    import vitx.safe_io as safe_io

    real = safe_io.save_file

    def full(tensors, path, metadata=None):
        if "step_00000004" in str(path):
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        return real(tensors, path, metadata=metadata)

    monkeypatch.setattr(safe_io, "save_file", full)
    out = tmp_path / "run"
    proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, **SHORT)))
    assert proc.returncode == 2 and len(_errors(proc)) == 1, proc.stderr[-2000:]
    assert f"error: cannot write {out / 'checkpoints' / 'step_00000004'}: no space left on the device" in proc.stderr
    assert "the earlier checkpoints are intact (the newest: step_00000002)" in proc.stderr
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000002"]  # no partial left behind
    assert json.loads((out / "config.json").read_text())["step"] == 2
    vitx.load_backbone(out / "checkpoints" / "step_00000002")


def test_a_full_disk_under_the_metrics_log_is_one_line(tmp_path, monkeypatch):
    from vitx.runner.reporting import MetricsLog

    def full(self, record):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "run" / "metrics.jsonl"))

    monkeypatch.setattr(MetricsLog, "write", full)
    proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, **SHORT)))
    assert proc.returncode == 2 and len(_errors(proc)) == 1, proc.stderr[-2000:]
    assert f"error: cannot write {tmp_path / 'run' / 'metrics.jsonl'}: no space left on the device" in proc.stderr
    assert "no checkpoint had been written yet: fix that, then run the command again" in proc.stderr  # (none is)
    assert "intact" not in proc.stderr


@pytest.mark.parametrize("name", ["optimizer.bin", "scheduler.bin"])
def test_a_damaged_or_malicious_training_state_is_one_line_and_never_run(tmp_path, name):
    pretrain(tiny(tmp_path, **SHORT))
    out = tmp_path / "run"
    shutil.rmtree(out / "checkpoints" / "step_00000004")
    witness = tmp_path / "unpickled"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {witness}",))

    (out / "checkpoints" / "step_00000002" / "accelerate" / name).write_bytes(pickle.dumps(Payload()))
    with warnings.catch_warnings(record=True) as caught:  # torch's two-line warning on the pickle's protocol
        warnings.simplefilter("always")
        proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, **SHORT)), "--resume")
    assert not [w for w in caught if "pickle protocol" in str(w.message)]  # the error line alone
    assert proc.returncode == 2 and len(_errors(proc)) == 1, proc.stderr[-2000:]
    assert f"the training state in {out / 'checkpoints' / 'step_00000002'} is damaged" in proc.stderr
    assert "delete that checkpoint" in proc.stderr
    assert not witness.exists()


def test_resume_may_lower_the_lr_and_config_json_records_it(tmp_path):
    opts = tiny(tmp_path, **SHORT)
    pretrain(opts)
    out = tmp_path / "run"
    before = {m["step"]: m["lr"] for m in metrics(out)}
    shutil.rmtree(out / "checkpoints" / "step_00000004")  # back to step 2, as after a divergence
    lr = before[2] / 20  # (the first update's is 0: the warm-up starts from 0)
    proc = vitx_cli("pretrain", *as_flags({**opts, "lr": lr}), "--resume")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"note: --lr {lr:g} from step 2 (the run had" in proc.stdout
    after = {m["step"]: m["lr"] for m in metrics(out)}
    assert [after[s] for s in (1, 2)] == [before[s] for s in (1, 2)]
    assert [after[s] for s in (3, 4)] == pytest.approx([before[s] / 20 for s in (3, 4)], rel=1e-5)
    config = json.loads((out / "config.json").read_text())
    assert config["lr_changes"] == [{"step": 2, "from": PretrainConfig().lr, "to": lr}]
    assert config["run"]["lr"] == lr and config["resumed_with"][0].endswith("--resume")


def test_a_diverged_run_without_a_good_checkpoint_says_so(tmp_path):
    """--lr 1e3 (the most it takes): the first update throws the weights to ~1e3 (finite, useless), then every step is skipped. The
    checkpoints written since hold those weights: none is named good."""
    proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, steps=12, save_every=2, lr=1e3, max_nonfinite_steps=3,
                                               eval_samples=0, warmup_steps=0)))  # (the first update at 1e9)
    assert proc.returncode == 2 and len(_errors(proc)) == 1, proc.stderr[-2000:]
    assert "the run has diverged; no checkpoint from before step" in proc.stderr
    assert "step_0" not in proc.stderr


def test_a_resume_that_found_nothing_records_the_command_without_resume(tmp_path, monkeypatch):
    """The first run was killed before its first checkpoint; `--resume` then made the run: config.json's command
    is that line without `--resume`, and nothing is listed as resumed."""
    import vitx.runner.loop as loop

    def killed(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(loop.Trainer, "save", killed)
    flags = as_flags(tiny(tmp_path, **SHORT))
    assert vitx_cli("pretrain", *flags).returncode == 130
    monkeypatch.undo()
    proc = vitx_cli("pretrain", *flags, "--resume")
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["command"] == shlex.join(["vitx", "pretrain", *flags]) and "resumed_with" not in config


def _tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (hidden ones too), by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_folder_of_the_users_files_is_never_written_over(tmp_path):
    """--output-dir naming a folder that holds the user's files and no vitx run: pretrain and transfer refuse in
    one line and change nothing there; a new folder, an empty one and a vitx run's own (resumed) still work."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"mine": true}')
    (mine / "NOTES.md").write_text("my notes")
    before = _tree(mine)
    proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, output_dir=str(mine), **SHORT)))
    assert proc.returncode == 2 and _errors(proc) == [
        f"error: --output-dir {mine} is not empty and holds no vitx run (it holds NOTES.md, config.json); vitx would "
        "write over files there: give a new or empty folder"], proc.stderr
    proc = vitx_cli("transfer", "--task", "embedded/digits", "--from", "scratch", "--model", "vit-nano/4",
                    "--image-size", "16", "--shots", "10", "--output-dir", str(mine))
    assert proc.returncode == 2 and len(_errors(proc)) == 1 and "holds no vitx run" in proc.stderr, proc.stderr
    assert _tree(mine) == before and sorted(p.name for p in mine.iterdir()) == ["NOTES.md", "config.json"]

    (tmp_path / "empty").mkdir()
    pretrain(tiny(tmp_path, output_dir=str(tmp_path / "empty"), **SHORT))
    assert (tmp_path / "empty" / RUN_MARK).is_file() and RunDir(tmp_path / "empty").latest().name == "step_00000004"
    shutil.rmtree(tmp_path / "empty" / "checkpoints" / "step_00000004")
    (tmp_path / "empty" / "NOTES.md").write_text("the user's notes, in their run")  # still the run's folder
    assert pretrain(tiny(tmp_path, output_dir=str(tmp_path / "empty"), **SHORT), resume=True)["step"] == 4
    assert (tmp_path / "empty" / "NOTES.md").read_text() == "the user's notes, in their run"


def test_a_transfer_and_a_pre_training_never_share_a_folder(tmp_path):
    """A transfer into the pre-training run it starts from (or any run's folder), and a pre-training into a
    transfer's folder, are refused in one line: each would write its report.html and folders among the other's."""
    run = tmp_path / "run"
    pretrain(tiny(tmp_path, output_dir=str(run), **SHORT))
    before = _tree(run)
    transfer = ["transfer", "--task", "embedded/digits", "--from", str(run), "--shots", "10", "--no-sweep",
                "--steps", "2", "--batch-size", "8", "--workers", "0", "--log-with", "none", "--no-curves"]
    proc = vitx_cli(*transfer, "--output-dir", str(run))
    assert proc.returncode == 2 and _errors(proc) == [
        f"error: --output-dir {run} holds a pre-training run; a transfer goes into a folder of its own: give a new "
        "one"], proc.stderr
    assert _tree(run) == before
    assert vitx_cli(*transfer, "--output-dir", str(tmp_path / "t")).returncode == 0
    proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, output_dir=str(tmp_path / "t"), **SHORT)))
    assert proc.returncode == 2 and _errors(proc) == [
        f"error: --output-dir {tmp_path / 't'} holds a transfer; a pre-training run goes into a folder of its own: "
        "give a new one"], proc.stderr
    final = tmp_path / "t" / "embedded-digits" / "final"  # a transfer's own run: never taken over, --resume or not
    kept = _tree(final)
    for extra in ([], ["--resume"]):
        proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, output_dir=str(final), **SHORT)), *extra)
        assert proc.returncode == 2 and _errors(proc) == [
            f"error: --output-dir {final} holds a transfer's work item (a sweep point or final run: `vitx transfer "
            "--resume` continues it); a pre-training run goes into a folder of its own: give a new one"], proc.stderr
    assert _tree(final) == kept


def test_a_run_whose_checkpoints_are_gone_is_never_replaced_by_a_new_one(tmp_path):
    """A finished run whose checkpoints/ was removed (or damaged past use): --resume found nothing to resume and
    started a new run over its model.safetensors and metrics.jsonl; now one line, and the weights stay."""
    run = tmp_path / "run"
    pretrain(tiny(tmp_path, output_dir=str(run), **SHORT))
    shutil.rmtree(run / "checkpoints")
    weights = (run / "model.safetensors").read_bytes()
    for extra in (["--resume"], []):
        proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, output_dir=str(run), **SHORT)), *extra)
        assert proc.returncode == 2 and _errors(proc) == [
            f"error: {run} holds a run's weights (model.safetensors) but no complete checkpoint to "
            f"{'resume' if extra else 'continue'} from (checkpoints/ missing or damaged); a new run would replace "
            "them: choose another --output-dir, or move the folder aside"], proc.stderr
    assert (run / "model.safetensors").read_bytes() == weights


def test_runs_written_before_the_marker_are_still_vitx_s(tmp_path):
    """A run folder written before `.vitx-run` existed is known by its complete checkpoint, or, killed before the
    first one, by its lock holding a pid; a `.lock` of someone else's (not a pid) is not."""
    from vitx.runs.ownership import check_output_dir, is_vitx_folder

    finished = RunDir(tmp_path / "finished")
    _fake_checkpoint(finished, 2, marked=False)
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / ".lock").write_text("12345\n")
    (killed / "metrics.jsonl").write_text('{"step": 1}\n')
    other = tmp_path / "other"
    other.mkdir()
    (other / ".lock").write_text("held by my editor")
    assert [is_vitx_folder(p) for p in (finished.path, killed, other)] == [True, True, False]
    check_output_dir(killed)
    with pytest.raises(vitx.VitxError, match="holds no vitx run"):
        check_output_dir(other)


def test_a_save_an_older_vitx_was_killed_in_is_cleaned_up(tmp_path):
    """A staged checkpoint from before the marker (.step_<n>.partial holding only what a save writes: Accelerate's
    state, weights, config) is vitx's: removed at the next start, so the resumed run can save that step again; one
    holding anything else is the user's and stays."""
    run = RunDir(tmp_path / "run")
    old = run.checkpoints / ".step_00000004.partial"
    (old / "accelerate").mkdir(parents=True)
    (old / "accelerate" / "optimizer.bin").write_bytes(b"state")
    (old / "model.safetensors").write_bytes(b"half a file")
    kept = run.checkpoints / ".step_00000005.partial"
    kept.mkdir()
    (kept / "model.safetensors").write_bytes(b"weights")
    (kept / "notes.txt").write_text("mine")
    run.clean_partial()
    assert not old.exists() and (kept / "notes.txt").read_text() == "mine"
    assert run.staging(4).name == ".step_00000004.partial"  # the step can be saved again


def test_start_up_cleanup_removes_only_what_vitx_wrote(tmp_path):
    """checkpoints/ holding a git repository, a notebook's .ipynb_checkpoints, the user's step_5 and a folder of
    vitx's name without its marker: cleanup and pruning remove only vitx's own unfinished and old checkpoints,
    and an older vitx's complete checkpoint stays readable."""
    run = RunDir(tmp_path / "run")
    legacy = _fake_checkpoint(run, 1, marked=False)  # complete, from before the marker: read, never removed
    _fake_checkpoint(run, 2)
    half = _fake_checkpoint(run, 3, complete=False)  # vitx's, killed half-way: removed
    staged = run.staging(4)  # vitx's, a save killed half-way: removed
    users = {".git/HEAD": "ref: refs/heads/main\n", ".ipynb_checkpoints/notes-checkpoint.ipynb": "{}",
             "step_5/mine.txt": "mine", "step_00000006/model.safetensors": "my weights",
             ".step_00000007.partial/mine.txt": "mine too"}
    for name, text in users.items():
        (run.checkpoints / name).parent.mkdir(parents=True, exist_ok=True)
        (run.checkpoints / name).write_text(text)
    run.clean_partial()
    assert not half.exists() and not staged.exists()
    for name, text in users.items():
        assert (run.checkpoints / name).read_text() == text, name
    assert run.latest().name == "step_00000002" and legacy.is_dir()

    newest = run.staging(8)  # pruning to 1 checkpoint: only vitx's marked older one goes
    assert run.publish(newest, 8, {"step": 8}, keep=1) == run.checkpoints / "step_00000008"
    assert sorted(p.name for p in run.checkpoints.iterdir()) == [
        ".git", ".ipynb_checkpoints", ".step_00000007.partial", "step_00000001", "step_00000006", "step_00000008",
        "step_5"]
    for name, text in users.items():
        assert (run.checkpoints / name).read_text() == text, name

    for step in (6, 7):  # a folder of the user's where vitx would write: refused as a file in the way, kept
        with pytest.raises(FileExistsError, match="not"):
            run.publish(run.staging(step), step, {"step": step}, keep=1) if step == 6 else run.staging(step)
        run.clean_partial()
    assert (run.checkpoints / "step_00000006" / "model.safetensors").read_text() == "my weights"
    assert (run.checkpoints / ".step_00000007.partial" / "mine.txt").read_text() == "mine too"


def test_a_resumed_run_keeps_the_users_files_in_checkpoints(tmp_path):
    """The reported case, end to end: a run's checkpoints/ holding .git/ and step_5/mine.txt, resumed: both stay
    byte for byte, and the run finishes."""
    pretrain(tiny(tmp_path, **SHORT))
    checkpoints = tmp_path / "run" / "checkpoints"
    shutil.rmtree(checkpoints / "step_00000004")
    for name in (".git/HEAD", ".git/config", "step_5/mine.txt"):
        (checkpoints / name).parent.mkdir(parents=True, exist_ok=True)
        (checkpoints / name).write_text(f"the user's {name}")
    before = {k: v for k, v in _tree(checkpoints).items() if k.startswith((".git", "step_5"))}
    proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, **SHORT)), "--resume")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {k: v for k, v in _tree(checkpoints).items() if k.startswith((".git", "step_5"))} == before
    assert RunDir(tmp_path / "run").latest().name == "step_00000004"


@pytest.mark.parametrize("state, shown", [('{"step": "abc"}', '"abc"'), ('{"step": -5}', "-5"),
                                          ('{"step": 3}', "3"), ('{"step": true}', "true"), ("[1, 2]", "none"),
                                          ('{"step": ', None), ("[" * 200_000 + "]" * 200_000, None)],
                         ids=["text", "negative", "another-step", "bool", "not-an-object", "torn", "nested-200000"])
def test_a_damaged_trainer_state_is_one_line(tmp_path, state, shown):
    """trainer_state.json is read as a flag is: a step that is not the checkpoint's own whole number (or not
    JSON at all) is one line naming the file, never a resume at step -5."""
    pretrain(tiny(tmp_path, **SHORT))
    out = tmp_path / "run"
    shutil.rmtree(out / "checkpoints" / "step_00000004")
    state_file = out / "checkpoints" / "step_00000002" / "trainer_state.json"
    state_file.write_text(state)
    proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, **SHORT)), "--resume")
    assert proc.returncode == 2 and len(_errors(proc)) == 1, proc.stderr[-2000:]
    if shown is None:
        assert f"error: {state_file} is not valid JSON" in proc.stderr
    else:
        assert _errors(proc) == [f"error: {state_file} is damaged (step {shown}, in the folder step_00000002); "
                                 "delete that checkpoint to resume from the one before it"]
    assert "resuming" not in proc.stdout


def test_a_tampered_run_record_is_one_line_on_resume(tmp_path):
    """The settings a resume reads back from the checkpoint's config.json are type-checked as their flags are:
    `"steps": "abc"` is one line naming the file (it was a TypeError comparing steps)."""
    pretrain(tiny(tmp_path, **SHORT))
    checkpoint = tmp_path / "run" / "checkpoints" / "step_00000002"
    shutil.rmtree(checkpoint.parent / "step_00000004")
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "run": {**config["run"], "steps": "abc"}}))
    proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, **SHORT)), "--resume")
    assert proc.returncode == 2 and _errors(proc) == [
        f"error: {checkpoint}/config.json run: steps must be an integer, got 'abc'"], proc.stderr[-2000:]


def test_a_finished_sweep_point_is_a_transfer_item_without_its_weights(tmp_path):
    """A sweep point keeps its config.json (with its transfer record) after its weights and checkpoints are
    removed: it is still a transfer's, and pre-training into it is refused."""
    from vitx.runs.ownership import ITEM, holds

    point = tmp_path / "sweep" / "lr0.01_steps2"
    point.mkdir(parents=True)
    (point / ".vitx-run").write_text("")
    (point / "config.json").write_text(json.dumps({"run": {}, "transfer": {"task": "embedded/digits"}}))
    assert holds(point) == ITEM
    proc = vitx_cli("pretrain", *as_flags(tiny(tmp_path, output_dir=str(point), **SHORT)))
    assert proc.returncode == 2 and "holds a transfer's work item" in proc.stderr, proc.stderr

"""A suite spread over processes (issue 39): the work list and its partition, leases on a shared folder, shards
run one after another or together, `--jobs`, a shard killed with SIGKILL and rerun, the settings check and
`--dry-run`. Every way of running a suite must give the one process's numbers exactly."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vitx.errors import VitxError

from .helpers import ROOT, vitx_cli
from .test_vtab_release import write_release

SMALL = ["--from", "scratch", "--model", "vit-nano/4", "--shots", "20", "--batch-size", "4", "--select", "suite",
         "--seeds", "0,1", "--test-samples", "16", "--workers", "0", "--no-curves", "--log-with", "none",
         "--log-every", "1"]
FOUR = "vtab/dsprites_loc,vtab/dsprites_ori,vtab/dtd,vtab/pets"  # embedded (synthetic) and two release copies


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    """dtd and pets as miniature VTAB-1k folder releases under one root (the dSprites tasks are embedded)."""
    root = tmp_path_factory.mktemp("release") / "vtab-1k"
    write_release(root, "dtd", 47)
    write_release(root, "oxford_iiit_pet", 37)
    return root


def numbers(out: Path) -> dict:
    """What must not depend on how the suite ran: per task the chosen point, each seed's test top-1, the test
    loss and every sweep point's validation loss; the suite's choice."""
    summary = json.loads((out / "summary.json").read_text())
    tasks = {t["task"]: (t["chosen"], t.get("test_top1_per_seed", [t["test_top1"]]), t["test_loss"],
                         [(p["lr"], p["steps"], p["val_loss"]) for p in t["sweep"]]) for t in summary["tasks"]}
    return {"tasks": tasks, "choice": (summary["selection"]["lr"], summary["selection"]["steps"])}


def journal(out: Path) -> list[list[str]]:
    return [line.split(" ", 4) for line in (out / "leases.log").read_text().splitlines()]


def test_the_work_list_and_its_partition_are_the_same_everywhere_and_balanced(tmp_path):
    from vitx.tasks import select_tasks
    from vitx.transfer import TransferConfig
    from vitx.transfer.items import partition, shard_of, work_list
    from vitx.transfer.protocol import task_dirs

    cfg = TransferConfig(task=FOUR, lrs=[0.01, 0.1], sweep_steps=[500, 2500], seeds=[0, 1], output_dir=str(tmp_path))
    tasks = select_tasks(cfg.task)
    items = work_list(cfg, tasks, task_dirs(cfg, tasks), "suite")
    assert [i.kind for i in items] == ["sweep"] * 16 + ["final"] * 8  # every sweep point first, then the finals
    assert items[0].key == "vtab-dsprites_loc/sweep/lr0.01_steps500" and items[16].key == "vtab-dsprites_loc/final"
    assert items[17].key == "vtab-dsprites_loc/final-seed1" and len({i.key for i in items}) == 24
    assert all(i.steps == 2500 and i.lr is None for i in items[16:])  # until the selection chooses: the longest
    shards = partition(items, 4)
    assert shards == partition(list(items), 4)  # deterministic
    for stage in ("sweep", "final"):  # each stage (the finals wait for the sweep) balanced over the shards
        loads = [sum(i.steps for i, s in zip(items, shards) if s == k and i.kind == stage) for k in range(4)]
        assert max(loads) - min(loads) <= 2500, (stage, loads)
    mine = [shard_of(items, k, 4) for k in range(4)]
    assert sorted(i.key for m in mine for i in m) == sorted(i.key for i in items)  # a partition: all, each once
    assert all(m == sorted(m, key=items.index) for m in mine)  # each in work-list order
    assert shard_of(items, 0, 1) == items


@pytest.mark.parametrize("shard", ["4/4", "1", "a/b", "-1/2", "0/0"])
def test_a_bad_shard_is_one_line(shard):
    from vitx.transfer import TransferConfig

    with pytest.raises(VitxError, match=rf"--shard takes I/N with 0 ≤ I < N .*got '{shard}'"):
        TransferConfig(shard=shard).validate()


@pytest.mark.parametrize("dry", [[], ["--dry-run"]], ids=["run", "dry-run"])
def test_a_shard_count_beyond_any_suite_is_one_line_before_any_folder(dry, tmp_path):
    """N far above a suite's work items (1e20 written out, which no list of shards can hold): one line, exit 2,
    with or without --dry-run, and no folder made or marked as a vitx run."""
    from vitx.transfer.config import MAX_SHARDS

    for shard in ("99999999999999999999/100000000000000000000", "5/100000000000000000000", f"0/{MAX_SHARDS + 1}"):
        proc = vitx_cli("transfer", "--task", "embedded:shapes", "--shard", shard, *dry,
                        "--output-dir", str(tmp_path / "suite"))
        count = int(shard.split("/")[1])
        assert proc.returncode == 2 and proc.stderr == \
            f"error: --shard: N {count:,} is too large: at most {MAX_SHARDS:,}, far above a suite's work items " \
            f"(a typo?); got '{shard[:60]}'\n", proc.stderr[-500:]
        assert not (tmp_path / "suite").exists()


def test_leases_are_exclusive_and_a_dead_holder_s_are_taken_over(tmp_path):
    from vitx.transfer.leases import STALE_AFTER, Leases

    said = []
    mine = Leases(tmp_path, said.append)
    assert mine.take("t/sweep/a") and mine.take("t/sweep/a")  # held by this process now (taken once)
    assert mine.holder("t/sweep/a") is None  # ours: nobody else's
    path = mine.path("t/sweep/a")
    assert json.loads(path.read_text())["pid"] == os.getpid()
    mine.release("t/sweep/a")
    assert not path.exists()

    other = Leases(tmp_path, said.append)
    elsewhere = {"host": "node-7", "pid": 4242, "proc_start": None, "began": "earlier"}
    path.write_text(json.dumps(elsewhere))  # another machine's live lease (its heartbeat is fresh)
    assert str(other.holder("t/sweep/a")) == "node-7:4242" and not other.take("t/sweep/a")
    os.utime(path, (time.time() - STALE_AFTER - 5,) * 2)  # its heartbeat stopped: that machine's process died
    assert other.holder("t/sweep/a") is None and other.take("t/sweep/a")
    assert "took over the lease of node-7:4242 (no heartbeat for" in said[-1]
    other.release("t/sweep/a")

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    here = {**elsewhere, "host": mine.me.host, "boot": mine.me.boot, "pid_ns": mine.me.pid_ns}  # this machine
    path.write_text(json.dumps({**here, "pid": gone.pid}))  # this machine, a dead process
    assert other.stale(other._read(path)) == f"process {gone.pid} is gone" and other.take("t/sweep/a")
    other.release("t/sweep/a")
    path.write_text(json.dumps({**here, "pid": os.getppid()}))  # this machine, alive
    assert not other.take("t/sweep/a")
    path.write_text("")  # a lease being written (O_EXCL, where there are no hard links): its holder's
    assert not other.take("t/sweep/a")
    os.utime(path, (time.time() - 600,) * 2)  # ... or torn by a kill long ago: nobody's
    assert other.take("t/sweep/a")
    other.release("t/sweep/a")
    events = [(e[2], e[3]) for e in journal(tmp_path)]
    assert events == [("taken", "t/sweep/a"), ("done", "t/sweep/a")] + [("taken-over", "t/sweep/a"),
                                                                     ("done", "t/sweep/a")] * 3


def test_each_job_gets_its_share_of_the_machine_and_the_parent_s_settings(tmp_path, monkeypatch):
    """--jobs K: each child gets cores / K threads and a GPU in turn, and runs the parent's settings (written as
    a recipe, read back by the command line as any recipe) one item at a time."""
    from vitx.recipe import resolve
    from vitx.transfer import TransferConfig, jobs

    monkeypatch.setattr(jobs, "cores", lambda: 16)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    envs = [jobs.share_env(i, 4, ["0", "1"]) for i in range(4)]
    assert [(e["OMP_NUM_THREADS"], e["MKL_NUM_THREADS"], e["CUDA_VISIBLE_DEVICES"]) for e in envs] == \
        [("4", "4", "0"), ("4", "4", "1"), ("4", "4", "0"), ("4", "4", "1")]
    alone = jobs.share_env(0, 32, [])  # no GPU, more jobs than cores
    assert "CUDA_VISIBLE_DEVICES" not in alone and alone["OMP_NUM_THREADS"] == "1"

    cfg = TransferConfig(task=FOUR, jobs=4, shard="1/2", seeds=[0, 1], lrs=[0.01, 0.1], adapters=["linear-probe"],
                         output_dir=str(tmp_path / "out"))
    recipe = jobs.write_recipe(tmp_path / "jobs.toml", jobs.child_settings(cfg))
    child = TransferConfig(**resolve(TransferConfig, "transfer", str(recipe), [], {})).validate()
    assert child == TransferConfig(**{**cfg.to_dict(), "jobs": 1, "workers": 3})  # --wait as the parent's


def _elsewhere(leases, host: str = "node-8"):
    """`leases` as a process on another machine sees it (same pid, other host: only its heartbeat tells)."""
    from dataclasses import replace

    leases.me = replace(leases.me, host=host)
    return leases


def test_a_paused_holder_loses_its_lease_and_leaves_the_new_holder_s_alone(tmp_path, monkeypatch):
    """A holder paused past STALE_AFTER has its lease taken over by another machine's process: its heartbeat
    reads the lease again, finds another holder and says so once; its release leaves the new lease in place."""
    from vitx.transfer import leases as module
    from vitx.transfer.leases import STALE_AFTER, Leases

    monkeypatch.setattr(module, "HEARTBEAT", 0.02)
    said, theirs = [], []
    mine = Leases(tmp_path, said.append)
    assert mine.take("t/sweep/a") and mine.still_mine("t/sweep/a")
    path = mine.path("t/sweep/a")
    thief = _elsewhere(Leases(tmp_path, theirs.append))
    with mine._lock:  # the holder paused (SIGSTOP, a frozen VM): its heartbeat stops, a beat in flight ends
        time.sleep(0.1)
        os.utime(path, (time.time() - STALE_AFTER - 5,) * 2)  # ... for over 5 minutes
        assert thief.take("t/sweep/a") and "took over the lease" in theirs[-1]
    deadline = time.time() + 5
    while not said and time.time() < deadline:  # the heartbeat notices
        time.sleep(0.01)
    assert len(said) == 1 and said[0].startswith(f"t/sweep/a: this process's lease was taken over by {thief.me}")
    assert not mine.still_mine("t/sweep/a") and len(said) == 1  # said once
    mine.release("t/sweep/a")  # the item ends here: the lease is the new holder's, and stays
    assert json.loads(path.read_text())["host"] == "node-8" and thief.still_mine("t/sweep/a")
    thief.release("t/sweep/a")
    assert not path.exists()
    assert [e[2] for e in journal(tmp_path)] == ["taken", "taken-over", "lost", "done"]


def test_process_ids_are_looked_up_only_on_the_same_machine(tmp_path):
    """Containers can share a host name (host networking) but not a boot and pid namespace: a lease of another
    namespace, or of a vitx that did not record them, is stale only by its heartbeat, never by its process id."""
    from vitx.transfer.leases import STALE_AFTER, Leases

    leases = Leases(tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    me = leases.me.record()
    path = leases.path("t/final")
    path.parent.mkdir(parents=True)
    for other in ({"pid_ns": 4026531836 if me["pid_ns"] != 4026531836 else 1}, {"boot": "another-boot"},
                  {"boot": None, "pid_ns": None}):
        path.write_text(json.dumps({**me, "pid": gone.pid, **other}))  # its pid is nobody here: not evidence
        assert leases.stale(leases._read(path)) is None and not leases.take("t/final"), other
        os.utime(path, (time.time() - STALE_AFTER - 5,) * 2)
        assert leases.stale(leases._read(path)).startswith("no heartbeat for"), other
    if me["boot"] is not None and me["pid_ns"] is not None:  # Linux: the same machine
        path.write_text(json.dumps({**me, "pid": gone.pid}))
        assert leases.stale(leases._read(path)) == f"process {gone.pid} is gone"


def test_a_lease_that_cannot_be_read_for_a_moment_is_not_stale(tmp_path, monkeypatch):
    """An I/O error reading a lease (NFS, a busy disk) says nothing of its age: it is not taken over."""
    import errno

    from vitx.transfer.leases import Leases

    holder, other = _elsewhere(Leases(tmp_path)), Leases(tmp_path)
    assert holder.take("t/sweep/a")
    real = Path.read_text

    def failing(self, *args, **kwargs):
        if self.suffix == ".lease":
            raise OSError(errno.EIO, "Input/output error")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", failing)
    found = other._read(other.path("t/sweep/a"))
    assert found.unknown and other.stale(found) is None and not other.take("t/sweep/a")
    assert holder.still_mine("t/sweep/a")  # nor does its holder think it lost
    monkeypatch.setattr(Path, "read_text", real)
    holder.release("t/sweep/a")


class _Stub:
    """A Worker that trains nothing: `during(item)` happens while the item runs, then its marker is written."""

    def __init__(self, during=None) -> None:
        self.during, self.ran = during, []

    def run(self, item, choice=None, points=0, confirm=lambda: None) -> None:
        if self.during is not None:
            self.during(item)
        confirm()
        item.marker.parent.mkdir(parents=True, exist_ok=True)
        item.marker.write_text("{}")
        self.ran.append(item.key)


def _scheduler(tmp_path, mine_keys, worker, wait=False, leases=None):
    """A two-sweep-point, one-final task (select task) whose items `mine_keys` are this process's share."""
    import io

    from rich.console import Console

    from vitx.transfer import TransferConfig
    from vitx.transfer.assemble import Assembler
    from vitx.transfer.leases import Leases
    from vitx.transfer.items import FINAL, SWEEP, Item
    from vitx.transfer.schedule import Scheduler
    from vitx.transfer.suite import Suite

    cfg = TransferConfig(task="t", lrs=[0.01, 0.1], sweep_steps=[2], output_dir=str(tmp_path))
    root = tmp_path / "t"
    items = [Item("t", SWEEP, root / "sweep" / f"lr{lr}", tmp_path, 2, lr, 0, n) for n, lr in enumerate(cfg.lrs, 1)]
    items.append(Item("t", FINAL, root / "final", tmp_path, 2, None, 0, 0))
    suite = Suite(cfg, [], [], {}, {"t": root}, "task", items)
    console = Console(file=io.StringIO(), width=400)
    leases = leases or Leases(tmp_path, lambda line: console.print(line, markup=False))
    share = [i for i in items if i.key in mine_keys]
    return Scheduler(suite, worker, Assembler(suite, console), leases, share, wait, console), items


def test_an_item_whose_lease_was_lost_is_not_marked_done_and_another_machine_s_lease_is_pending(tmp_path):
    """The item's lease is taken over while it runs (this process was paused): its marker is not written and
    its lease stays the new holder's. An item of this share leased from another machine, which may have died,
    is not left behind with exit 0: exit 4 naming its heartbeat, or with --wait taken over once stale."""
    from vitx.errors import SelectionPending
    from vitx.transfer.leases import STALE_AFTER, Leases

    thief = _elsewhere(Leases(tmp_path, lambda line: None))

    def paused(item):
        if item.index == 1:
            os.utime(thief.path(item.key), (time.time() - STALE_AFTER - 5,) * 2)
            assert thief.take(item.key)

    worker = _Stub(paused)
    scheduler, (a, b, _) = _scheduler(tmp_path, {"t/sweep/lr0.01", "t/sweep/lr0.1"}, worker)
    with pytest.raises(SelectionPending, match=rf"1 item\(s\) of this process's share are leased by processes on "
                                               rf"other machines: t/sweep/lr0.01 \(node-8:{os.getpid()}, last "
                                               r"heartbeat 0 s ago; taken over after 300 s\); run this again"):
        scheduler.run()
    assert worker.ran == [b.key] and not a.marker.exists() and b.marker.exists()
    assert json.loads(thief.path(a.key).read_text())["host"] == "node-8" and not scheduler.leases.held
    assert [e[2] for e in journal(tmp_path) if e[3] == a.key] == ["taken", "taken-over", "lost", "skipped"]

    waiting, _ = _scheduler(tmp_path, {a.key}, _Stub(), wait=True)
    assert waiting.next_step().kind == "wait"  # --wait: until it is done, or its lease stale
    os.utime(thief.path(a.key), (time.time() - STALE_AFTER - 5,) * 2)
    assert waiting.run() == [a] and a.marker.exists()
    thief.release_all()


def test_no_item_is_taken_after_a_stop_signal(tmp_path):
    """A stop signal that came at an item's last step (which just finishes, so the request stays pending): the
    item is on disk and the process takes no other. One that came between a loop's steps (here inside an item,
    outside any training loop): the process stops at once, the item's lease given back as stopped."""
    from vitx.errors import Preempted
    from vitx.runner.preemption import Stop, StopRequests, command_stops

    def at_last_step(item):
        if item.index == 1:
            with StopRequests([signal.SIGTERM]):  # (the loop's, which answers it at its next step boundary)
                os.kill(os.getpid(), signal.SIGTERM)

    worker = _Stub(at_last_step)
    scheduler, (a, b, final) = _scheduler(tmp_path / "pending", {"t/sweep/lr0.01", "t/sweep/lr0.1"}, worker)
    with command_stops(), pytest.raises(Preempted) as stopped:
        scheduler.run()
    assert str(stopped.value) == ("SIGTERM came as t/sweep/lr0.01 finished (it is on disk): no further item "
                                  "started; run the same command with --resume to continue the suite")
    assert worker.ran == [a.key] and a.marker.exists() and not b.marker.exists()
    assert [(e[2], e[3]) for e in journal(tmp_path / "pending")] == [("taken", a.key), ("done", a.key)]

    def outside_a_loop(item):
        os.kill(os.getpid(), signal.SIGTERM)

    worker = _Stub(outside_a_loop)
    scheduler, (a, b, final) = _scheduler(tmp_path / "at-once", {"t/sweep/lr0.01", "t/sweep/lr0.1"}, worker)
    with command_stops(), pytest.raises(Stop) as stopped:
        scheduler.run()
    assert isinstance(stopped.value.error, Preempted) and stopped.value.error.exit_code == 75
    assert str(stopped.value.error).startswith("SIGTERM: stopped at once; run the same command again (given --resume")
    assert worker.ran == [] and not scheduler.leases.held
    assert [(e[2], e[3]) for e in journal(tmp_path / "at-once")] == [("taken", a.key), ("stopped", a.key)]


def test_the_jobs_counter_counts_what_was_finished_at_each_line(tmp_path):
    """`[k/N done]` beside each journal line counts the items finished by then, not those on disk when the lines
    are read (which printed `[8/8 done]` before the last item had finished)."""
    import io

    from rich.console import Console

    from vitx.transfer.jobs import Journal, Tally, _show

    _, mine = _scheduler(tmp_path, set(), _Stub())
    (tmp_path / "leases.log").write_text("")
    journal, tally = Journal(tmp_path / "leases.log"), Tally(mine, lambda item: False)
    lines = [("h:1", "taken", mine[0].key), ("h:2", "taken", mine[1].key), ("h:1", "done", mine[0].key),
             ("h:1", "taken", mine[2].key), ("h:2", "done", mine[1].key), ("h:1", "done", mine[2].key)]
    (tmp_path / "leases.log").write_text("".join(f"2026-01-01T00:00:00+00:00 {h} {e} {k}\n" for h, e, k in lines))
    out = io.StringIO()
    _show(journal, {"h:1": 0, "h:2": 1}, tally, Console(file=out, width=400))
    assert out.getvalue().splitlines() == [
        "[0/3 done] job 0: taken t/sweep/lr0.01", "[0/3 done] job 1: taken t/sweep/lr0.1",
        "[1/3 done] job 0: done t/sweep/lr0.01", "[1/3 done] job 0: taken t/final",
        "[2/3 done] job 1: done t/sweep/lr0.1", "[3/3 done] job 0: done t/final"]


def test_final_runs_wait_for_their_share_s_sweep_points_and_not_for_a_failed_one(tmp_path):
    """A final run waits for sweep points of its own share that a live process runs (a sibling job), without
    --wait too; for a point of another shard it stops pending; for one that failed in its process it stops
    pending even with --wait (nobody will run it until its shard is run again)."""
    from vitx.transfer.leases import Leases

    sibling = Leases(tmp_path).path("t/sweep/lr0.01")  # held by a process alive on this machine
    sibling.parent.mkdir()
    sibling.write_text(json.dumps({**Leases(tmp_path).me.record(), "pid": os.getppid(), "proc_start": None}))
    share, items = _scheduler(tmp_path, {"t/sweep/lr0.01", "t/sweep/lr0.1", "t/final"}, _Stub())
    items[1].marker.parent.mkdir(parents=True)
    items[1].marker.write_text(json.dumps({"lr": 0.1, "steps": 2, "val_top1": 0.5}))
    step = share.next_step()
    assert step.kind == "wait" and "waiting for them" in step.message, step.message
    alone, _ = _scheduler(tmp_path, {"t/final"}, _Stub())
    sibling.unlink()
    assert alone.next_step().kind == "pending"  # another shard's point, not running: exit 4, as before
    failing = Leases(tmp_path)
    assert failing.take("t/sweep/lr0.01")
    failing.release("t/sweep/lr0.01", "failed")
    waiting, _ = _scheduler(tmp_path, {"t/final"}, _Stub(), wait=True)
    step = waiting.next_step()
    assert step.kind == "pending" and f"t/sweep/lr0.01 (failed in {failing.me})" in step.message, step.message


def test_jobs_have_their_own_settings_session_and_death_and_get_a_stop_at_once(tmp_path, monkeypatch):
    """--jobs: the children's settings and logs are this process's (logs/<host>-<pid>-<id>/: another machine's
    --jobs on the same folder has its own); each child is in its own session (a signal to the job's process group
    reaches only the parent), dies with the parent (PR_SET_PDEATHSIG) and gets a stop signal forwarded at once
    (a repeat more than REPEAT_S later would stop it without a checkpoint)."""
    import io
    import socket
    import threading

    from rich.console import Console

    from vitx.errors import Preempted
    from vitx.runner.preemption import REPEAT_S
    from vitx.transfer import TransferConfig, jobs
    from vitx.transfer.items import SWEEP, Item

    seen = tmp_path / "seen"
    seen.mkdir()
    fake = tmp_path / "python"  # stands for `python -m vitx transfer …`: says what it is, and when it is stopped
    fake.write_text(f"#!{sys.executable}\n" + FAKE_CHILD)
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    monkeypatch.setattr(jobs, "TICK", 0.05)
    monkeypatch.setenv("VITX_TEST_SEEN", str(seen))
    sent = []

    def stop_when_started():
        deadline = time.time() + 60
        while len(list(seen.glob("*.ready"))) < 2:
            if time.time() > deadline:
                return
            time.sleep(0.01)
        sent.append(time.time())
        os.kill(os.getpid(), signal.SIGTERM)  # a scheduler's preemption, to the parent alone

    thread = threading.Thread(target=stop_when_started)
    thread.start()
    cfg = TransferConfig(task="vtab/dtd", jobs=2, output_dir=str(tmp_path / "suite"))
    mine = [Item("vtab/dtd", SWEEP, tmp_path / f"p{n}", tmp_path, 2, 0.01, 0, n) for n in (1, 2, 3)]
    (tmp_path / "p2" / "checkpoints" / "step_00000001").mkdir(parents=True)  # the item a job checkpointed at the stop
    (tmp_path / "p2" / "checkpoints" / "step_00000001" / "trainer_state.json").write_text('{"step": 1}')
    with pytest.raises(Preempted) as stopped:
        jobs.run_jobs(cfg, mine, lambda item: item.index == 1, Console(file=io.StringIO()))
    assert str(stopped.value) == ("SIGTERM: the 2 jobs stopped with 1 of 3 item(s) on disk and 2 left (one of them "
                                  "begun and checkpointed); run the same command with --resume to continue the suite")
    thread.join()
    (folder,) = (tmp_path / "suite" / "logs").iterdir()
    assert folder.name.startswith(f"{socket.gethostname()}-{os.getpid()}-") and (folder / "jobs.toml").is_file()
    for ready in seen.glob("*.ready"):
        pid, sid, death, args = ready.read_text().split(" ", 3)
        assert sid == pid and death == str(int(signal.SIGKILL)), (sid, pid, death)
        assert f"--recipe {folder / 'jobs.toml'}" in args
        assert float((seen / f"{pid}.term").read_text()) - sent[0] < REPEAT_S
    assert sorted(p.name for p in folder.glob("job*.log")) == ["job0.log", "job1.log"]


FAKE_CHILD = """import ctypes, os, signal, sys, time
seen = os.environ["VITX_TEST_SEEN"]
death = ctypes.c_int()
ctypes.CDLL(None).prctl(2, ctypes.byref(death))  # PR_GET_PDEATHSIG


def stop(signum, frame):
    with open(f"{seen}/{os.getpid()}.term", "w") as fh:
        fh.write(repr(time.time()))
    sys.exit(75)


signal.signal(signal.SIGTERM, stop)
with open(f"{seen}/{os.getpid()}.tmp", "w") as fh:
    fh.write(f"{os.getpid()} {os.getsid(0)} {death.value} {' '.join(sys.argv[1:])}")
os.rename(f"{seen}/{os.getpid()}.tmp", f"{seen}/{os.getpid()}.ready")
time.sleep(60)
"""


def test_a_job_pending_makes_the_parent_pending_with_its_line(tmp_path):
    from vitx.errors import SelectionPending
    from vitx.transfer.jobs import describe_failures

    pending, failed = tmp_path / "job0.log", tmp_path / "job1.log"
    pending.write_text("vtab/dtd: ...\nwaiting: 2 final run(s) (vtab/dtd) need the suite's selection, ...\n")
    failed.write_text("error: out of memory\n")
    error = describe_failures([(0, 4, pending)])
    assert isinstance(error, SelectionPending) and str(error).startswith("2 final run(s) (vtab/dtd) need")
    error = describe_failures([(0, 4, pending), (1, 2, failed)])  # a failure is said first
    assert not isinstance(error, SelectionPending) and str(error).startswith("job 1 failed with exit status 2")


def test_temporary_names_are_unique_beyond_the_process_id(tmp_path, monkeypatch):
    """Pods on different hosts often share pid 1 on one shared filesystem: a temporary name is not the pid alone."""
    from vitx import safe_io

    names, real = [], Path.write_text
    monkeypatch.setattr(Path, "write_text", lambda self, *a, **k: (names.append(self.name), real(self, *a, **k))[1])
    safe_io.atomic_write_text(tmp_path / "x.json", "1")
    safe_io.atomic_write_text(tmp_path / "x.json", "2")
    assert safe_io.create_whole(tmp_path / "y.json", "3") and not safe_io.create_whole(tmp_path / "y.json", "4")
    assert len(set(names)) == 4 and all(f"-{os.getpid()}-" in n for n in names), names
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json", "y.json"]  # no temporary file left
    assert (tmp_path / "y.json").read_text() == "3"


def test_task_folders_do_not_depend_on_hash_order(tmp_path, monkeypatch):
    """Data folders that share names in two groups: the names given do not depend on PYTHONHASHSEED (the order a
    set of paths is walked in), or a process would not find another's folders."""
    import pathlib

    from vitx.tasks import Task
    from vitx.transfer import TransferConfig
    from vitx.transfer.folders import task_dirs

    cfg = TransferConfig(output_dir=str(tmp_path))
    tasks = [Task(p, "custom", 2, "label", data=p) for p in ("/r/a/photos", "/r/b/photos", "/s/a-photos",
                                                             "/t/a-photos")]
    named = []
    for first in ("data-photos", "data-a-photos"):  # the two orders a set of the two shared folders can take
        monkeypatch.setattr(pathlib.PurePath, "__hash__", lambda self, first=first: 0 if self.name == first else 1)
        named.append({n: p.name for n, p in task_dirs(cfg, tasks).items()})
    assert named[0] == named[1] and len(set(named[0].values())) == 4, named


def test_skip_missing_is_refused_in_a_shard_where_a_task_is_missing(tmp_path):
    """The shards of a suite partition one work list and choose on one set of tasks: a shard that skipped a task
    another has would compute others. Refused in one line."""
    import io

    from rich.console import Console

    from vitx.tasks import select_tasks
    from vitx.transfer import TransferConfig
    from vitx.transfer.folders import task_dirs
    from vitx.transfer.protocol import open_suite

    cfg = TransferConfig(task="vtab/dtd,vtab/pets", data_dir=str(tmp_path / "none"), skip_missing=True,
                         shard="0/2", output_dir=str(tmp_path / "out"))
    tasks = select_tasks(cfg.task)
    with pytest.raises(VitxError, match=r"^--skip-missing with --shard: no data here for vtab/dtd, vtab/pets, "):
        open_suite(cfg, tasks, task_dirs(cfg, tasks), Console(file=io.StringIO()))


def test_only_the_main_process_prints_results_and_a_task_of_a_suite_s_folder_says_its_selection(tmp_path):
    """A launch's second process assembles silently (its lines and table were a second copy); the summary of
    one task from a --select suite folder (`selection`: {"select": "suite"}, no point) prints without a KeyError."""
    import io

    from rich.console import Console

    from vitx.tasks import select_tasks
    from vitx.transfer import TransferConfig
    from vitx.transfer.assemble import Assembler
    from vitx.transfer.suite import Suite

    cfg = TransferConfig(task="vtab/dtd", select="suite", output_dir=str(tmp_path))
    (task,) = select_tasks(cfg.task)
    root = tmp_path / "vtab-dtd"
    root.mkdir()
    (root / "result.json").write_text(json.dumps({
        "task": task.name, "group": task.group, "test_top1": 0.5, "selection": "suite", "seconds": 3.0,
        "chosen": {"lr": 0.1, "steps": 2}, "sweep": [{"lr": 0.1, "steps": 2, "val_top1": 0.4}]}))
    shown = {}
    for main in (True, False):
        out = io.StringIO()
        suite = Suite(cfg, [task], [task], {}, {task.name: root}, "task", [])
        assert Assembler(suite, Console(file=out, width=300), main).summary()["selection"] == {"select": "suite"}
        shown[main] = out.getvalue()
    assert "already done" in shown[True] and "selection: suite" in shown[True] and shown[False] == ""


def test_shards_run_one_after_another_give_the_one_process_numbers(release, tmp_path):
    """Two tasks, a 2-point sweep, seeds 0 and 1, --select suite: the suite in one process, then as shards 0/2
    and 1/2 run one after the other. Shard 0 first: its finals need the suite's selection, whose sweep points
    shard 1 has not run: it names them and exits 4. Shard 1 then runs its sweep points and its finals; shard 0
    again its finals and, last, writes the summary. Same numbers, each item run once; a shard with another --lrs
    is refused in one line."""
    common = ["transfer", "--task", "vtab/dtd,vtab/pets", "--data-dir", str(release), "--lrs", "0.01,0.1",
              "--sweep-steps", "2", *SMALL]
    one = vitx_cli(*common, "--output-dir", str(tmp_path / "one"))
    assert one.returncode == 0, one.stderr[-2000:]
    out = tmp_path / "shards"
    first = vitx_cli(*common, "--output-dir", str(out), "--shard", "0/2")
    assert first.returncode == 4, first.stderr[-2000:]
    assert first.stderr.startswith("waiting: 2 final run(s) (vtab/dtd, vtab/pets) need the suite's selection, which "
                                   "waits for 2 sweep point(s) not on disk yet: ")
    assert "(shard 1/2)" in first.stderr and "pass --wait" in first.stderr and len(first.stderr.splitlines()) == 1
    second = vitx_cli(*common, "--output-dir", str(out), "--shard", "1/2")
    assert second.returncode == 0, second.stderr[-2000:]
    assert "not on disk yet" in second.stdout and not (out / "summary.json").exists()
    last = vitx_cli(*common, "--output-dir", str(out), "--shard", "0/2")
    assert last.returncode == 0, last.stderr[-2000:]
    assert numbers(out) == numbers(tmp_path / "one")
    done = [e[3] for e in journal(out) if e[2] == "done"]
    assert len(done) == len(set(done)) == 8  # 4 sweep points, 2 tasks × 2 seeds of final runs: each once

    other = vitx_cli(*[a if a != "0.01,0.1" else "0.01,0.3" for a in common], "--output-dir", str(out),
                     "--shard", "1/2")
    assert other.returncode == 2 and other.stderr.strip().splitlines() == [
        f"error: {out} holds a transfer with different settings (--lrs 0.01,0.1 there, 0.01,0.3 here); run it "
        f"with the settings of {out / 'suite.json'}, or choose another --output-dir"]


def test_dry_run_lists_the_paper_suite_and_estimates_its_cost(tmp_path):
    """`--dry-run` of the paper's VTAB-1k recipe with 3 seeds: 19 tasks × (4 sweep points + 3 final runs), the
    steps and images they take, the shards' share, and a measured estimate; no data is needed, nothing is
    written. (A vit-nano at 16 px stands in for B/16 at 384 px to keep the measurement short.)"""
    from vitx.recipe import resolve
    from vitx.transfer import TransferConfig, transfer
    from vitx.transfer.config import with_protocol

    out = tmp_path / "vtab"
    chosen = with_protocol(resolve(TransferConfig, "transfer", str(ROOT / "recipes/paper/vtab-1k.toml"), [],
                                   {"start": "scratch", "model": "vit-nano/4", "image_size": 16, "seeds": [0, 1, 2],
                                    "output_dir": str(out), "shard": "0/8", "dry_run": True}))
    plan = transfer(TransferConfig(**chosen))
    totals = plan["totals"]
    assert (totals["items"], totals["sweep"], totals["final"], totals["tasks"]) == (133, 76, 57, 19)
    assert totals["optimiser_steps"] == 19 * (2 * 500 + 2 * 2500) + 19 * 3 * 2500 == 256_500
    assert totals["images"] == 256_500 * 512
    assert sum(s["items"] for s in plan["shards"]) == 133 and len(plan["shards"]) == 8
    assert max(s["optimiser_steps"] for s in plan["shards"]) - min(s["optimiser_steps"] for s in plan["shards"]) <= 3000
    estimate = plan["estimate"]
    assert estimate["seconds_per_image"] > 0 and estimate["image_size"] == 16
    assert estimate["hours"] == pytest.approx(totals["images"] * estimate["seconds_per_image"] / 3600)
    assert not out.exists()

    cli = vitx_cli("transfer", "--recipe", "recipes/paper/vtab-1k.toml", "--from", "scratch", "--model", "vit-nano/4",
                   "--image-size", "16", "--seeds", "0,1,2", "--output-dir", str(out), "--dry-run", "--shard", "0/8")
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert "133 items (76 sweep points, 57 final runs) on 19 task(s): 256,500 optimiser steps of 512" in cli.stdout
    assert "CPU-hours for the work list; the longest of 8 shards" in cli.stdout and not out.exists()


# The suite run by processes started together, and killed: each a new process (what is tested is the process).

HOLD = """
import os, time
from vitx.runner import loop

_step = loop.Trainer.step


def step(self, *args):
    _step(self, *args)
    if self.step_count == int(os.environ["VITX_TEST_HOLD_AT"]):
        while True:  # until killed
            time.sleep(0.05)


loop.Trainer.step = step
"""


def _start(args: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "vitx", *args], cwd=ROOT, stdout=open(log, "w"),
                            stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


@pytest.mark.slow
def test_four_shards_together_and_two_jobs_give_the_one_process_numbers(release, tmp_path):
    """Acceptance: a 4-task suite (sweep 2 × 2, seeds 0,1, --select suite) in one process, as --shard 0/4 … 3/4
    started at the same time on one folder (with --wait), and with --jobs 2: the same per-task test figures and
    the same chosen point; no item run twice."""
    common = ["transfer", "--task", FOUR, "--data-dir", str(release), "--lrs", "0.01,0.1", "--sweep-steps", "2,4",
              *SMALL]
    one = vitx_cli(*common, "--output-dir", str(tmp_path / "one"))
    assert one.returncode == 0, one.stderr[-2000:]
    shards = [_start([*common, "--output-dir", str(tmp_path / "shards"), "--shard", f"{i}/4", "--wait"],
                     tmp_path / f"shard{i}.log") for i in range(4)]
    assert [p.wait(timeout=900) for p in shards] == [0] * 4, (tmp_path / "shard0.log").read_text()[-2000:]
    jobs = vitx_cli(*common, "--output-dir", str(tmp_path / "jobs"), "--jobs", "2")
    assert jobs.returncode == 0, jobs.stderr[-2000:]
    assert "job 0: done" in jobs.stdout and "job 1: done" in jobs.stdout
    expected = numbers(tmp_path / "one")
    for way in ("shards", "jobs"):
        assert numbers(tmp_path / way) == expected, way
        done = [e[3] for e in journal(tmp_path / way) if e[2] == "done"]
        assert len(done) == len(set(done)) == 24, way


@pytest.mark.slow
def test_a_shard_killed_mid_item_and_rerun_gives_the_same_summary(release, tmp_path):
    """Acceptance: shard 1/2 killed with SIGKILL in the middle of its first sweep point (after a checkpoint),
    shard 0/2 running beside it; shard 1/2 rerun takes over its stale lease, continues the point from its
    checkpoint and finishes the suite: the one process's numbers, no item finished twice."""
    common = ["transfer", "--task", "vtab/dtd,vtab/pets", "--data-dir", str(release), "--lrs", "0.01,0.1",
              "--sweep-steps", "3", "--save-every", "1", *SMALL]
    one = vitx_cli(*common, "--output-dir", str(tmp_path / "one"))
    assert one.returncode == 0, one.stderr[-2000:]
    out = tmp_path / "shards"
    plugin = tmp_path / "hold.py"
    plugin.write_text(HOLD)
    held = _start(["--plugin", str(plugin), *common, "--output-dir", str(out), "--shard", "1/2"],
                  tmp_path / "held.log", {"VITX_TEST_HOLD_AT": "2"})
    deadline = time.time() + 600
    while not list(out.glob("*/sweep/*/checkpoints/step_00000001")):  # held at step 2: after that checkpoint
        assert held.poll() is None, (tmp_path / "held.log").read_text()[-2000:]
        assert time.time() < deadline
        time.sleep(0.05)
    leased = [e[3] for e in journal(out) if e[2] == "taken"]
    os.kill(held.pid, signal.SIGKILL)
    assert held.wait() == -signal.SIGKILL
    assert len(leased) == 1 and (out / "leases" / (leased[0].replace("/", "__") + ".lease")).exists()

    beside = _start([*common, "--output-dir", str(out), "--shard", "0/2", "--wait"], tmp_path / "beside.log")
    again = vitx_cli(*common, "--output-dir", str(out), "--shard", "1/2", "--wait")
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"{leased[0]}: took over the lease of" in again.stdout and "is gone)" in again.stdout
    assert beside.wait(timeout=600) == 0, (tmp_path / "beside.log").read_text()[-2000:]
    assert numbers(out) == numbers(tmp_path / "one")
    events = journal(out)
    done = [e[3] for e in events if e[2] == "done"]
    assert len(done) == len(set(done)) == 8
    assert [e[3] for e in events if e[2] == "taken-over"] == leased


def test_a_suite_begun_by_an_earlier_vitx_says_its_claims_are_not_seen(tmp_path):
    """An earlier vitx called the leases claims (<output>/claims/*.claim): a process of this one does not see
    those as held, and says so once, naming the folder; a folder without any says nothing."""
    from vitx.transfer.leases import Leases

    said: list[str] = []
    Leases(tmp_path, said.append)
    (tmp_path / "claims").mkdir()
    Leases(tmp_path, said.append)
    assert said == []
    (tmp_path / "claims" / "t__final.claim").write_text("{}")
    Leases(tmp_path, said.append)
    assert said == [f"note: {tmp_path / 'claims'} holds items taken by processes of an earlier vitx (its leases were "
                    "called claims): this process does not see them as held, so make sure none of those processes "
                    "still runs"]


def test_jobs_are_never_more_than_the_items_left(tmp_path, monkeypatch):
    """--jobs 1000 on 2 items left started 1000 torch processes (400 MB each): as many jobs as items, said."""
    import io

    from rich.console import Console

    from vitx.transfer import TransferConfig, jobs
    from vitx.transfer.items import SWEEP, Item

    started = []

    def start(command, recipe, log, index, count, extra, gpus):
        started.append((index, count))
        return subprocess.Popen(["true"])

    monkeypatch.setattr(jobs, "start_vitx", start)
    monkeypatch.setattr(jobs, "TICK", 0.01)
    cfg = TransferConfig(task="vtab/dtd", jobs=1000, output_dir=str(tmp_path / "suite"))
    mine = [Item("vtab/dtd", SWEEP, tmp_path / f"p{n}", tmp_path, 2, 0.01, 0, n) for n in (1, 2, 3)]
    said = io.StringIO()
    assert jobs.run_jobs(cfg, mine, lambda item: item.index == 1, Console(file=said, width=200)) == []
    assert started == [(0, 2), (1, 2)] and "--jobs 1000: 2 job(s), one per item left" in said.getvalue()


def test_items_are_never_started_from_a_start_trained_on_since_the_suite_began(pretrained_run, tmp_path):
    """A transfer stopped, its --from run resumed and trained on, the transfer resumed: its items left would have
    started from the new weights beside items done from the old ones, under one summary. suite.json records the
    start's step; a joining process whose start has moved on is refused in one line."""
    import shutil

    from vitx.transfer import TransferConfig
    from vitx.transfer.folders import check_suite

    run = shutil.copytree(pretrained_run, tmp_path / "run", ignore=shutil.ignore_patterns("checkpoints"))
    cfg = TransferConfig(task="embedded/digits", start=str(run), output_dir=str(tmp_path / "suite"))
    assert check_suite(cfg, ["embedded/digits"], joining=False, begun=False)
    step = json.loads((tmp_path / "suite" / "suite.json").read_text())["start_step"]
    check_suite(cfg, ["embedded/digits"], joining=True, begun=True)  # the same weights: it goes on
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "step": step + 50}))
    with pytest.raises(VitxError, match=rf"holds a transfer from {run} at step {step}, which is at step {step + 50} "
                                        r"now: its items left would start from another model than those done"):
        check_suite(cfg, ["embedded/digits"], joining=True, begun=True)


def test_a_new_transfer_of_other_tasks_into_a_folder_with_finished_ones_is_refused(tmp_path):
    """Without --resume, a transfer of other tasks into a folder where tasks were trained replaced suite.json, and
    the folder's summary and page lost them (their results still on disk); --resume adds the new tasks."""
    from vitx.transfer import TransferConfig
    from vitx.transfer.folders import check_suite

    out = tmp_path / "suite"
    done = out / "embedded-digits"
    (done / "final").mkdir(parents=True)
    (done / "transfer.json").write_text(json.dumps({"task": "embedded/digits"}))
    cfg = TransferConfig(task="embedded/shapes", start="scratch", output_dir=str(out))
    for joining in (False, True):  # (--resume with only the new task would drop it from suite.json all the same)
        with pytest.raises(VitxError, match=rf"^{out} holds a transfer of embedded/digits too: name every task of the "
                                            r"folder in --task \(with --resume\) to add tasks to it"):
            check_suite(cfg, ["embedded/shapes"], joining=joining, begun=False)
    assert check_suite(cfg, ["embedded/digits", "embedded/shapes"], joining=True, begun=False)  # both named: added
    assert json.loads((out / "suite.json").read_text())["tasks"] == ["embedded/digits", "embedded/shapes"]

"""A suite spread over processes (issue 39): the work list and its partition, claims on a shared folder, shards
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
    return [line.split(" ", 4) for line in (out / "claims.log").read_text().splitlines()]


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


def test_claims_are_exclusive_and_a_dead_holder_s_are_taken_over(tmp_path):
    from vitx.transfer.claims import STALE_AFTER, Claims

    said = []
    mine = Claims(tmp_path, said.append)
    assert mine.take("t/sweep/a") and mine.take("t/sweep/a")  # held by this process now (taken once)
    assert mine.holder("t/sweep/a") is None  # ours: nobody else's
    path = mine.path("t/sweep/a")
    assert json.loads(path.read_text())["pid"] == os.getpid()
    mine.release("t/sweep/a")
    assert not path.exists()

    other = Claims(tmp_path, said.append)
    elsewhere = {"host": "node-7", "pid": 4242, "proc_start": None, "began": "earlier"}
    path.write_text(json.dumps(elsewhere))  # another machine's live claim (its heartbeat is fresh)
    assert str(other.holder("t/sweep/a")) == "node-7:4242" and not other.take("t/sweep/a")
    os.utime(path, (time.time() - STALE_AFTER - 5,) * 2)  # its heartbeat stopped: that machine's process died
    assert other.holder("t/sweep/a") is None and other.take("t/sweep/a")
    assert "took over the claim of node-7:4242 (no heartbeat for" in said[-1]
    other.release("t/sweep/a")

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    path.write_text(json.dumps({**elsewhere, "host": mine.me.host, "pid": gone.pid}))  # this host, a dead process
    assert other.stale(other._read(path)) == f"process {gone.pid} is gone" and other.take("t/sweep/a")
    other.release("t/sweep/a")
    path.write_text(json.dumps({**elsewhere, "host": mine.me.host, "pid": os.getppid()}))  # this host, alive
    assert not other.take("t/sweep/a")
    path.write_text("")  # a claim being written (O_EXCL, where there are no hard links): its holder's
    assert not other.take("t/sweep/a")
    os.utime(path, (time.time() - 600,) * 2)  # ... or torn by a kill long ago: nobody's
    assert other.take("t/sweep/a")
    other.release("t/sweep/a")
    events = [(e[2], e[3]) for e in journal(tmp_path)]
    assert events == [("taken", "t/sweep/a"), ("done", "t/sweep/a")] + [("taken-over", "t/sweep/a"),
                                                                     ("done", "t/sweep/a")] * 3


def test_each_job_gets_its_share_of_the_machine_and_the_parent_s_settings(tmp_path, monkeypatch):
    """--jobs K: each child gets cores / K threads and a GPU in turn, and runs the parent's settings (written as
    a recipe, read back by the command line as any recipe) one item at a time, waiting for the selection."""
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
    assert child == TransferConfig(**{**cfg.to_dict(), "jobs": 1, "wait": True, "workers": 3})


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
    shard 0/2 running beside it; shard 1/2 rerun takes over its stale claim, continues the point from its
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
    claimed = [e[3] for e in journal(out) if e[2] == "taken"]
    os.kill(held.pid, signal.SIGKILL)
    assert held.wait() == -signal.SIGKILL
    assert len(claimed) == 1 and (out / "claims" / (claimed[0].replace("/", "__") + ".claim")).exists()

    beside = _start([*common, "--output-dir", str(out), "--shard", "0/2", "--wait"], tmp_path / "beside.log")
    again = vitx_cli(*common, "--output-dir", str(out), "--shard", "1/2", "--wait")
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"{claimed[0]}: took over the claim of" in again.stdout and "is gone)" in again.stdout
    assert beside.wait(timeout=600) == 0, (tmp_path / "beside.log").read_text()[-2000:]
    assert numbers(out) == numbers(tmp_path / "one")
    events = journal(out)
    done = [e[3] for e in events if e[2] == "done"]
    assert len(done) == len(set(done)) == 8
    assert [e[3] for e in events if e[2] == "taken-over"] == claimed

"""Torch's threads fit the cores a process is granted (affinity, cgroup quota, SLURM CPUs per task), less its busy
loader workers, unless OMP_NUM_THREADS gives them (issue 50, item 5)."""
import os

import pytest
import torch

from vitx.data import TensorSplit
from vitx.runner import threads


@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_fewest_granted_cores_win_and_say_why(tmp_path, monkeypatch):
    v2 = tmp_path / "cpu.max"
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.setattr(threads, "CGROUP_V2", v2)
    monkeypatch.setattr(threads, "CGROUP_V1", (tmp_path / "q", tmp_path / "p"))
    assert threads.granted_cores() == (16, "CPU affinity")  # no quota file: unlimited
    v2.write_text("max 100000\n")
    assert threads.granted_cores() == (16, "CPU affinity")
    v2.write_text("250000 100000\n")  # 2.5 CPUs of quota: 3 threads can use it
    assert threads.granted_cores() == (3, "cgroup CPU quota")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "2")
    assert threads.granted_cores() == (2, "SLURM_CPUS_PER_TASK")
    v2.unlink()
    monkeypatch.delenv("SLURM_CPUS_PER_TASK")
    (tmp_path / "q").write_text("400000\n")  # cgroup v1: 4 CPUs
    (tmp_path / "p").write_text("100000\n")
    assert threads.granted_cores() == (4, "cgroup CPU quota")
    (tmp_path / "q").write_text("-1\n")  # v1 unlimited
    assert threads.granted_cores() == (16, "CPU affinity")


def test_threads_are_the_share_less_the_busy_workers_unless_omp_gives_them(monkeypatch, torch_threads):
    monkeypatch.setattr(threads, "granted_cores", lambda: (8, "CPU affinity"))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    fitted = threads.fit_threads(workers=3)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("GOMP_SPINCOUNT", "10000")
    assert threads.fit_threads(workers=3) == {"threads": 5, "chosen_by": "vitx", "workers": 3, "cores": 8,
                                              "limited_by": "CPU affinity", "processes_here": 1,
                                              "openmp_wait": {"GOMP_SPINCOUNT": "10000"}}
    assert torch.get_num_threads() == 5
    assert threads.describe(fitted) == "threads: 5 torch threads + 3 loader workers, of 8 cores (CPU affinity)"
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # 4 processes on this machine: 2 cores each, 1 worker busy
    assert threads.fit_threads(workers=1)["threads"] == 1 and torch.get_num_threads() == 1
    assert threads.describe(threads.fit_threads(workers=1)).endswith("of 8 cores (CPU affinity) shared by 4 processes")
    assert threads.fit_threads(workers=6)["threads"] == 1  # never below one
    torch.set_num_threads(3)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # given (by the user, or by --jobs for its children): kept
    fitted = threads.fit_threads(workers=1)
    assert fitted["threads"] == 3 and fitted["chosen_by"] == "OMP_NUM_THREADS" and torch.get_num_threads() == 3
    assert threads.describe(fitted).startswith("threads: 3 torch threads (OMP_NUM_THREADS) + 1 loader worker")
    fitted = threads.fit_threads(workers=1, given=2)  # --threads: the user's own count, over OMP_NUM_THREADS too
    assert fitted["threads"] == 2 and fitted["chosen_by"] == "--threads" and torch.get_num_threads() == 2
    assert threads.describe(fitted).startswith("threads: 2 torch threads (--threads) + 1 loader worker, of 8 cores")


def test_an_in_process_run_gives_the_caller_its_threads_back(tmp_path, monkeypatch, torch_threads):
    """A notebook's `pretrain` runs on the threads it fits (here 1 of 1 granted core) and leaves the caller's
    count (2) as it found it."""
    import json

    from vitx.runner import pretrain

    from .helpers import tiny

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "granted_cores", lambda: (1, "test"))
    torch.set_num_threads(2)
    pretrain(tiny(tmp_path, steps=2, save_every=2, eval_samples=0))
    assert json.loads((tmp_path / "run" / "config.json").read_text())["threads"]["threads"] == 1
    assert torch.get_num_threads() == 2
    pretrain(tiny(tmp_path / "given", steps=2, save_every=2, eval_samples=0, threads=3))  # --threads 3
    record = json.loads((tmp_path / "given" / "run" / "config.json").read_text())
    assert record["threads"]["threads"] == 3 and record["threads"]["chosen_by"] == "--threads"
    assert torch.get_num_threads() == 2


def test_only_a_stream_that_decodes_or_makes_crops_counts_its_workers():
    held = TensorSplit(torch.zeros(4, 3, 8, 8), torch.zeros(4, dtype=torch.long))
    assert threads.training_workers(3, held, []) == 0  # in memory, one crop: nothing for workers to do
    assert threads.training_workers(3, held, ["a view"]) == 3  # multi-crop: the workers make the crops
    assert threads.training_workers(3, object(), []) == 3  # decoded from files or a stream
    assert threads.training_workers(3, held, [], on_gpu=True) == 3  # a GPU's process launches kernels: workers crop


def test_a_gpu_run_crops_a_held_split_in_workers_and_evaluates_it_in_process():
    """What the runner's loaders run (`Stepping.loader_workers`, which training, evaluation and `vitx bench`
    read): a GPU's training stream of a held split gets its workers, its evaluation none, a CPU none for either."""
    from types import SimpleNamespace

    from vitx.runner.stepping import Stepping

    held = TensorSplit(torch.zeros(4, 3, 8, 8), torch.zeros(4, dtype=torch.long))
    for device, training, expected in (("cuda", True, 3), ("cuda", False, 0), ("cpu", True, 0), ("cpu", False, 0)):
        run = SimpleNamespace(workers=3, views=[], setup=SimpleNamespace(
            accelerator=SimpleNamespace(device=torch.device(device))))
        assert Stepping.loader_workers(run, held, training) == expected, (device, training)
    run.views = ["a view"]  # the objective's crops: workers make them wherever it runs
    assert Stepping.loader_workers(run, held, False) == 3


def test_the_console_script_makes_openmp_spin_briefly_unless_a_policy_is_given(monkeypatch):
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):  # set, then removed: monkeypatch's undo removes them again
        monkeypatch.setenv(name, "x")
        monkeypatch.delenv(name)
    threads.wait_briefly()
    assert os.environ["GOMP_SPINCOUNT"] == "10000"
    monkeypatch.setenv("GOMP_SPINCOUNT", "300000")  # the user's own spin count is kept
    threads.wait_briefly()
    assert os.environ["GOMP_SPINCOUNT"] == "300000"
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # and so is a wait policy: no spin count beside it
    threads.wait_briefly()
    assert "GOMP_SPINCOUNT" not in os.environ
    from vitx.cli import main

    monkeypatch.delenv("OMP_WAIT_POLICY")
    with pytest.raises(SystemExit):
        main(["--version"])  # in-process (tests, notebooks): the caller's environment is left as it is
    assert "GOMP_SPINCOUNT" not in os.environ


def test_a_transfer_and_the_bench_say_the_threads_and_who_chose_them(tmp_path, monkeypatch):
    """A transfer's first run says its threads line (a header has it), once for the suite; the bench's device
    says who chose the count."""
    from .helpers import vitx_cli

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    result = vitx_cli("transfer", "--task", "embedded/digits", "--from", "scratch", "--model", "vit-nano/4",
                      "--shots", "20", "--batch-size", "8", "--lrs", "0.1,0.01", "--sweep-steps", "2",
                      "--test-samples", "16", "--workers", "0", "--log-with", "none", "--no-curves", "--threads", "1",
                      "--output-dir", str(tmp_path / "t"))
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("threads:")]
    assert lines == ["threads: 1 torch thread (--threads) + 0 loader workers, of "
                     f"{threads.granted_cores()[0]} cores ({threads.granted_cores()[1]})"]
    bench = vitx_cli("bench", "--model", "vit-nano/4", "--batch-size", "8", "--steps", "2", "--warmup", "1",
                     "--device", "cpu", "--threads", "1")
    assert bench.returncode == 0, bench.stderr
    assert "; CPU, 1 thread (--threads), no loader workers" in bench.stdout.splitlines()[0]

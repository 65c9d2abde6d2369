"""The small-scale reproduction: the claims' verdicts follow their criteria, and the whole pipeline runs (with
token budgets) into a report whose figures all exist, and resumes without training again."""
import json
import re
from pathlib import Path
from dataclasses import replace

import pytest

from vitx.errors import VitxError
from vitx.reproduce import QUICK, reproduce
from vitx.reproduce.claims import distance_claim, hires_claim, position_claim, start_stats, transfer_claim

from .helpers import vitx_cli


def fake(scratch=0.2, mpp=0.25, supervised=0.4, hires=0.41, layers=((5.0, 8.0), (8.0, 8.5)), nearest=0.9, corr=-0.6):
    pos = {"nearest_in_row_or_column": nearest, "distance_correlation": corr, "row_column_gap": 0.1,
           "nearest_in_row_or_column_chance": 0.4}
    rand = {**pos, "nearest_in_row_or_column": 0.4, "distance_correlation": 0.0}
    return {"plan": {"test_samples": 2000, "image_size": 16, "hires": 32},
            "transfer": {"scratch": [{"test_top1": scratch}], "mpp": [{"test_top1": mpp}],
                         "supervised": [{"test_top1": supervised}]},
            "hires": {"0": {"test_top1": hires}},
            "inspect": {"init": {"position_similarity": rand},
                        "supervised": {"position_similarity": pos,
                                       "attention_distance": {"pixels": [list(l) for l in layers], "uniform": 8.0,
                                                              "layer_mean": [sum(l) / len(l) for l in layers]}},
                        "mpp": {"position_similarity": pos}}}


def test_claims_follow_their_criteria():
    assert transfer_claim(fake())["holds"]
    assert not transfer_claim(fake(scratch=0.3))["holds"]  # MPP below scratch
    assert not transfer_claim(fake(supervised=0.24))["holds"]  # supervised below MPP
    assert not transfer_claim(fake(mpp=0.22))["holds"]  # +2 points, under 2 standard errors (2 × 1.3) of the gap
    spread = fake()
    spread["transfer"]["mpp"] = [{"test_top1": a} for a in (0.15, 0.25, 0.35)]  # mean 0.25, seed s.e. 5.8 points
    spread["transfer"]["scratch"] = [{"test_top1": 0.2}] * 3
    numbers = transfer_claim(spread)["numbers"]
    assert numbers["mpp_stderr"] == pytest.approx(0.1 / 3 ** 0.5) and not transfer_claim(spread)["holds"]
    # three pre-trainings of MPP, five transfers each: the ± is between pre-trainings (64.4, 72.8, 70.5 as
    # STUDY.md measured), not the transfer seeds' spread (about 1 point within each)
    between = fake()
    between["plan"]["test_samples"] = 360
    between["transfer"]["mpp"] = [{"test_top1": m + d, "pretrain_seed": p} for p, m in enumerate((0.644, 0.728, 0.705))
                                  for d in (-0.02, -0.01, 0.0, 0.01, 0.02)]
    between["transfer"]["scratch"] = [{"test_top1": a} for a in (0.4778, 0.4639, 0.4750, 0.4139, 0.4611)]
    stats = start_stats(between["transfer"]["mpp"], 360)
    means = [0.644, 0.728, 0.705]
    spread = (sum((m - sum(means) / 3) ** 2 for m in means) / 2 / 3) ** 0.5  # 2.5 points
    assert stats["level"] == "pre-training" and stats["per_pretraining"] == pytest.approx(means)
    assert stats["mean"] == pytest.approx(sum(means) / 3) and stats["stderr"] == pytest.approx(spread)
    # within each: the transfer seeds' s.e. (0.71 points) under the 360 test images' binomial floor (≈ 1.1)
    assert stats["within_stderr"] == pytest.approx(sum((m * (1 - m) / 360 / 5) ** 0.5 for m in means) / 3)
    claim = transfer_claim(between)["numbers"]
    assert claim["mpp_stderr"] == pytest.approx(spread) and claim["mpp_within_stderr"] < spread / 2
    assert position_claim(fake())["holds"] and position_claim(fake(), "mpp")["holds"]
    assert not position_claim(fake(nearest=0.5))["holds"] and not position_claim(fake(corr=-0.1))["holds"]
    structured_init = fake()
    structured_init["inspect"]["init"]["position_similarity"] = structured_init["inspect"]["supervised"][
        "position_similarity"]
    assert not position_claim(structured_init)["holds"]  # structure already at initialisation does not count
    assert distance_claim(fake())["holds"]
    assert not distance_claim(fake(layers=((5.0, 6.0), (8.0, 8.5))))["holds"]  # no global head in layer 1
    assert not distance_claim(fake(layers=((7.5, 8.0), (7.8, 7.9))))["holds"]  # no growth with depth
    assert hires_claim(fake(hires=0.395))["holds"]  # within one standard error (about 1.1 points)
    assert not hires_claim(fake(hires=0.35))["holds"]


CORE = replace(QUICK, pretrainings={k: v for k, v in QUICK.pretrainings.items() if k in ("supervised", "mpp")},
               curve=["mpp"])


@pytest.mark.slow  # 50 s with supervised and MPP (core), 60-90 s with the plugins' rows too; the claims' criteria
@pytest.mark.parametrize("plan", [CORE, QUICK], ids=["core", "with-plugins"])  # and the plan's checks stay fast
def test_reproduction_pipeline_writes_a_complete_report_and_resumes(tmp_path, plan, monkeypatch):
    from vitx.reproduce import pipeline

    out = tmp_path / "repro"
    seen = []

    def inspect(*args, **kwargs):  # when the inspection starts, a partial report is already there (a stop here
        seen.append((out / "REPORT.md").read_text())  # from a loan's limit leaves it)
        return inspect_backbone(*args, **kwargs)

    inspect_backbone = pipeline.inspect_backbone
    monkeypatch.setattr(pipeline, "inspect_backbone", inspect)
    first = reproduce(out, plan)
    assert len(seen) == 3 and "> **Partial report**: stopped before step 4/4, inspecting the backbones" in seen[0]
    assert "of 2 claims judged so far reproduce" in seen[0]
    assert json.loads((out / "results.json").read_text()).get("partial") is None  # the finished run's says so
    report = (out / "REPORT.md").read_text()
    assert [c["id"] for c in first["claims"]] == ["mpp", "posemb-supervised", "posemb-mpp", "distance", "hires"]
    assert report.count("| yes |") + report.count("| **no** |") == 5
    figures = re.findall(r"!\[\]\(([^)]+)\)", report)
    assert len(figures) == 9 and all((out / f).is_file() for f in figures)  # compute.png among them
    saved = json.loads((out / "results.json").read_text())
    assert {"scratch", "mpp", "supervised"} <= set(saved["transfer"]) and set(saved["hires"]) == {"0"}
    # the curve's checkpoints at half their steps, transferred too (MAE and DINO come with their plugins)
    curve = [name for name in plan.curve if name in saved["pretrain"]]
    assert set(saved["compute"]) == {f"{name}@3" for name in curve}
    assert [r["step"] for r in saved["pretrain"]["mpp"]["monitor"]] == [0, 3, 6]  # the monitor's curve
    assert "### Against pre-training compute" in report and "| mpp | 3 | 48 |" in report
    for name in curve:  # each at its end too; minutes: steps × batch at the run's measured speed
        speed = saved["pretrain"][name]["images_per_s"]
        assert speed > 0 and f"| {name} | 6 | 96 | {6 * 16 / speed / 60:.1f} |" in report
    assert saved["summary"]["mpp"]["level"] == "transfer" and saved["transfer"]["mpp"][0]["pretrain_seed"] == 0
    weights = (out / "pretrain-supervised-p0" / "model.safetensors").stat().st_mtime_ns
    assert not first["resumed"]
    second = reproduce(out, plan)  # everything is done: nothing is trained again
    assert second["resumed"] and "reused the runs" in (out / "REPORT.md").read_text()
    assert (out / "pretrain-supervised-p0" / "model.safetensors").stat().st_mtime_ns == weights
    assert second["transfer"]["mpp"][0]["test_top1"] == first["transfer"]["mpp"][0]["test_top1"]
    with pytest.raises(VitxError, match=r"holds a reproduction of another plan \(shots differ: was 40\)"):
        reproduce(out, replace(plan, shots=30))  # refused before anything is trained or overwritten
    assert json.loads((out / "plan.json").read_text())["shots"] == 40


@pytest.mark.parametrize("setting,needle", [
    ("seeds=abc", "--set: seeds must be a list of integers, got 'abc'"),
    ("hires_seeds=3", "plan: hires_seeds must be 0 to 1 (the seeds), got 3"),
    ("transfer_lrs=[]", "plan: transfer_lrs must not be empty"),
    ("pretrainings={}", "--set pretrainings cannot be changed"),
    ("transfer_lrs=[nan]", "plan: transfer_lrs must be finite numbers, got [nan]"),
    ("transfer_batch=10000000", "plan: transfer_batch 10000000 is too large: at most 65,536"),
    ("seeds=[-1]", "plan: seeds must not be negative"),
])
def test_plan_settings_are_checked_in_one_line(tmp_path, setting, needle):
    result = vitx_cli("reproduce", "--plan", "quick", "--output-dir", str(tmp_path / "r"), "--set", setting)
    assert result.returncode == 2 and needle in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "r").exists()


def test_quick_and_another_plan_is_a_contradiction(tmp_path):
    result = vitx_cli("reproduce", "--quick", "--plan", "gpu", "--output-dir", str(tmp_path / "r"))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == "error: --quick is --plan quick, which contradicts --plan gpu; give one of them"
    assert not (tmp_path / "r").exists()


@pytest.mark.slow  # 36 s: subprocess start-up for every transfer
def test_gpu_shaped_plan_runs_transfers_as_processes_with_a_sweep(tmp_path):
    """The GPU plan's paths, at token size on the CPU: transfers as `vitx transfer --recipe` processes two at a
    time (jobs > 1), each sweeping two learning rates; results come back as the in-process path gives them."""
    plan = replace(QUICK, jobs=2, transfer_lrs=[0.03, 0.1], compute_points=[], pretrain_seeds=[0, 1],
                   pretrainings={k: v for k, v in QUICK.pretrainings.items() if k in ("supervised", "mpp")})
    out = tmp_path / "repro"
    results = reproduce(out, plan)
    # pre-trainings as `vitx pretrain --recipe` processes too, one thread each; each row over both pre-trainings
    assert (out / "pretrain-mpp-p1.toml").is_file() and set(results["pretrain"]["mpp"]["runs"]) == {"0", "1"}
    assert [r["pretrain_seed"] for r in results["transfer"]["mpp"]] == [0, 1]
    assert results["summary"]["mpp"]["level"] == "pre-training" and results["machine"]["threads_per_process"] == 1
    for start in ("scratch", "supervised", "mpp"):
        row = results["transfer"][start][0]
        assert row["chosen"]["lr"] in (0.03, 0.1) and len(row["sweep"]) == 2 and 0 <= row["test_top1"] <= 1
        assert (out / "transfer" / f"{start if start == 'scratch' else start + '-p0'}-seed0.toml").is_file()
    assert results["hires"]["0"]["lr"] == results["transfer"]["supervised"][0]["chosen"]["lr"]
    assert "Sweep lr [0.03, 0.1] × [4] steps" in (out / "REPORT.md").read_text()


def test_a_curve_names_only_what_the_plan_pre_trains_and_lands_on_its_checkpoints():
    from vitx.recipe import parse_sets
    from vitx.reproduce.pipeline import _curve_steps
    from vitx.reproduce.plan import Plan

    with pytest.raises(VitxError, match=r"^plan: curve names dino, which this plan does not pre-train \(it "
                                        r"pre-trains supervised, mpp\)$"):
        replace(CORE, curve=["mpp", "dino"]).validate()
    for setting, says in [
            ('curve=["mpp","mpp"]', "plan: curve takes distinct values, e.g. mpp; got mpp twice in mpp,mpp"),
            ('curve=["byol"]', "plan: curve must be one of supervised, mpp, mae, simclr, dino, got 'byol'")]:
        with pytest.raises(VitxError) as refused:  # as `vitx reproduce --set` reads and checks them
            QUICK.with_settings(parse_sets([setting], Plan))
        assert str(refused.value) == says
    # the compute points as steps on each pre-training's checkpoint interval (its smallest point)
    plan = replace(QUICK, compute_points=[1 / 8, 1 / 4, 1 / 2], pretrainings={
        "supervised": QUICK.pretrainings["supervised"], "mpp": replace(QUICK.pretrainings["mpp"], steps=500),
        "dino": replace(QUICK.pretrainings["dino"], steps=1000)}, curve=["mpp", "dino"]).validate()
    assert _curve_steps(plan, "mpp") == [62, 124, 248] and _curve_steps(plan, "dino") == [125, 250, 500]
    assert _curve_steps(replace(plan, compute_points=[1 / 8, 0.99]), "mpp") == [62, 496]  # never past the end


def test_a_pre_trainings_speed_weighs_each_log_step_by_the_steps_it_covers():
    from vitx.reproduce.pipeline import _speed

    rows = [{"step": 25, "images_per_s": 100.0}, {"step": 30, "images_per_s": 10.0},  # 5 steps slowed by a save
            {"step": 60, "images_per_s": 100.0}]
    assert _speed(rows) == pytest.approx(60 / (25 / 100 + 5 / 10 + 30 / 100))  # 57.1, not the plain mean 70
    assert _speed([{"step": 5, "loss": 1.0}]) is None  # no speed logged


def test_a_reproduction_from_before_the_curve_setting_continues_with_the_curve_it_had(tmp_path):
    from vitx.reproduce.pipeline import _same_plan

    older = {k: v for k, v in json.loads(json.dumps(QUICK.to_dict())).items() if k != "curve"}
    (tmp_path / "plan.json").write_text(json.dumps(older))  # written before plans had a curve: MPP's alone
    _same_plan(tmp_path, replace(QUICK, curve=["mpp"]))  # what it ran: the same plan
    (tmp_path / "transfer" / "mpp-p0-seed0").mkdir(parents=True)  # (something on disk: the plan binds the folder)
    with pytest.raises(VitxError, match=r"another plan \(curve differ: was \['mpp'\]\)"):
        _same_plan(tmp_path, QUICK)


def test_a_call_that_failed_before_training_anything_does_not_bind_the_folder_to_its_plan(tmp_path):
    """`--set model=typo` fails at its first pre-training, after plan.json is written: the corrected call takes the
    folder, since nothing of the first plan was trained."""
    from vitx.reproduce.pipeline import _same_plan

    _same_plan(tmp_path, replace(QUICK, model="nonexist"))
    (tmp_path / "pretrain-supervised-p0").mkdir()  # the failed job's folder, without a checkpoint
    _same_plan(tmp_path, QUICK)
    assert json.loads((tmp_path / "plan.json").read_text())["model"] == QUICK.model


def test_a_folder_of_the_users_files_or_their_own_plan_json_is_refused_untouched(tmp_path):
    """`vitx reproduce --output-dir` takes a folder as `vitx pretrain` does (runs/ownership.py): a folder of the
    user's files, or one holding their own plan.json (not a reproduction's), is refused in one line that says
    which, and nothing there is written or changed; a new folder is marked as vitx's, and a reproduction's
    folder from before the mark (its plan.json a plan) is still continued."""
    from vitx.reproduce.pipeline import _take
    from vitx.runs.rundir import RUN_MARK

    cases = {"notes": ("notes.txt", "my notes\n"), "own-plan": ("plan.json", '{"name": "my plan", "steps": 3}'),
             "not-json": ("plan.json", "steps: 3\n")}
    expected = {
        "notes": f"error: --output-dir {tmp_path / 'notes'} is not empty and holds no vitx run (it holds notes.txt); "
                 "vitx would write over files there: give a new or empty folder",
        "own-plan": f"error: {tmp_path / 'own-plan' / 'plan.json'} is not a vitx reproduction's plan (it lacks a "
                    "plan's model, image_size, hires, ...): the folder holds your own plan.json, which vitx would "
                    "write over; choose a new --output-dir",
        "not-json": f"error: {tmp_path / 'not-json' / 'plan.json'} is not a vitx reproduction's plan (not a JSON "
                    "object): the folder holds your own plan.json, which vitx would write over; choose a new "
                    "--output-dir"}
    for name, (file, text) in cases.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / file).write_text(text)
        result = vitx_cli("reproduce", "--quick", "--output-dir", str(tmp_path / name))
        assert (result.returncode, result.stderr.strip()) == (2, expected[name])
        assert [p.name for p in (tmp_path / name).iterdir()] == [file] and (tmp_path / name / file).read_text() == text

    run = tmp_path / "run"  # a pre-training run's folder: a reproduction goes into a folder of its own
    (run / "checkpoints").mkdir(parents=True)
    (run / RUN_MARK).write_text("")
    result = vitx_cli("reproduce", "--quick", "--output-dir", str(run))
    assert (result.returncode, result.stderr.strip()) == (2, f"error: --output-dir {run} holds a pre-training run; "
                                                             "a reproduction goes into a folder of its own: give a new one")
    assert sorted(p.name for p in run.iterdir()) == [RUN_MARK, "checkpoints"]

    legacy = tmp_path / "legacy"  # a reproduction's folder written before the mark existed
    legacy.mkdir()
    (legacy / "plan.json").write_text(json.dumps(QUICK.to_dict()))
    (legacy / "notes.txt").write_text("kept beside it\n")
    _take(legacy)
    _take(tmp_path / "new")
    assert (legacy / RUN_MARK).is_file() and (tmp_path / "new" / RUN_MARK).is_file()


FAKE_PRETRAINING = """import os, signal, sys, time, tomllib
with open(sys.argv[sys.argv.index("--recipe") + 1], "rb") as fh:
    out = tomllib.load(fh)["pretrain"]["output_dir"]
seen = os.environ["VITX_TEST_SEEN"]


def stop(signum, frame):  # SIGTERM: a checkpoint at the step boundary (step 3 of 10), exit 75; Ctrl-C: 130 at once
    if signum == signal.SIGTERM:
        os.makedirs(os.path.join(out, "checkpoints", "step_00000003"))
        with open(os.path.join(out, "checkpoints", "step_00000003", "trainer_state.json"), "w") as fh:
            fh.write("{}")
        with open(os.path.join(out, "config.json"), "w") as fh:
            fh.write('{"step": 3, "run": {"steps": 10}}')
    sys.exit(75 if signum == signal.SIGTERM else 130)


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
with open(f"{seen}/{os.getpid()}.tmp", "w") as fh:
    fh.write(" ".join(sys.argv[1:]))
os.rename(f"{seen}/{os.getpid()}.tmp", f"{seen}/{os.getpid()}.ready")
time.sleep(60)  # a pre-training that would take a minute
"""


def test_pretrainings_start_costliest_first_on_one_core_each_and_cost_is_not_the_plan():
    """Side by side the costliest pre-trainings start first (steps × cost: DINO's 1,000 × 3.6, MPP's 1,500, ...),
    each seed of a row after the other; a run with one core makes its crops itself (no loader workers); a
    pre-training's `cost` only orders the runs, so a plan.json without it, or with other costs, is the same plan."""
    from unittest import mock

    from vitx.reproduce import CPU
    from vitx.reproduce import pipeline

    rows = {f"{name}-p{seed}": name for name in CPU.pretrainings for seed in (0, 1)}
    assert pipeline._start_order(CPU, rows) == ["dino-p0", "dino-p1", "mpp-p0", "mpp-p1", "simclr-p0", "simclr-p1",
                                                "supervised-p0", "supervised-p1", "mae-p0", "mae-p1"]
    with mock.patch.object(pipeline.torch.cuda, "is_available", return_value=False):
        for cores, workers in ((2, {"workers": 0}), (8, {})):  # 8 cores, 2 jobs: the run's own default workers
            with mock.patch.object(pipeline, "cores", return_value=cores):
                settings = pipeline.pretrain_settings(CPU, "dino", 0, Path("run"))
                assert {k: settings[k] for k in ("workers",) if k in settings} == workers
    saved = CPU.to_dict()
    for row in saved["pretrainings"].values():
        row.pop("cost")
    assert pipeline._science("pretrainings", saved["pretrainings"]) == \
        pipeline._science("pretrainings", CPU.to_dict()["pretrainings"])
    assert pipeline._science("seeds", [0, 1]) != pipeline._science("seeds", [0, 1, 2])


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_a_stop_is_passed_on_to_the_jobs_and_the_reproduction_stops_with_them(tmp_path, monkeypatch, signum):
    """jobs > 1: a stop signal or Ctrl-C to the reproduction is passed on to its running pre-trainings at once
    (each checkpoints, exit 75, a Ctrl-C passed on as SIGTERM), none of the queued ones starts, and the reproduction exits
    as soon as they have, with the stop's status and one line of what is on disk; a second call resumes the
    checkpointed ones. (It used to wait for its jobs to finish their work.)"""
    import os
    import signal
    import sys
    import threading
    import time

    pytest.importorskip("vitx_dino")  # (its rows are the costliest: they start first)
    from vitx.reproduce import pipeline

    monkeypatch.setattr(pipeline, "cores", lambda: 2)  # 2 jobs on 2 cores: one each
    monkeypatch.setattr(pipeline.torch.cuda, "is_available", lambda: False)
    seen = tmp_path / "seen"
    seen.mkdir()
    fake = tmp_path / "python"  # stands for `python -m vitx pretrain --recipe …`
    fake.write_text(f"#!{sys.executable}\n" + FAKE_PRETRAINING)
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    monkeypatch.setenv("VITX_TEST_SEEN", str(seen))
    out, sent = tmp_path / "r", []

    def stop_when_two_run():
        deadline = time.time() + 120
        while len(list(seen.glob("*.ready"))) < 2 and time.time() < deadline:
            time.sleep(0.01)
        sent.append(time.time())
        os.kill(os.getpid(), getattr(signal, signum))

    def stopped_call() -> tuple[int, str, list[str]]:
        for ready in seen.glob("*.ready"):
            ready.unlink()
        thread = threading.Thread(target=stop_when_two_run)
        thread.start()
        result = vitx_cli("reproduce", "--quick", "--set", "jobs=2", "--set", "pretrain_seeds=[0, 1]",
                          "--output-dir", str(out))
        thread.join()
        assert time.time() - sent[-1] < 30, "the reproduction waited for its jobs' work"
        started = [p.read_text() for p in seen.glob("*.ready")]
        return result.returncode, result.stderr.splitlines()[-1], started

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # a terminal's Ctrl-C handler
    try:
        code, line, started = stopped_call()
        # a Ctrl-C reaches the jobs as SIGTERM: they checkpoint too, and nothing they trained is lost
        head = "stopped: SIGTERM" if signum == "SIGTERM" else "interrupted: Ctrl-C"
        assert (code, line) == ({"SIGTERM": 75, "SIGINT": 130}[signum],
                                f"{head}: the reproduction stopped, and its 2 job(s) with it; in {out}: "
                                "pre-training dino-p0 at step 3 of 10, dino-p1 at step 3 of 10; 0 transfer(s) "
                                "complete; run the same command again to continue from there")
        # the costliest pre-trainings start first (DINO's: steps × cost); the queued others never started
        assert sorted(a.split("--recipe ")[1].split()[0].rsplit("/", 1)[1] for a in started) == \
            ["pretrain-dino-p0.toml", "pretrain-dino-p1.toml"]
        assert "workers = 0\n" in (out / "pretrain-dino-p0.toml").read_text()  # one core each: crops made in-process
        if signum == "SIGTERM":  # the second call continues the two from their checkpoints
            code, line, started = stopped_call()
            assert code == 75 and len(started) == 2 and all(a.endswith(" --resume") for a in started), started
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_reproduction_stopped_before_its_inspection_reports_what_it_judged(tmp_path):
    """The committed CPU reproduction's results without the inspection, as a run stopped during step 4/4 (a GPU
    loan's time limit) leaves them: the transfer and resolution claims judged with the same numbers, the
    inspection's claims named as not judged, and the report says it is partial."""
    from vitx.reproduce.claims import judge
    from vitx.reproduce.report import write_report

    whole = json.loads((Path(__file__).parents[1] / "recipes" / "reproduction" / "results.json").read_text())
    cut = {**whole, "inspect": {}, "partial": "stopped before step 4/4, inspecting the backbones"}
    cut["claims"] = judge(cut)
    assert [c["id"] for c in cut["claims"]] == ["mpp", "hires"]
    for judged, recorded in zip(cut["claims"], [c for c in whole["claims"] if c["id"] in ("mpp", "hires")]):
        assert {k: judged["numbers"][k] for k in recorded["numbers"]} == pytest.approx(recorded["numbers"])
        assert judged["holds"] == recorded["holds"]
    report = write_report(cut, tmp_path / "REPORT.md").read_text()
    held = sum(c["holds"] for c in cut["claims"])
    assert f"**{held} of 2 claims judged so far reproduce.**" in report
    assert "> **Partial report**: stopped before step 4/4, inspecting the backbones. The claims posemb-supervised, " \
           "posemb-mpp, distance are not judged." in report
    assert "## 2-3. Position embeddings and attention distance: not measured" in report
    assert "inspect/" not in report  # no figure the run did not draw
    hires = whole["hires"]
    assert all(f"{100 * r['test_top1']:.2f}%" in report for r in hires.values())
    from vitx.pages.reproduction import reproduction_page

    (tmp_path / "results.json").write_text(json.dumps(cut))
    page = reproduction_page(tmp_path)  # its page says it stopped, not that it finished
    assert f"{held} of 2 claims judged so far reproduce" in page and "partial: stopped before step 4/4" in page
    assert 'class="status status-stopped"' in page and 'class="status status-finished"' not in page


def test_the_plans_dino_rows_take_the_data_fitted_head_and_the_settings_that_learn_here():
    """The CPU and GPU plans' DINO rows (recipes/reproduction/DINO.md): K and the teacher temperature left to the
    data fit (1,024 and 0.02 for the 1,437 digits), and main_dino.py's optimisation replaced by the named
    deviations measured to learn at this size (global clip 1, weight decay 0.1 on matrices only, no drop path,
    warm-up from lr/W, cosine to 0)."""
    from vitx.reproduce import CPU, GPU
    from vitx.reproduce.plan import DINO_SMALL

    assert DINO_SMALL == {"grad_clip": 1.0, "grad_clip_mode": "global", "weight_decay": 0.1, "weight_decay_end": 0.1,
                          "decay_tokens": False, "drop_path": 0.0, "warmup_start": "first-step", "min_lr": 0.0}
    for plan in (CPU, GPU):
        row = plan.pretrainings["dino"]
        assert row.settings == DINO_SMALL and row.settings is not DINO_SMALL and row.lr == 5e-4
        assert not re.search(r"out_dim|teacher_temp", row.objective), row.objective

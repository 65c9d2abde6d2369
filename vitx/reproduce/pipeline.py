"""The small-scale reproduction, run end to end: pre-train (supervised, MPP, and MAE, SimCLR and DINO when their
plugins are installed), transfer (from scratch, from each pre-training, from MPP part-way; then at a higher
resolution), inspect, judge, report. Every step resumes: a finished run is kept,
so a second call after a crash only does what is missing."""
from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from .. import __version__
from ..analysis import inspect_backbone
from ..backbones import create_backbone
from ..safe_io import atomic_write_text, read_json_object
from ..errors import VitxError, cannot_write
from ..runs.folder import load_backbone
from ..plots.series import read_metrics
from ..runner import pretrain
from ..runner.launch import process_device
from ..console import make_console, say
from ..runs.ownership import REPRODUCTION, check_output_dir
from ..runs.rundir import RunDir, mark_run
from ..transfer import TransferConfig, transfer
from ..runs.rundir import step_number
from ..transfer.jobs import cores, start_vitx, write_recipe
from .claims import judge, start_stats, test_count
from ..spec import parse_spec
from .plan import CPU, Plan, Pretraining
from .report import write_report


def _speed(trained: list[dict[str, Any]]) -> float | None:
    """The pre-training's cost on this machine, in images/s: each log step's speed weighted by the steps it covers
    (a checkpoint's short interval counts for its few steps), so a resumed run's too."""
    steps = seconds = 0.0
    for before, row in zip([{"step": 0}, *trained], trained):
        if row.get("images_per_s") and row["step"] > before["step"]:
            steps += row["step"] - before["step"]
            seconds += (row["step"] - before["step"]) / row["images_per_s"]
    return steps / seconds if seconds else None


def _last_metrics(run: Path) -> dict[str, Any]:
    rows = read_metrics(run)
    trained = [r for r in rows if "loss" in r]
    first, last = trained[0], trained[-1]
    return {"first": first, "last": last, "val": next((r for r in reversed(rows) if "val_loss" in r), {}),
            "images_per_s": _speed(trained),
            "monitor": [{k: v for k, v in r.items() if k == "step" or k.startswith("monitor_")}
                        for r in rows if "monitor_knn" in r]}


def pretrain_settings(plan: Plan, name: str, seed: int, run: Path) -> dict[str, Any]:
    """The `vitx pretrain` settings of pre-training `name` with `seed`, into `run`. Side by side on a CPU with one
    core each (`plan.jobs` as many as the cores), a run makes its crops in its own process, with no loader
    workers: a worker would only take the core of the run beside it (DINO, two side by side on 2 cores: 130
    img/s each without workers, 115 with one each; the batches, and so the run, are the same either way)."""
    spec = plan.pretrainings[name]
    alone = {"workers": 0} if plan.jobs > 1 and cores() // plan.jobs <= 1 and not torch.cuda.is_available() else {}
    steps = spec.steps_in(plan)
    every = _interval(plan, name)
    monitor = {"monitor": plan.monitor, "monitor_every": every, "monitor_features": plan.monitor_features} \
        if name == "mpp" and plan.monitor else {}
    return {"objective": spec.objective, "model": plan.model, "data": plan.data, "image_size": plan.image_size,
            "batch_size": plan.batch_size, "steps": steps, **({"lr": spec.lr} if spec.lr is not None else {}),
            "precision": plan.precision,
            "warmup_steps": max(1, steps // 15), "save_every": every,
            # every checkpoint kept: one that a stop signal adds must not push out a curve's
            "keep_checkpoints": steps, "log_every": max(1, steps // 30),
            "eval_samples": 1024 if name == "supervised" else 0, "output_dir": str(run), "log_with": "none",
            "seed": seed, **monitor, **alone, **spec.settings}


def pretrain_rows(plan: Plan, jobs: dict[str, tuple[str, int, Path]], console: Console) -> dict[str, dict[str, Any]]:
    """Run pre-trainings (key → (name, seed, run folder)): in this process one after the other (`plan.jobs` 1),
    else `plan.jobs` at a time as `vitx pretrain` processes with the cores shared out (one thread each on 2
    cores: a run on one thread repeats bit for bit, STUDY.md), the costliest first. A finished run is kept; a
    stopped one resumes."""
    def run(key: str) -> dict[str, Any]:
        name, seed, folder = jobs[key]
        tick = time.perf_counter()
        settings = pretrain_settings(plan, name, seed, folder)
        latest = RunDir(folder).latest()
        resume = latest is not None
        # an earlier call's finished run (timed from its own log below) is not started again
        done_before = resume and step_number(latest) >= settings["steps"]
        if plan.jobs <= 1:
            pretrain(settings, resume=resume, console=console)
        elif not done_before:
            recipe = write_recipe(folder.parent / f"{folder.name}.toml", settings, section="pretrain")
            log = folder.parent / f"{folder.name}.log"
            code = start_vitx("pretrain", recipe, log, list(jobs).index(key), plan.jobs,
                              ("--resume",) if resume else (), append=resume).wait()
            if code != 0:
                raise VitxError(f"pre-training {key} failed (exit {code}); see {log}")
        say(console, f"pre-training {key}: done")
        found = _last_metrics(folder)
        speed = found["images_per_s"]
        seconds = settings["steps"] * settings["batch_size"] / speed if done_before and speed else \
            time.perf_counter() - tick  # (a run an earlier call finished took no time in this one)
        return {**found, "steps": settings["steps"], "seed": seed, "seconds": seconds}

    if plan.jobs <= 1:
        return {key: run(key) for key in jobs}
    from concurrent.futures import ThreadPoolExecutor

    order = _start_order(plan, {key: name for key, (name, _, _) in jobs.items()})
    with ThreadPoolExecutor(plan.jobs) as pool:
        done = dict(zip(order, pool.map(run, order)))
    return {key: done[key] for key in jobs}  # in the plan's order


def _start_order(plan: Plan, rows: dict[str, str]) -> list[str]:
    """Pre-trainings (key → row) in the order they start side by side: costliest first (steps × cost, the
    plan's order among equals), so that the runs side by side end together and no core idles at the end
    while the last long run finishes alone."""
    def cost(key: str) -> float:
        spec = plan.pretrainings[rows[key]]
        return -spec.steps_in(plan) * spec.cost

    return sorted(rows, key=cost)


def _key(name: str, seed: int) -> str:
    """A pre-training's name in the reproduction's folders and results: the row and its pre-training seed."""
    return f"{name}-p{seed}"


def _interval(plan: Plan, name: str) -> int:
    """Steps between the checkpoints of pre-training `name`: its smallest compute point when it is on the curve
    (its gap to scratch as pre-training grows), else only its end."""
    steps = plan.pretrainings[name].steps_in(plan)
    return max(1, round(steps * min(plan.compute_points, default=1.0))) if name in plan.curve else steps


def _curve_steps(plan: Plan, name: str) -> list[int]:
    """The steps of pre-training `name` whose checkpoints are transferred as well as its last one: the compute
    points as its own steps, each on its checkpoint interval (1/8 and 1/4 of 500 steps: 62 and 124)."""
    total, every = plan.pretrainings[name].steps_in(plan), _interval(plan, name)
    return sorted({s for f in plan.compute_points if (s := max(every, round(total * f / every) * every)) < total})


def _available(plan: Plan, console: Console) -> dict[str, Pretraining]:
    """The plan's pre-trainings whose objective is installed; a missing plugin's rows are skipped, and said so."""
    from ..registry import OBJECTIVES

    chosen = {}
    for name, spec in plan.pretrainings.items():
        if parse_spec(spec.objective)[0] in OBJECTIVES.names():
            chosen[name] = spec
        else:
            console.print(f"[yellow]skipping {name}: its objective comes with `pip install {spec.plugin}`[/]")
    return chosen


def transfer_settings(plan: Plan, start: str, out: Path, seed: int, **changes: Any) -> dict[str, Any]:
    """The plan's low-data transfer from `start` (a run folder, a checkpoint or "scratch") with `seed`, into
    `out`, as `vitx transfer` settings; `changes` over them (the higher resolution's)."""
    settings = dict(task=plan.task, start=start, model=plan.model if start == "scratch" else None,
                    shots=plan.shots, image_size=plan.image_size, batch_size=plan.transfer_batch,
                    lrs=list(plan.transfer_lrs), sweep_steps=list(plan.transfer_steps), test_samples=plan.test_samples,
                    seed=seed, output_dir=str(out), precision=plan.precision)
    if not plan.sweep:
        settings.update(sweep=False, lr=plan.transfer_lrs[0], steps=plan.transfer_steps[0])
    return {**settings, **changes}


def transfer_runs(jobs: dict[str, dict[str, Any]], parallel: int, console: Console) -> dict[str, dict[str, Any]]:
    """Run transfer jobs (name → TransferConfig settings): in this process one after the other, or `parallel` at
    a time as `vitx transfer` processes (small models leave most of a GPU idle; each gets its share of the cores
    and of the GPUs: transfer/jobs.py)."""
    if parallel <= 1:
        return {name: transfer(TransferConfig(**settings), resume=Path(settings["output_dir"]).exists(),
                               console=console)["tasks"][0] for name, settings in jobs.items()}
    from concurrent.futures import ThreadPoolExecutor

    workers = max(1, (cores() - 1) // parallel)

    def run(name: str) -> dict[str, Any]:
        settings = {**jobs[name], "workers": workers}
        out = Path(settings["output_dir"])
        summary = out / "summary.json"
        if not summary.exists():
            # the job's settings as a recipe: the CLI checks them as any
            recipe = write_recipe(out.parent / f"{out.name}.toml", settings)
            log = out.parent / f"{out.name}.log"
            code = start_vitx("transfer", recipe, log, list(jobs).index(name), parallel, ("--resume",) if out.exists() else (),
                                  append=False).wait()
            if code != 0:
                raise VitxError(f"transfer {name} failed (exit {code}); see {log}")
        say(console, f"transfer {name}: done")
        return json.loads(summary.read_text())["tasks"][0]

    with ThreadPoolExecutor(parallel) as pool:
        return dict(zip(jobs, pool.map(run, jobs)))


# settings added to the plan since plan.json files were first written: the value a reproduction made before
# had, so that continuing it with that value (`--set curve=["mpp"]`) is the same plan
UNRECORDED: dict[str, Any] = {"curve": ["mpp"], "pretrain_seeds": [0], "jobs": 1}


def _not_a_plan(path: Path) -> str | None:
    """Why the plan.json at `path` is not one a reproduction wrote (a user's own file of that name); None when it
    is one, or when there is none."""
    if not path.exists():
        return None
    saved = read_json_object(path)
    if saved is None:
        return "not a JSON object"
    lacking = [k for k in Plan.__dataclass_fields__ if k not in saved and k not in UNRECORDED]
    return f"it lacks a plan's {', '.join(lacking[:3])}{', ...' if len(lacking) > 3 else ''}" if lacking else None


def _take(out: Path) -> None:
    """The reproduction's folder, taken as `vitx pretrain` takes one (runs/ownership.py): new, empty, or vitx's
    (marked, or holding a reproduction's plan.json); a user's plan.json, or a folder of their files, is refused
    in one line before anything is written there."""
    why = _not_a_plan(out / "plan.json")
    if why is not None:
        raise VitxError(f"{out / 'plan.json'} is not a vitx reproduction's plan ({why}): the folder holds your "
                        "own plan.json, which vitx would write over; choose a new --output-dir")
    if not (out / "plan.json").exists():
        check_output_dir(out, writes=REPRODUCTION)
    try:
        out.mkdir(parents=True, exist_ok=True)
        mark_run(out)
    except OSError as exc:
        raise VitxError(f"{cannot_write(out, exc)}; choose another --output-dir") from None


def _science(key: str, value: Any) -> Any:
    """A plan setting as it bears on the results: a pre-training's `cost` only orders the runs, so it is left out
    (and a plan.json written before it existed is the same plan)."""
    if key != "pretrainings" or not isinstance(value, dict):
        return value
    return {name: {k: v for k, v in row.items() if k != "cost"} if isinstance(row, dict) else row
            for name, row in value.items()}


def _same_plan(out: Path, plan: Plan) -> None:
    """A second call continues the first only with the same plan (`jobs` may differ): mixing runs of two plans
    in one report would misreport both. The plan is written before anything is trained."""
    now = json.loads(json.dumps(plan.to_dict()))
    saved = read_json_object(out / "plan.json")
    if saved is None:
        atomic_write_text(out / "plan.json", json.dumps(now, indent=1))
        return
    differ = [k for k in now if k != "jobs" and _science(k, saved.get(k, UNRECORDED.get(k))) != _science(k, now[k])]
    if differ and not _trained_any(out):  # (an earlier call failed before its first checkpoint: a --set typo)
        atomic_write_text(out / "plan.json", json.dumps(now, indent=1))
        return
    if differ:
        was = saved.get(differ[0], UNRECORDED.get(differ[0]))
        raise VitxError(f"{out} holds a reproduction of another plan ({', '.join(differ)} differ: was {was!r}); "
                        "continue it with the same plan or choose a new --output-dir")


def _trained_any(out: Path) -> bool:
    """Whether a reproduction in `out` has a pre-training checkpoint or a transfer on disk (its plan then binds
    the folder)."""
    runs = [p for p in out.glob("pretrain-*") if p.is_dir()]
    return any(RunDir(p).latest() is not None for p in runs) or any((out / "transfer").glob("*"))


def reproduce(out_dir: str | Path = "runs/reproduce", plan: Plan = CPU, console: Console | None = None) -> dict[str, Any]:
    """Run every step (or what is missing) and write results.json and REPORT.md into `out_dir`."""
    out = Path(out_dir).expanduser()
    _take(out)
    _same_plan(out, plan)
    console = console or make_console()
    began = time.perf_counter()
    chosen = _available(plan, console)
    # each row pre-trained once per pre-training seed; the first seed's run is the one inspected and fine-tuned
    # at the higher resolution
    pretrainings = {_key(name, seed): (name, seed, out / f"pretrain-{_key(name, seed)}")
                    for name in chosen for seed in plan.pretrain_seeds}
    results: dict[str, Any] = {"plan": plan.to_dict(), "pretrain": {}, "transfer": {}, "compute": {}, "hires": {},
                               "inspect": {}, "resumed": any(RunDir(r).latest() is not None
                                                             for _, _, r in pretrainings.values())}

    console.rule("1/4 pre-training")
    trained = pretrain_rows(plan, pretrainings, console)
    for name in chosen:
        runs = {str(seed): trained[_key(name, seed)] for seed in plan.pretrain_seeds}
        results["pretrain"][name] = {**runs[str(plan.pretrain_seeds[0])], "runs": {
            seed: {"loss_first": r["first"].get("loss"), "loss_last": r["last"].get("loss"), "seconds": r["seconds"],
                   "images_per_s": r["images_per_s"]} for seed, r in runs.items()}}

    console.rule("2/4 low-data transfer")
    # start → (where it starts, its row in the results, its pre-training seed); a row holds every pre-training
    # seed's transfers (a curve point's row: "mpp@500")
    starts: dict[str, tuple[str, str, int | None]] = {"scratch": ("scratch", "scratch", None)}
    for key, (name, seed, run) in pretrainings.items():
        starts[key] = (str(run), name, seed)
    for key, (name, seed, run) in pretrainings.items():  # the compute curve: checkpoints part-way through
        for step in _curve_steps(plan, name) if name in plan.curve else ():
            checkpoint = run / "checkpoints" / f"step_{step:08d}"
            if not checkpoint.is_dir():  # removed by hand, or pre-trained before its step was on the curve
                raise VitxError(f"{key}'s checkpoint at step {step} is missing ({checkpoint}), so its compute "
                                f"curve cannot be transferred; remove {run} to pre-train it again")
            starts[f"{key}@{step}"] = (str(checkpoint), f"{name}@{step}", seed)
    jobs = {f"{start}-seed{seed}": transfer_settings(plan, where, out / "transfer" / f"{start}-seed{seed}", seed)
            for start, (where, _, _) in starts.items() for seed in plan.seeds}
    done = transfer_runs(jobs, plan.jobs, console)
    for start, (_, row, pretrain_seed) in starts.items():
        table = results["compute"] if "@" in row else results["transfer"]
        table.setdefault(row, []).extend({**done[f"{start}-seed{seed}"], "seed": seed, "pretrain_seed": pretrain_seed}
                                         for seed in plan.seeds)
    results["summary"] = {start: start_stats(rows, test_count(results))
                          for table in ("transfer", "compute") for start, rows in results[table].items()}

    console.rule("3/4 fine-tuning at a higher resolution")
    hires = {}
    first = [r for r in results["transfer"]["supervised"] if r["pretrain_seed"] == plan.pretrain_seeds[0]]
    for seed, low in list(zip(plan.seeds, first))[:plan.hires_seeds]:
        chosen_run = low["chosen"]  # the same lr and steps as the run at the pre-training resolution
        hires[str(seed)] = transfer_settings(plan, starts[_key("supervised", plan.pretrain_seeds[0])][0],
                                              out / "hires" / f"seed{seed}", seed,
                                              image_size=plan.hires, sweep=False, lr=chosen_run["lr"],
                                              steps=chosen_run["steps"])
    results["hires"] = transfer_runs(hires, plan.jobs, console)
    # a partial report now, so that a stop during the inspection (a GPU loan's time limit) still leaves one
    _write(results, out, began, plan, console, partial="stopped before step 4/4, inspecting the backbones")

    console.rule("4/4 inspecting")
    torch.manual_seed(0)
    backbones = {"init": create_backbone(plan.model, img_size=plan.image_size),
                 **{name: load_backbone(pretrainings[_key(name, plan.pretrain_seeds[0])][2])
                    for name in ("supervised", "mpp")}}
    for name, backbone in backbones.items():
        numbers = inspect_backbone(backbone.to(process_device()), out / "inspect" / name, data=plan.data, samples=plan.attention_images)
        results["inspect"][name] = {k: v for k, v in numbers.items() if k != "attention_rollout"}
        results["inspect"][name]["position_similarity"].pop("matrix", None)

    return _write(results, out, began, plan, console)


def machine(plan: Plan) -> dict[str, Any]:
    """Where the reproduction ran, as its report names it."""
    return {"cpu": platform.processor() or platform.machine(), "cores": cores(), "torch_threads": torch.get_num_threads(),
            "processes": plan.jobs, "threads_per_process": max(1, cores() // plan.jobs)
            if plan.jobs > 1 else torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "torch": torch.__version__, "vitx": __version__}


def _write(results: dict[str, Any], out: Path, began: float, plan: Plan, console: Console,
           partial: str | None = None) -> dict[str, Any]:
    """results.json and REPORT.md with the claims judged so far (`partial`: what is not yet done)."""
    results = {**results, "seconds": time.perf_counter() - began, "machine": machine(plan)}
    if partial:
        results["partial"] = partial
    results["claims"] = judge(results)
    atomic_write_text(out / "results.json", json.dumps(results, indent=1))
    write_report(results, out / "REPORT.md", warn=console.print)
    return results


__all__ = ["pretrain_rows", "pretrain_settings", "reproduce", "transfer_runs", "transfer_settings"]

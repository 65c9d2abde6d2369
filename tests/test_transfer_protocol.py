"""The transfer protocol end to end on the embedded dSprites: sweep → choose on val → retrain → test, the run
directory it leaves, --resume, linear probing, learning above chance, and one-line errors."""
from __future__ import annotations

import json
import sys
import types

import pytest
import torch

from .helpers import TRANSFER as QUICK
from .helpers import saved_model_accuracy, vitx_cli
from vitx.safe_io import read_weights
from vitx.runs import load_backbone
from vitx.errors import VitxError
from vitx.transfer import TransferConfig, transfer


def test_protocol_from_a_checkpoint(transfer_run, pretrained_run):
    """The session's `transfer_run`: sweep → choose on val → retrain → test, and the directory it leaves."""
    out_dir, out = transfer_run
    result = out["tasks"][0]
    assert [(p["lr"], p["steps"]) for p in result["sweep"]] == [(0.003, 2), (0.03, 2), (0.003, 4), (0.03, 4)]
    best = max(result["sweep"], key=lambda p: p["val_top1"])
    assert result["chosen"] == {"lr": best["lr"], "steps": best["steps"]}
    root = out_dir / "vtab-dsprites_loc"
    for point in (root / "sweep").iterdir():  # sweep points keep their numbers, not their weights
        assert (point / "point.json").exists() and (point / "metrics.jsonl").exists()
        assert not (point / "checkpoints").exists() and not (point / "model.safetensors").exists()
    final = load_backbone(root / "final")  # the retrained model is a vitx checkpoint at the new resolution
    assert tuple(final.patch_embed.img_size) == (32, 32)
    heads = read_weights(root / "final" / "heads.safetensors")
    assert heads["head.weight"].shape == (16, final.embed_dim)
    config = json.loads((root / "final" / "config.json").read_text())
    assert config["transfer"]["phase"] == "final" and config["run"]["optimizer"] == "sgd"
    assert config["run"]["weight_decay"] == 0.0 and config["run"]["grad_clip"] == 1.0
    # the record is true: the run's model is the start's architecture, its data where the images came from;
    # the start itself and the task are the transfer's
    assert (config["run"]["model"], config["run"]["data"]) == ("vit-nano/4", "embedded")
    assert config["run"]["start"] == str(pretrained_run)
    assert (config["transfer"]["start"], config["transfer"]["task"]) == (str(pretrained_run), "vtab/dsprites_loc")
    summary = json.loads((out_dir / "summary.json").read_text())
    assert result["source"] == "embedded (synthetic regeneration)" and result["synthetic"]
    assert summary["mean"] is None and summary["group_means"] == {}  # synthetic data is no VTAB figure
    assert summary["left_out"] == ["vtab/dsprites_loc"] and (summary["counted"], summary["selected"]) == (0, 1)
    # the reported test accuracy is the saved final model's, recomputed from its files on the 64 test images
    assert result["test_top1"] == pytest.approx(saved_model_accuracy(root / "final", QUICK["task"], 64), abs=1e-6)


def test_a_finished_transfer_is_not_run_again_and_keeps_its_settings(transfer_run, pretrained_run):
    out_dir, out = transfer_run
    result = out["tasks"][0]
    cfg = TransferConfig(start=str(pretrained_run), image_size=32, output_dir=str(out_dir), **QUICK)
    with pytest.raises(VitxError, match="pass --resume"):
        transfer(cfg)
    again = transfer(cfg, resume=True)  # finished: nothing is retrained
    assert again["tasks"][0]["test_top1"] == result["test_top1"]
    with pytest.raises(VitxError, match="different settings"):
        transfer(TransferConfig(**{**cfg.to_dict(), "shots": 50}), resume=True)


def test_resume_after_a_crash_finishes_the_missing_points(tmp_path):
    cfg = TransferConfig(start="scratch", model="vit-nano/4", output_dir=str(tmp_path / "t"), **QUICK)
    transfer(cfg)
    root = tmp_path / "t" / "vtab-dsprites_loc"
    first = json.loads((root / "result.json").read_text())
    (root / "result.json").unlink()  # as if killed after two sweep points
    kept = root / "sweep" / "lr0.003_steps2" / "point.json"
    before = kept.read_text()
    for name in ("lr0.003_steps4", "lr0.03_steps4"):
        (root / "sweep" / name / "point.json").unlink()
    out = transfer(cfg, resume=True)
    assert kept.read_text() == before  # finished points are not run again
    again = out["tasks"][0]["sweep"]
    assert [(p["lr"], p["steps"]) for p in again] == [(p["lr"], p["steps"]) for p in first["sweep"]]
    for p, q in zip(again, first["sweep"]):  # the rerun points give the same numbers (to float noise)
        assert p["val_loss"] == pytest.approx(q["val_loss"], rel=1e-3)
        assert p["train_loss"] == pytest.approx(q["train_loss"], rel=1e-3)
    assert out["tasks"][0]["test_top1"] == pytest.approx(first["test_top1"])  # deterministic: same answer


def test_linear_probe_leaves_the_backbone_unchanged(pretrained_run, tmp_path):
    cfg = TransferConfig(start=str(pretrained_run), adapters=["linear-probe"], sweep=False, lr=0.1, steps=3,
                         output_dir=str(tmp_path / "lp"), **{k: v for k, v in QUICK.items()
                                                             if k not in ("lrs", "sweep_steps")})
    transfer(cfg)
    start = read_weights(pretrained_run / "model.safetensors")
    tuned = read_weights(tmp_path / "lp" / "vtab-dsprites_loc" / "final" / "model.safetensors")
    assert all(torch.equal(start[k], tuned[k]) for k in start)
    head = read_weights(tmp_path / "lp" / "vtab-dsprites_loc" / "final" / "heads.safetensors")
    assert head["head.weight"].abs().sum() > 0


def test_fewshot_adapter_in_closed_form(pretrained_run, tmp_path):
    """The closed-form head takes no training settings (they are refused: tests/test_transfer_adapters.py). Its
    60 images (dSprites location's first 48 train + 12 val) hold every one of the 16 classes; the first 40 do
    not (classes 5 and 14 have none), and a head that can never predict them is refused in one line, before
    anything is written, by `vitx eval fewshot`'s own check."""
    used = {k: QUICK[k] for k in ("task", "test_samples", "workers", "curves")}
    cfg = TransferConfig(start=str(pretrained_run), adapters=["fewshot"], output_dir=str(tmp_path / "fs"),
                         shots=60, **used)
    result = transfer(cfg)["tasks"][0]
    assert result["chosen"] is None and result["sweep"] == [] and result["test_samples"] == 64

    proc = vitx_cli("transfer", "--task", "embedded/digits", "--from", str(pretrained_run), "--adapter", "fewshot",
                    "--shots", "5", "--output-dir", str(tmp_path / "five"))
    assert (proc.returncode, proc.stderr) == (2, "error: --adapter fewshot on embedded/digits: class 0 has only 0 "
                                                 "training images (and 6 other classes); cannot take 1 shot: --shots 5 "
                                                 "gives 5 training images for 10 classes, and the closed-form head never "
                                                 "predicts a class it has none of; pass a larger --shots\n")
    assert not (tmp_path / "five").exists()


def test_a_start_that_is_not_there_is_refused_before_anything_is_written(tmp_path):
    """`--from` a path that is not there: one line, exit 2, and no output folder made (it was made, marked as a
    vitx run and given leases/ before the first item loaded the start); a folder that was there stays as it was."""
    missing = tmp_path / "no-run"
    line = (f"error: --from {missing}: no such checkpoint directory; give a vitx run or checkpoint folder, a timm "
            "model folder (config.json and model.safetensors, as timm's save_for_hf writes it), timm:<name>, or "
            "scratch\n")
    proc = vitx_cli("transfer", "--task", "embedded/digits", "--from", str(missing), "--output-dir",
                    str(tmp_path / "out"))
    assert (proc.returncode, proc.stderr) == (2, line) and not (tmp_path / "out").exists()
    (tmp_path / "empty").mkdir()
    proc = vitx_cli("transfer", "--task", "embedded/digits", "--from", str(missing), "--output-dir",
                    str(tmp_path / "empty"), "--resume")
    assert (proc.returncode, proc.stderr) == (2, line) and list((tmp_path / "empty").iterdir()) == []


def test_fine_tuning_learns_dsprites_location(tmp_path):
    """From scratch, 1000 shots, 16px: well above the 1/16 chance in a short run."""
    cfg = TransferConfig(task="vtab/dsprites_loc", start="scratch", model="vit-nano/4", shots=1000, batch_size=64,
                         sweep=False, lr=0.03, steps=150, test_samples=2000, output_dir=str(tmp_path / "l"),
                         workers=0, log_every=50)
    result = transfer(cfg)["tasks"][0]
    assert result["test_top1"] > 0.15, result


@pytest.mark.parametrize("args,needle", [
    (["--task", "vtab/dsprites_lc"], "unknown task 'vtab/dsprites_lc'; did you mean vtab/dsprites_loc"),
    (["--task", "vtab/dsprites_loc", "--from", "scratch", "--model", "vit-nano/4", "--shots", "900000"],
     "--shots 900000 needs 720000 train and 180000 validation images"),
    (["--task", "vtab/dtd", "--from", "scratch", "--model", "vit-nano/4"], "pass --data-dir DIR"),
    (["--task", "vtab/dsprites_loc", "--from", "/no/such/run"], "no such checkpoint directory"),
    (["--task", "vtab/dsprites_loc", "--from", "{tmp}"], "is not a vitx checkpoint (no config.json)"),
    (["--task", "vtab/dsprites_loc", "--from", "{tmp}/x.safetensors"], "is a file"),
    (["--task", "vtab/dsprites_loc", "--from", "scratch", "--model", "vit-nano/4", "--lrs", "a,b"],
     "--lrs takes comma-separated numbers, e.g. --lrs 0.001,0.003,0.01,0.03; got 'a,b'"),
    (["--task", "vtab/dsprites_loc", "--from", "{tmp}", "--model", "vit-b/16"], "--model is for --from scratch"),
    (["--task", "vtab/dsprites_loc", "--adapter", "lorra"], "unknown adapter 'lorra'; did you mean lora?"),
    (["--task", "vtab/dsprites_loc", "--from", "timm:vit_tiny_patch16_224"], "could not fetch pretrained weights"),
    (["--task", "vtab/all", "--from", "scratch", "--model", "vit-nano/4"], "pass --skip-missing to run the others"),
])
def test_transfer_user_errors_are_one_line(tmp_path, args, needle):
    (tmp_path / "x.safetensors").write_bytes(b"not weights")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    proc = vitx_cli("transfer", *args, "--output-dir", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("warning")]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_not_a_vit_checkpoint(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"backbone": {"name": "vit-nano/4", "overrides": {}}}))
    (run / "model.safetensors").write_bytes(b"\x00" * 16)
    proc = vitx_cli("transfer", "--task", "vtab/dsprites_loc", "--from", str(run), "--output-dir", str(tmp_path / "o"))
    assert proc.returncode == 2 and "not a readable safetensors file" in proc.stderr and "Traceback" not in proc.stderr


def test_listings():
    tasks = vitx_cli("tasks")
    assert tasks.returncode == 0 and "vtab/dsprites_loc" in tasks.stdout and "structured" in tasks.stdout
    assert "clip-benchmark/wds_vtab-dtd" in tasks.stdout
    adapters = vitx_cli("adapters")
    for name in ("resize-posemb", "zero-head", "finetune", "linear-probe", "fewshot"):
        assert name in adapters.stdout


def test_eval_fewshot_command(pretrained_run, tmp_path):
    out = tmp_path / "fs.json"
    proc = vitx_cli("eval", "fewshot", "--from", str(pretrained_run), "--data", "embedded:digits",
                    "--shots", "1,5", "--seeds", "2", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert set(result["shots"]) == {"1", "5"} and len(result["shots"]["5"]["per_seed"]) == 2
    assert result["shots"]["5"]["mean"] > 0.4
    assert "few-shot linear evaluation" in proc.stdout


def test_eval_fewshot_on_a_task(pretrained_run, tmp_path):
    proc = vitx_cli("eval", "fewshot", "--from", str(pretrained_run), "--task", "vtab/dsprites_loc", "--shots", "2",
                    "--seeds", "1", "--test-samples", "100", "--output", str(tmp_path / "f.json"))
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "f.json").read_text())
    assert result["num_classes"] == 16 and result["test_samples"] == 100


def test_a_suite_prints_group_means_and_writes_a_summary(tmp_path):
    cfg = TransferConfig(start="scratch", model="vit-nano/4", output_dir=str(tmp_path / "s"),
                         **{**QUICK, "task": "vtab/dsprites_*", "sweep_steps": [2], "lrs": [0.01]})
    out = transfer(TransferConfig(**{**cfg.to_dict(), "allow_synthetic": True}))
    assert [r["task"] for r in out["tasks"]] == ["vtab/dsprites_loc", "vtab/dsprites_ori"]
    mean = sum(r["test_top1"] for r in out["tasks"]) / 2
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert summary["group_means"]["structured"] == pytest.approx(mean) and summary["mean"] == pytest.approx(mean)
    assert (summary["counted"], summary["selected"], summary["left_out"]) == (2, 2, [])  # --allow-synthetic
    skipped = transfer(TransferConfig(**{**cfg.to_dict(), "task": "vtab/all", "skip_missing": True,
                                         "output_dir": str(tmp_path / "all")}))
    assert [r["task"] for r in skipped["tasks"]] == ["vtab/dsprites_loc", "vtab/dsprites_ori"]  # offline: the rest
    assert skipped["selected"] == 19 and len(skipped["skipped"]) == 17 and skipped["counted"] == 0
    assert skipped["mean"] is None and skipped["left_out"] == ["vtab/dsprites_loc", "vtab/dsprites_ori"]


def test_eval_fewshot_from_scratch_is_the_same_every_time(tmp_path):
    """A from-scratch baseline is one network per --seed (it was a new draw on every call)."""
    numbers = []
    for i, seed in enumerate([0, 0, 1]):
        out = tmp_path / f"fs{i}.json"
        proc = vitx_cli("eval", "fewshot", "--from", "scratch", "--model", "vit-nano/4", "--data", "embedded:digits",
                        "--shots", "10", "--seeds", "1", "--test-samples", "200", "--seed", str(seed),
                        "--output", str(out))
        assert proc.returncode == 0, proc.stderr
        numbers.append(json.loads(out.read_text())["shots"]["10"]["per_seed"])
    assert numbers[0] == numbers[1] and numbers[0] != numbers[2]


def test_a_timm_start_is_saved_so_that_it_reloads_offline(monkeypatch):
    """timm's weights travel in model.safetensors; the saved record must not ask timm to fetch them again."""
    import timm

    from vitx.backbones import create_backbone
    from vitx.runs.start import load_start

    real = timm.create_model
    fetched = []

    def offline_create(name, pretrained=False, **kw):  # stands in for the download
        fetched.append(pretrained)
        return real(name, pretrained=False, **kw)

    monkeypatch.setattr(timm, "create_model", offline_create)
    backbone = load_start("timm:vit_tiny_patch16_224(img_size=32, patch_size=8)")
    assert fetched == [True]  # the start itself uses timm's pretrained weights
    record = backbone.vitx_record
    assert "pretrained" not in record["overrides"]
    rebuilt = create_backbone(record["name"], **record["overrides"])  # as load_backbone does: no fetch
    assert fetched == [True, False] and tuple(rebuilt.patch_embed.img_size) == (32, 32)


def test_a_stop_signal_in_a_sweep_keeps_the_finished_points(tmp_path, monkeypatch):
    """A stop request (what SIGTERM/SIGUSR1 become) during the third sweep point: the transfer stops with exit
    75's error after checkpointing that point's step; --resume keeps the two finished points, continues the
    third from its checkpoint, and ends with the uninterrupted transfer's numbers."""
    from vitx.errors import Preempted
    from vitx.runner.loop import Trainer

    def cfg(name):
        return TransferConfig(start="scratch", model="vit-nano/4", output_dir=str(tmp_path / name), **QUICK)

    whole = transfer(cfg("whole"))["tasks"][0]
    step, runs = Trainer.step, []

    def signalled_in_third_run(self, *args):
        step(self, *args)
        if not runs or runs[-1] is not self:
            runs.append(self)
        if len(runs) == 3 and self.step_count == 2:
            self.stop_requested = True  # as the agreement sets it when a stop signal reached any process

    monkeypatch.setattr(Trainer, "step", signalled_in_third_run)
    with pytest.raises(Preempted, match=r"at step 2: checkpoint .*step_00000002.* --resume"):
        transfer(cfg("stopped"))
    root = tmp_path / "stopped" / "vtab-dsprites_loc" / "sweep"
    finished = sorted(p.parent.name for p in root.glob("*/point.json"))
    assert finished == ["lr0.003_steps2", "lr0.03_steps2"]
    kept = {name: (root / name / "point.json").read_text() for name in finished}
    monkeypatch.setattr(Trainer, "step", step)
    again = transfer(cfg("stopped"), resume=True)["tasks"][0]
    assert {name: (root / name / "point.json").read_text() for name in finished} == kept  # not run again
    assert [p["val_loss"] for p in again["sweep"]] == pytest.approx([p["val_loss"] for p in whole["sweep"]],
                                                                     rel=1e-6)
    assert again["test_top1"] == whole["test_top1"]


def test_seeds_repeat_the_final_run_and_give_mean_and_spread(tmp_path):
    """--seeds 0,1: the final run twice (final/, final-seed1/), the result their mean ± s.d.; the summary's
    spread is that of the suite mean over seeds."""
    from vitx.transfer.report import summarise

    cfg = TransferConfig(start="scratch", model="vit-nano/4", output_dir=str(tmp_path / "s"), seeds=[0, 1],
                         allow_synthetic=True, **{**QUICK, "sweep": False, "steps": 2, "curves": False})
    (result,) = transfer(cfg)["tasks"]
    root = tmp_path / "s" / "vtab-dsprites_loc"
    assert (root / "final" / "model.safetensors").is_file() and (root / "final-seed1" / "model.safetensors").is_file()
    per_seed = result["test_top1_per_seed"]
    assert result["seeds"] == [0, 1] and len(per_seed) == 2
    assert result["test_top1"] == pytest.approx(sum(per_seed) / 2)
    assert result["test_top1_std"] == pytest.approx(abs(per_seed[0] - per_seed[1]) / 2 ** 0.5)
    # --seeds 1 alone: that seed's final run, no spread (its result line raised KeyError before)
    (one,) = transfer(TransferConfig(**{**cfg.to_dict(), "output_dir": str(tmp_path / "one"), "seeds": [1]}))["tasks"]
    assert one["test_top1"] == per_seed[1] and "test_top1_std" not in one
    rows = [{"task": "a", "group": "natural", "test_top1": 0.5, "test_top1_per_seed": [0.4, 0.6]},
            {"task": "b", "group": "natural", "test_top1": 0.7, "test_top1_per_seed": [0.6, 0.8]}]
    summary = summarise(rows)
    assert summary["mean"] == pytest.approx(0.6) and summary["std"] == pytest.approx(0.1414214, abs=1e-6)
    with pytest.raises(VitxError, match="--seeds takes distinct"):
        TransferConfig(seeds=[0, 0]).validate()


def test_published_rows_match_their_printed_means_and_print_beside_the_run():
    """The bundled VTAB-1k rows reproduce the means their sources print (Table 2 of the ViT paper over 19 tasks;
    VPT's group means); a matching timm start gets its row unasked; --compare rows sit beside the run's."""
    import io

    from rich.console import Console

    from vitx.tasks import get_task
    from vitx.tasks.published import PUBLISHED, matching
    from vitx.transfer.protocol import compare_with
    from vitx.transfer.report import print_summary, summarise

    for name, mean in (("vit-h14-jft", 77.63), ("vit-l16-jft", 76.28), ("vit-l16-i21k", 72.72)):
        assert sum(PUBLISHED[name].values) / 19 == pytest.approx(mean, abs=0.02), name
    for name in ("vit-b16-i21k-full", "vit-b16-i21k-vpt-deep"):
        row = PUBLISHED[name]
        for group, printed in row.group_means.items():
            values = [v for t, v in row.per_task().items() if get_task(t).group == group]
            assert 100 * sum(values) / len(values) == pytest.approx(printed, abs=0.03), (name, group)
    assert [r.name for r in matching("timm:vit_base_patch16_224.orig_in21k", "finetune")] == ["vit-b16-i21k-full"]
    assert [r.name for r in matching("timm:vit_base_patch16_224.orig_in21k", "linear-probe")] == ["vit-b16-i21k-linear"]
    assert matching("runs/mine", "finetune") == []
    with pytest.raises(VitxError, match="no published VTAB-1k row 'vit-x'; known: vit-h14-jft"):
        TransferConfig(compare=["vit-x"]).validate()

    results = [{"task": "vtab/dtd", "group": "natural", "test_top1": 0.6, "seconds": 1.0, "sweep": [], "chosen": None},
               {"task": "vtab/eurosat", "group": "specialized", "test_top1": 0.9, "seconds": 1.0, "sweep": [],
                "chosen": None}]
    summary = summarise(results)
    summary["compare"] = compare_with(TransferConfig(compare=["vit-l16-i21k"]), results, summary)
    shown = summary["compare"]["vit-l16-i21k"]
    assert shown["tasks"] == {"vtab/dtd": pytest.approx(0.741), "vtab/eurosat": pytest.approx(0.956)}
    assert shown["mean_same_tasks"] == pytest.approx((0.741 + 0.956) / 2)
    assert shown["group_means_same_tasks"] == {"natural": pytest.approx(0.741), "specialized": pytest.approx(0.956)}
    out = io.StringIO()
    print_summary(results, summary, Console(file=out, width=250))
    text = out.getvalue()
    assert "vit-l16-i21k" in text and "74.1%" in text and "95.6%" in text and "84.85%" not in text
    assert "printed mean over 19: 72.72 ± 0.21" in text


def test_a_transfer_logs_each_point_to_the_trackers_grouped_by_task(tmp_path, monkeypatch):
    """`--log-with wandb`: every sweep point and the final run start a tracker run of their own, named after
    the point and grouped by the transfer and task (Accelerate's init_trackers, recorded here)."""
    import accelerate

    import vitx.runner.launch

    calls = []

    class Recorded(accelerate.Accelerator):  # wandb is not installed here: Accelerate would drop it
        def __init__(self, *args, log_with=None, **kw):
            super().__init__(*args, **kw)
            self.log_with = list(log_with or [])

        def init_trackers(self, project, config=None, init_kwargs=None):
            calls.append((project, config, init_kwargs))

        def log(self, values, step=None, log_kwargs=None):
            pass

        def end_training(self):
            pass

    monkeypatch.setattr(vitx.runner.launch, "Accelerator", Recorded)
    monkeypatch.setitem(sys.modules, "wandb", types.ModuleType("wandb"))  # as if installed: --log-with takes it
    monkeypatch.setattr(accelerate.utils.imports, "is_wandb_available", lambda: True)
    cfg = TransferConfig(start="scratch", model="vit-nano/4", output_dir=str(tmp_path / "t"), log_with="wandb",
                         **{**QUICK, "sweep_steps": [2], "lrs": [0.01, 0.1]})
    transfer(cfg)
    names = [kw["wandb"]["name"] for _, _, kw in calls]
    assert names == ["vtab/dsprites_loc lr0.01_steps2", "vtab/dsprites_loc lr0.1_steps2", "vtab/dsprites_loc final"]
    assert {kw["wandb"]["group"] for _, _, kw in calls} == {"t/vtab/dsprites_loc"}
    assert all(config["log_with"] == "wandb" and config["lr"] in (0.01, 0.1) for _, config, _ in calls)


TINY_TRANSFER = ["--from", "scratch", "--model", "vit-nano/4", "--image-size", "16", "--no-sweep", "--steps", "1",
                 "--batch-size", "4", "--test-samples", "8", "--workers", "0", "--no-curves"]


def test_a_transfer_that_failed_before_training_does_not_block_the_retry(tmp_path):
    """A transfer whose start is not there fails after recording its task folder: it takes the record back, and a
    record left by a kill before training blocks nothing either; the corrected command runs without --resume."""
    out = tmp_path / "out"
    proc = vitx_cli("transfer", "--task", "embedded/digits", "--shots", "10", *TINY_TRANSFER[4:], "--from",
                    str(tmp_path / "no-such-run"), "--output-dir", str(out))
    assert proc.returncode == 2 and "no such checkpoint directory" in proc.stderr, proc.stderr
    assert list(out.rglob("transfer.json")) == []

    claimed = out / "embedded-digits" / "transfer.json"  # what a kill between the record and training leaves
    claimed.parent.mkdir(parents=True)
    claimed.write_text(json.dumps({"task": "embedded/digits", "shots": 20, "seed": 7}))
    proc = vitx_cli("transfer", "--task", "embedded/digits", "--shots", "10", *TINY_TRANSFER, "--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(claimed.read_text())["shots"] == 10
    assert json.loads((out / "embedded-digits" / "result.json").read_text())["shots"] == 10


def test_data_folders_that_share_a_name_get_a_task_folder_each(tmp_path):
    """`--task a/photos,b/photos`: once both went to out/data-photos and the second was refused. Each gets its
    own folder, named after the part of its path that tells them apart; a lone one keeps data-photos."""
    from vitx.tasks import Task
    from vitx.transfer.protocol import task_dirs

    from .helpers import write_image_folder

    a, b = write_image_folder(tmp_path / "a" / "photos"), write_image_folder(tmp_path / "b" / "photos")
    out = tmp_path / "out"
    proc = vitx_cli("transfer", "--task", f"{a},{b}", "--shots", "5", *TINY_TRANSFER, "--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert [t["task"] for t in summary["tasks"]] == [str(a), str(b)]
    for folder, data in (("data-a-photos", a), ("data-b-photos", b)):
        assert json.loads((out / folder / "transfer.json").read_text())["task"] == str(data)
        assert json.loads((out / folder / "result.json").read_text())["task"] == str(data)

    cfg = TransferConfig(output_dir=str(out))
    task = lambda name: Task(name=name, group="custom", num_classes=2, label="folders", data=name)  # noqa: E731
    assert task_dirs(cfg, [task(str(a))]) == {str(a): out / "data-photos"}  # as before: existing runs resume
    same = task_dirs(cfg, [task("photos"), task("photos/")])  # no part of the path tells them apart: a hash
    assert len(set(same.values())) == 2 and all(p.name.startswith("data-photos-") for p in same.values())

    # a task folder holding another dataset's transfer is never continued as this one's
    (out / "data-a-photos").rename(out / "data-photos")  # (a's transfer, in the folder b's would take)
    proc = vitx_cli("transfer", "--task", str(b), "--shots", "5", *TINY_TRANSFER, "--output-dir", str(out), "--resume")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"error: {out / 'data-photos'} holds a transfer of {a}, not {b}; choose another --output-dir" in proc.stderr


@pytest.mark.parametrize("where, key, value, message", [
    ("timm_kwargs", "__class__", "os.system", "backbone.timm_kwargs: unknown argument '__class__' for vit-nano/4"),
    ("overrides", "depth", 10 ** 6, "backbone.overrides: depth must be an integer from 1 to 256, got 1000000")])
def test_a_start_whose_config_was_tampered_with_is_refused_as_export_refuses_it(pretrained_run, tmp_path, where,
                                                                               key, value, message):
    """`--from` a run whose config.json was edited: the same check as export's, before anything is built, in
    the same line (transfer once ran from a record export refused)."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(pretrained_run, run, ignore=shutil.ignore_patterns("checkpoints"))
    config = json.loads((run / "config.json").read_text())
    config["backbone"][where][key] = value
    (run / "config.json").write_text(json.dumps(config))
    lines = []
    for args in (["export", str(run), "--to", str(tmp_path / "x")],
                 ["transfer", "--task", "embedded/digits", "--from", str(run), "--adapter", "fewshot", "--shots", "30",
                  "--output-dir", str(tmp_path / "t")],
                 ["eval", "knn", "--from", str(run), "--data", "embedded:digits", "--test-samples", "10"]):
        proc = vitx_cli(*args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        lines.append(proc.stderr.strip().splitlines()[-1])
    assert lines[0] == lines[1] == lines[2] and lines[0].startswith(f"error: {run}/config.json ") and message in lines[0]


def test_eval_and_transfer_evaluate_the_same_test_images_for_the_same_seed(pretrained_run, tmp_path, monkeypatch):
    """One --test-samples rule (data/draws.py): `vitx eval knn` and `vitx transfer` on one registered task with
    the same --test-samples 100 --seed 0 draw the same 100 test images, class-stratified (each class of the
    digits' 360 test images, 27 to 47 of each, within one image of its share), never the first 100; another
    seed draws others. A start stopped before its --steps is said in one line, and used."""
    import shutil

    import numpy as np

    import vitx.data.draws as draws

    drawn: list[tuple[int, np.ndarray]] = []
    real = draws.test_draw

    def spy(labels, size, count, seed):
        rows = real(labels, size, count, seed)
        if rows is not None:
            drawn.append((size, rows))
        return rows

    monkeypatch.setattr(draws, "test_draw", spy)
    # (and from a run stopped at step 42 of its 150: both say so in one line, and go on)
    run = tmp_path / "stopped"
    shutil.copytree(pretrained_run, run, ignore=shutil.ignore_patterns("checkpoints"))
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "step": 42}))
    warning = (f"warning: --from {run} stopped at step 42 of its 150 (its last checkpoint): going on from it as it "
               f"is; `vitx pretrain --output-dir {run} --resume` finishes it\n")
    common = ["--from", str(run), "--task", "embedded/digits", "--test-samples", "100", "--seed", "0"]
    proc = vitx_cli("eval", "knn", *common, "--k", "10", "--output", str(tmp_path / "knn.json"))
    assert proc.returncode == 0 and proc.stdout.startswith(warning), proc.stderr[-2000:]
    proc = vitx_cli("transfer", *common, "--adapter", "fewshot", "--shots", "30", "--output-dir", str(tmp_path / "t"))
    assert proc.returncode == 0 and proc.stdout.startswith(warning), proc.stderr[-2000:]
    assert "test 100 of 360 (a seeded, class-stratified draw: --test-samples)" in proc.stdout
    (size_eval, rows_eval), (size_transfer, rows_transfer) = drawn
    assert size_eval == size_transfer == 360 and len(rows_eval) == 100
    assert np.array_equal(rows_eval, rows_transfer) and not np.array_equal(rows_eval, np.arange(100))
    from vitx.tasks import get_task, open_full_splits

    _, test, _ = open_full_splits(get_task("embedded/digits"))
    shares = 100 * np.bincount(test.labels(), minlength=10) / 360
    assert np.all(np.abs(np.bincount(test.labels()[rows_eval], minlength=10) - shares) < 1)
    assert rows_eval[:8].tolist() == [11, 13, 15, 18, 20, 24, 26, 27]  # (the draw itself: test_draw, seed 0)
    result = json.loads((tmp_path / "t" / "embedded-digits" / "result.json").read_text())
    assert result["test_samples"] == 100 == json.loads((tmp_path / "knn.json").read_text())["test_samples"]
    assert result["test_draw"] == {"rule": "seeded, class-stratified", "seed": 0, "images": 100, "of": 360}
    assert not np.array_equal(real(test.labels(), 360, 100, 1), rows_eval)  # another seed, other images

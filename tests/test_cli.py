"""The command line: user errors are one line and a non-zero exit, never a traceback; the console script itself
starts and answers without importing the training stack."""
import shutil
import subprocess
import sys

import pytest

from .helpers import ROOT, vitx_cli


def _one_line_error(result, needle):
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and lines[0].startswith("error: ")
    assert needle in lines[0]


@pytest.mark.parametrize("args,said", [
    (["predict", "--bogus"], "no such option: --bogus (see vitx predict --help)"),
    (["eval", "knn", "--k"], "option '--k' requires an argument (see vitx eval knn --help)"),
    (["frobnicate"], "no such command 'frobnicate' (see vitx --help)"),
    (["pretrain", "--steps", "abc"], "invalid value for '--steps': "),
    (["predict"], "missing argument 'RUN' (see vitx predict --help)"),
])
def test_usage_errors_are_one_line_naming_the_help(args, said):
    """click's usage errors (an unknown option or command, a missing value) as every other error: one line."""
    _one_line_error(vitx_cli(*args), said)


def test_the_bare_command_and_group_print_their_help_once():
    for args in ([], ["eval"]):
        result = vitx_cli(*args)
        shown = result.stdout + result.stderr
        assert result.returncode == 2 and shown.count("Usage: vitx") == 1 and not result.stderr.strip(), shown[:500]


@pytest.mark.parametrize("args,needle", [
    (["--model", "vit-b/17"], "unknown backbone 'vit-b/17'; did you mean vit-b/16"),
    (["--model", "vit-nano/4(depth='x')"], "--model: depth must be an integer from 1 to 256, got \"x\""),
    (["--model", "vit-nano/4(depth=-1)"], "--model: depth must be an integer from 1 to 256, got -1"),
    (["--model", "vit-nano/4(bogus=1)"], "--model: unknown option 'bogus'"),
    (["--model", "vit-ti/16", "--image-size", "33"], "image size 33 is not divisible by the patch size 16"),
    (["--data", "/no/such/dir"], "data path /no/such/dir does not exist"),
    (["--optimizer", "adamax2"], "--optimizer must be one of adamw, adam, sgd, lamb, lars, lion"),
    (["--layer-decay", "0"], "--layer-decay must be in (0, 1], got 0"),
    (["--drop-path", "1"], "--drop-path must be in [0, 1), got 1"),
    (["--randaugment", "rand-zz"], "randaugment 'rand-zz' is not a timm augmentation policy"),
    (["--monitor-features", "cls"], "--monitor-features must be one of auto, pre-logits, cls-token, patch-mean"),
    (["--precision", "fp16"], "fp16 mixed precision needs a GPU"),
    (["--batch-size", "10", "--grad-accum", "3"], "must divide evenly"),
    (["--objective", "supervised(colour=1)"], "supervised has no option 'colour'"),
    (["--lr", "nan"], "--lr must be a finite number, got nan"),
    (["--lr", "inf"], "--lr must be a finite number, got inf"),
    (["--weight-decay", "nan"], "--weight-decay must be a finite number, got nan"),
    (["--set", "crop_scale=inf"], "--crop-scale must be a finite number, got inf"),
    (["--batch-size", "1000000"], "--batch-size 1000000 is too large: at most 65,536"),
    (["--image-size", "100000"], "--image-size 100000 is too large: at most 4,096"),
    (["--workers", "100000"], "--workers 100000 is too large: at most 256"),
    (["--eval-samples", "1000000000"], "--eval-samples 1000000000 is too large"),
    (["--shuffle-buffer", "100000000"], "--shuffle-buffer 100000000 is too large"),
    (["--workers", "-5"], "--workers must be -1 (the default"),
    (["--seed", "-1"], "--seed must not be negative, got -1"),
    (["--data", "embedded:shapes(length=-5)"],
     "embedded:shapes: length must be a whole number from 0 to 100,000,000, got -5"),
    (["--data", "embedded:shapes(classes='a')"], "embedded:shapes: classes must be a whole number"),
    (["--data", "embedded:digits(length='x')"],
     "embedded:digits: length must be a whole number from 0 to 100,000,000, got 'x'"),
    (["--data", "embedded:shapes(size=0)"], "embedded:shapes: size must be a whole number from 1 to 4,096, got 0"),
    (["--data", "embedded:shapes(bogus=1)"], "embedded:shapes has no option 'bogus' (its options: size, length, seed"),
])
def test_user_errors_are_one_line(tmp_path, args, needle):
    result = vitx_cli("pretrain", "--output-dir", str(tmp_path / "run"), "--log-with", "none", *args)
    _one_line_error(result, needle)
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize("args,needle", [
    (["--set", "lrs=[]"], "--lrs is empty: give at least one learning rate"),
    (["--lrs", ","], "--lrs is empty: give at least one value, e.g. --lrs 0.001,0.003,0.01,0.03"),
    (["--lrs", "1,abc"], "--lrs takes comma-separated numbers, e.g. --lrs 0.001,0.003,0.01,0.03; got '1,abc'"),
    (["--sweep-steps", "1,x"], "--sweep-steps takes comma-separated whole numbers"),
    (["--lrs", "nan"], "--lrs must be finite numbers, got [nan]"),
    (["--no-sweep", "--lr", "inf"], "--lr must be a finite number, got inf"),
    (["--set", "grad_clip=nan"], "--grad-clip must be a finite number, got nan"),
    (["--batch-size", "10000000"], "--batch-size 10000000 is too large: at most 65,536"),
    (["--seed", "-2"], "--seed must not be negative, got -2"),
    (["--optimizer", "bogus"], "--optimizer must be one of adamw, adam, sgd, lamb"),
    (["--weight-decay", "-0.1"], "--weight-decay must not be negative, got -0.1"),
    (["--layer-decay", "1.5"], "--layer-decay must be in (0, 1], got 1.5"),
    (["--layer-decay", "0"], "--layer-decay must be in (0, 1], got 0"),
    (["--drop-path", "1"], "--drop-path must be in [0, 1), got 1"),
    (["--drop-path", "-0.1"], "--drop-path must be in [0, 1), got -0.1"),
    (["--mixup", "-1"], "--mixup must not be negative, got -1"),
    (["--cutmix", "nan"], "--cutmix must be a finite number, got nan"),
    (["--label-smoothing", "1"], "--label-smoothing must be in [0, 1), got 1"),
    (["--random-erasing", "2"], "--random-erasing must be in [0, 1], got 2"),
    (["--crop-scale", "0"], "--crop-scale must be in (0, 1], got 0"),
    (["--augment", "--randaugment", "bogus-m9"], "randaugment 'bogus-m9' is not a timm augmentation policy"),
    (["--randaugment", "original"], "--randaugment acts on augmented training images: add --augment"),
    (["--threads", "2", "--jobs", "2"], "--threads 2 with --jobs 2: each job computes with its share of the cores"),
])
def test_transfer_settings_are_checked_in_one_line(tmp_path, args, needle):
    result = vitx_cli("transfer", "--task", "embedded/digits", "--from", "scratch", "--model", "vit-nano/4",
                      "--output-dir", str(tmp_path / "t"), *args)
    _one_line_error(result, needle)
    assert not (tmp_path / "t").exists()


def test_help_texts_keep_their_square_brackets():
    """Rich reads `[...]` in a help text as markup and drops it: `backbone ([class] token)` printed as
    `backbone ( token)`, and every hand-written `[default: ...]` vanished. Each must print as written."""
    import typer
    from rich.markup import render

    from vitx.cli import app

    def helps(command):
        yield command.help or ""
        for param in command.params:
            yield getattr(param, "help", None) or ""
        for sub in getattr(command, "commands", {}).values():
            yield from helps(sub)

    texts = [h for h in helps(typer.main.get_command(app)) if "[" in h]
    assert any("\\[class]" in h for h in texts) and any("\\[default: 0.002]" in h for h in texts)
    for text in texts:
        assert render(text).plain == text.replace("\\[", "["), text
    shown = vitx_cli("pretrain", "--help").stdout
    assert "[class]" in shown and "[default:" in shown


def test_a_line_for_people_is_printed_as_written():
    """`say` (vitx/console.py), what every command's notes and results go through: a user's `[...]` in a path or
    a name is text, not rich markup, and a line longer than the console is not broken (a path stays one piece)."""
    import io

    from rich.console import Console

    from vitx.console import say

    out = io.StringIO()
    line = "start: /data/[train]/[bold]x[/] " + "y" * 150
    say(Console(file=out, width=40), line)
    assert out.getvalue() == line + "\n"


def test_a_renamed_choice_keeps_its_former_name(tmp_path):
    """The feature "cls-token" was called "backbone": the former name still works wherever it is written (an
    option, --set, a recipe, an older run's transfer.json), is read as the current one when the config is checked
    (frozen configs too), and --help says so."""
    import dataclasses
    import re

    from vitx.errors import VitxError
    from vitx.evaluators.knn import KnnConfig
    from vitx.evaluators.linear import LinearConfig
    from vitx.recipe import resolve
    from vitx.runner.config import PretrainConfig
    from vitx.settings import EVALUATION, check, current_values, setting
    from vitx.transfer.config import TransferConfig

    assert TransferConfig(features="backbone").validate().features == "cls-token"
    assert KnnConfig(features="backbone").validate().features == "cls-token"
    assert LinearConfig(features=["backbone+patch-mean", "last4"]).validate().features == \
        ["cls-token+patch-mean", "last4"]  # item by item
    assert PretrainConfig(monitor_features="backbone").validate().monitor_features == "cls-token"
    recipe = tmp_path / "r.toml"
    recipe.write_text('[transfer]\nfeatures = "backbone"\n')
    for given in ({"recipe": str(recipe)}, {"sets": ["features=backbone"]}):
        chosen = resolve(TransferConfig, "transfer", given.get("recipe"), given.get("sets", []), {})
        assert TransferConfig(**chosen).validate().features == "cls-token"
    saved = {"task": "vtab/dtd", "features": "backbone", "lr": 0.01}  # an older run's transfer.json
    assert current_values(TransferConfig, saved) == {**saved, "features": "cls-token"}

    @dataclasses.dataclass(frozen=True)
    class Frozen:
        pool: str = setting("mean", "Pooling.", EVALUATION, choices=("mean", "max"), renamed={"avg": "mean"})

    fixed = Frozen(pool="avg")
    check(fixed)
    assert fixed.pool == "mean"
    with pytest.raises(VitxError, match="--pool must be one of mean, max, got 'sum'"):
        check(Frozen(pool="sum"))

    shown = " ".join(re.sub("[│╭╮╰╯─]", " ", vitx_cli("eval", "knn", "--help").stdout).split())
    assert "Former value names still work: backbone (now cls-token)." in shown
    result = vitx_cli("transfer", "--task", "embedded/digits", "--from", "scratch", "--model", "vit-nano/4",
                      "--features", "bogus", "--output-dir", str(tmp_path / "t"))
    _one_line_error(result, "--features must be one of auto, cls-token, patch-mean, got 'bogus'")


def test_a_shared_setting_is_declared_once_and_reaches_every_command_that_composes_its_group():
    """Settings several commands take live in groups (settings/groups.py) that each config composes: the same
    declaration (help, panel, bounds, resume rule) everywhere, only the default a config's own, and the option
    in every such command's --help. A shared setting declared a second time in a config would fail here."""
    import dataclasses

    from vitx.evaluators.linear import LinearConfig
    from vitx.runner.config import PretrainConfig
    from vitx.settings import flag_of, groups_of
    from vitx.transfer.config import TransferConfig

    configs = {"pretrain": PretrainConfig, "transfer": TransferConfig, "eval linear": LinearConfig}
    helps = {name: vitx_cli(*name.split(), "--help").stdout for name in configs}
    checked = 0
    for group in {g for cls in configs.values() for g in groups_of(cls)}:
        users = [name for name, cls in configs.items() if group in groups_of(cls)]
        for declared in dataclasses.fields(group):
            for name in users:
                field = {f.name: f for f in dataclasses.fields(configs[name])}[declared.name]
                assert dict(field.metadata) == dict(declared.metadata), (name, declared.name)
                assert flag_of(field) in helps[name], (name, flag_of(field))
                checked += 1
    # the group settings of pretrain, transfer (with Input) and eval linear; Input's mean and std are its
    # Normalisation's, which pretrain composes alone: checked under both
    assert checked == 34 + 39 + 15
    own = {f.name for f in dataclasses.fields(TransferConfig)} & {f.name for f in dataclasses.fields(PretrainConfig)}
    in_groups = {f.name for g in groups_of(TransferConfig) for f in dataclasses.fields(g)}
    # what the two commands share outside the groups means something different in each (the run's own)
    assert own - in_groups == {"lr", "steps", "output_dir", "save_every"}
    assert (TransferConfig().optimizer, PretrainConfig().optimizer) == ("sgd", "adamw")  # own defaults
    assert (TransferConfig().start, PretrainConfig().start, PretrainConfig().model) == \
        ("runs/pretrain", "scratch", "vit-nano/4")


def _flag_rows(shown: str) -> list[str]:
    """The option names --help lists, one per row (a row's first word inside the panel frame)."""
    import re

    return re.findall(r"^│ (--[a-z-]+)", shown, flags=re.M)


def test_eval_transfer_and_pretrain_list_the_start_group_once_and_init_only_as_a_former_name():
    """--from, --model, --image-size and --use-ema are one declaration (settings/groups.py's Start) that every
    command composes: each listed once in each command's --help, in the Model panel; pre-training's former --init is
    hidden there, named once, in --from's help."""
    import re

    for args in (("eval", "knn"), ("eval", "linear"), ("transfer",), ("pretrain",)):
        shown = vitx_cli(*args, "--help").stdout
        rows = _flag_rows(shown)
        for flag in ("--from", "--model", "--image-size", "--use-ema", "--seed"):
            assert rows.count(flag) == 1, (args, flag, rows)
        assert "--init" not in rows, args
        assert len(re.findall(r"--init\b", shown)) == 1 and "Pre-training's former name for it, --init, still works." in \
            " ".join(re.sub("[│]", " ", shown).split()), args
        model = shown[shown.index("─ Model ─"):]
        model = model[:model.index("╰")]
        assert all(flag in _flag_rows(model) for flag in ("--from", "--model", "--image-size", "--use-ema")), args


def test_pretrain_init_is_from_on_the_command_line_in_recipes_and_in_recorded_runs(tmp_path, monkeypatch):
    """`vitx pretrain --init X` (the former name) chooses what `--from X` does; a recipe's `init = ...` and --set
    init=... load as `start`; an old run's config.json `run.init` reads as its start ("" as scratch), for a
    resume (`saved_settings`) and a rebuilt command line alike. Both names at once is one line."""
    import json

    import vitx.runner
    from vitx.export.command import rebuild
    from vitx.runner.config import PretrainConfig
    from vitx.runner.setup import saved_settings

    chosen: list[dict] = []
    monkeypatch.setattr(vitx.runner, "pretrain", lambda options, **kw: chosen.append(options))
    recipe = tmp_path / "old.toml"
    recipe.write_text('[pretrain]\ninit = "runs/micro"\nsteps = 7\n')
    for args in (["--from", "runs/micro", "--steps", "7"], ["--init", "runs/micro", "--steps", "7"],
                 ["--recipe", str(recipe)], ["--set", "init=runs/micro", "--steps", "7"]):
        assert vitx_cli("pretrain", *args).returncode == 0, args
    assert chosen == [{"start": "runs/micro", "steps": 7}] * 4
    assert PretrainConfig(**chosen[1]) == PretrainConfig(start="runs/micro", steps=7)
    _one_line_error(vitx_cli("pretrain", "--from", "runs/a", "--init", "runs/b"),
                    "--from is given twice, as --from and as its former name --init; keep --from")
    recipe.write_text('[pretrain]\ninit = "runs/a"\nstart = "runs/b"\n')
    _one_line_error(vitx_cli("pretrain", "--recipe", str(recipe)), "start is given twice, as start and as its "
                    "former name init; keep start")

    for recorded, start in (("runs/micro", "runs/micro"), ("", "scratch")):  # checkpoints written before --from
        checkpoint = tmp_path / f"old{len(recorded)}"
        checkpoint.mkdir()
        run = {**PretrainConfig(steps=7).to_dict(), "init": recorded}
        del run["start"]
        (checkpoint / "config.json").write_text(json.dumps({"run": run}))
        assert saved_settings(checkpoint) == PretrainConfig(start=start, steps=7)
        assert PretrainConfig.from_dict(run).start == start
    command = rebuild("pretrain", PretrainConfig.from_dict({"init": "runs/micro", "model": "vit-s/16"}).to_dict(),
                      PretrainConfig)
    assert "--from runs/micro" in command and "--model" not in command and "init" not in command


def test_console_script_answers_without_the_training_stack():
    """The installed `vitx` script (not an entry function): --version, and that neither it nor `vitx models`
    imports torch, timm, datasets or matplotlib (what made every command take 5 s to start)."""
    script = shutil.which("vitx") or str(ROOT / "no-vitx-script")
    version = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=300)
    assert version.returncode == 0 and version.stdout.startswith("vitx 0."), version.stderr
    probe = ("import sys; from vitx.cli import main\n"  # (no OpenMP runtime loaded yet: the script's spin setting,
             "omp = any('libgomp' in line for line in open('/proc/self/maps'))\n"  # read at its load, takes)
             "print('openmp before main:', omp, file=sys.stderr)\n"
             "try: main(sys.argv[1:])\n"
             "except SystemExit: pass\n"
             "heavy = [m for m in ('torch', 'timm', 'datasets', 'matplotlib', 'lightly') if m in sys.modules]\n"
             "print('heavy:', ','.join(heavy) or 'none', file=sys.stderr)")
    for args in (["--help"], ["pretrain", "--help"], ["transfer", "--help"], ["models"], ["tasks"]):
        proc = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=300,
                              cwd=ROOT)
        assert proc.stderr.strip().splitlines()[-1] == "heavy: none", (args, proc.stderr[-2000:])
        assert "openmp before main: False" in proc.stderr
    # the library too: `import vitx` and the registries' listings load the built-ins without torch
    library = ("import sys, vitx; print(len(vitx.BACKBONES.names()), len(vitx.TASKS.names()), "
               "'torch' in sys.modules, 'timm' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", library], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.stdout.split() == ["13", "21", "False", "False"], proc.stderr[-2000:]


def test_models_lists_every_paper_backbone_with_exact_sizes():
    table = vitx_cli("models")
    assert table.returncode == 0, table.stderr
    for name in ["vit-ti/16", "vit-s/16", "vit-s/32", "vit-b/16", "vit-b/32", "vit-b/8", "vit-l/16", "vit-l/32",
                 "vit-h/14", "r50+vit-b/16", "vit-micro/4", "vit-nano/4", "timm:"]:
        assert name in table.stdout, name
    assert "85.8M" in table.stdout and "630.8M" in table.stdout and "97.9M" in table.stdout


def test_objectives_listed():
    listing = vitx_cli("objectives")
    assert listing.returncode == 0
    assert "supervised" in listing.stdout and "mpp" in listing.stdout and "masked patch prediction" in listing.stdout
    assert "vitx's own plugins" not in listing.stdout  # (installed: nothing to say)


def test_objectives_before_the_plugins_are_installed_say_where_the_others_come_from(monkeypatch):
    """A new user's first `vitx objectives`, before `pip install -e plugins/vitx-*`: the listing says which of
    MAE, SimCLR and DINO are missing, and the one command that adds them."""
    from vitx.registry import OBJECTIVES

    real = OBJECTIVES.names
    monkeypatch.setattr(OBJECTIVES, "names", lambda pattern="*": [n for n in real(pattern) if n in ("mpp", "supervised")])
    listing = vitx_cli("objectives")
    assert listing.returncode == 0 and listing.stdout.splitlines()[-1] == (
        "mae, simclr and dino come with vitx's own plugins, not installed here: pip install -e plugins/vitx-mae -e "
        "plugins/vitx-simclr -e plugins/vitx-dino (from a vitx checkout)")
    assert vitx_cli("objectives", "dino").stdout.splitlines()[-1].startswith(
        "dino comes with vitx's own plugins, not installed here: pip install -e plugins/vitx-dino (")
    assert "vitx's own plugins" not in vitx_cli("objectives", "mpp").stdout


def test_a_librarys_error_that_announces_its_detail_keeps_it_in_the_one_line():
    """torch's load_state_dict says "Error(s) in loading state_dict for VisionTransformer:" and the mismatch on the
    next line: a one-line error without it said nothing."""
    from vitx.errors import first_line

    exc = RuntimeError("Error(s) in loading state_dict for VisionTransformer:\n\tsize mismatch for pos_embed: "
                       "copying a param with shape torch.Size([1, 5, 8]) from checkpoint, the shape in current model "
                       "is torch.Size([1, 5, 16]).\n\tsize mismatch for cls_token: ...")
    assert first_line(exc) == ("Error(s) in loading state_dict for VisionTransformer: size mismatch for pos_embed: "
                               "copying a param with shape torch.Size([1, 5, 8]) from checkpoint, the shape in "
                               "current model is torch.Size([1, 5, 16]).")
    assert first_line(ValueError("one\ntwo")) == "one" and first_line(KeyError()) == "KeyError"


def test_running_out_of_accelerator_memory_is_one_line_and_keeps_the_checkpoint(tmp_path, monkeypatch):
    """A batch too large for the GPU (torch's OutOfMemoryError, here raised by the loss at step 4 of 6): one line
    with what torch tried and what to change, exit 2, and step 3's checkpoint still there to resume from."""
    import torch
    import torch.nn.functional as F

    calls, real = [], F.cross_entropy

    def loss(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total "
                                         "capacity of 139.72 GiB of which 3.06 GiB is free. Including non-PyTorch "
                                         "memory, this process has 136.60 GiB memory in use. If reserved but "
                                         "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF")
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "cross_entropy", loss)
    out = tmp_path / "run"
    result = vitx_cli("pretrain", "--model", "vit-nano/4", "--data", "embedded:shapes", "--batch-size", "8",
                      "--steps", "6", "--save-every", "3", "--eval-samples", "0", "--workers", "0",
                      "--log-with", "none", "--no-curves", "--output-dir", str(out))
    _one_line_error(result, "the accelerator ran out of memory (CUDA out of memory. Tried to allocate 20.00 GiB. "
                            "GPU 0 has a total capacity of 139.72 GiB of which 3.06 GiB is free): lower --batch-size")
    assert "PYTORCH_CUDA_ALLOC_CONF" not in result.stderr
    assert (out / "checkpoints" / "step_00000003" / "model.safetensors").is_file()


def test_the_out_of_memory_line_fits_the_device_and_the_command():
    """The CPU allocator's refusal is out of memory too; a loader worker's traceback and torch's allocator advice
    are left out; the advice names only options the command has (eval has no --batch-size to lower)."""
    import torch

    from vitx.errors import is_out_of_memory, out_of_memory

    cpu = RuntimeError("[enforce fail at alloc_cpu.cpp:127] . DefaultCPUAllocator: can't allocate memory: you tried "
                       "to allocate 412316860416 bytes. Error code 12 (Cannot allocate memory)")
    assert is_out_of_memory(cpu) and not is_out_of_memory(RuntimeError("shape mismatch"))
    assert out_of_memory(cpu, "bench") == (
        "this machine ran out of memory (DefaultCPUAllocator: can't allocate memory: you tried to allocate "
        "412316860416 bytes. Error code 12 (Cannot allocate memory)): lower --batch-size (--grad-accum K keeps the "
        "batch each optimiser step sees)")
    worker = torch.cuda.OutOfMemoryError("Caught OutOfMemoryError in DataLoader worker process 0.\nOriginal Traceback "
                                    "(most recent call last):\n  File \"worker.py\", line 375, in _worker_loop\n"
                                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 "
                                    "has a total capacity of 79.10 GiB of which 1.00 GiB is free.")
    said = out_of_memory(worker, "eval")
    assert said == ("the accelerator ran out of memory (CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
                    "total capacity of 79.10 GiB of which 1.00 GiB is free): use a smaller --image-size or model, "
                    "or a device with more memory")
    mps = torch.cuda.OutOfMemoryError("MPS backend out of memory (MPS allocated: 1.2 GB). Tried to allocate 256 MB on "
                                 "private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit")
    assert "PYTORCH_" not in out_of_memory(mps, "predict") and out_of_memory(mps, "predict").endswith(
        "Tried to allocate 256 MB on private pool): lower --batch-size")

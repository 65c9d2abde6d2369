"""Recipes as files: every shipped recipe is valid data; --recipe and --set override in order, type-checked."""
import json
import re

import pytest

from .helpers import MPP_OVERRIDES, ROOT, metrics, saved_model_accuracy, vitx_cli
from vitx.errors import VitxError
from vitx.recipe import load_recipe, parse_sets, resolve, tomllib
from vitx.runner.config import PretrainConfig
from vitx.transfer.config import TransferConfig

CONFIGS = {"pretrain": PretrainConfig, "transfer": TransferConfig}
RECIPES = sorted((ROOT / "recipes").rglob("*.toml"))


def test_the_paper_and_cpu_recipes_are_all_there():
    names = {str(p.relative_to(ROOT / "recipes")) for p in RECIPES}
    assert {"paper/pretrain-supervised-b16.toml", "paper/pretrain-mpp-b16.toml", "paper/finetune-384.toml",
            "paper/vtab-1k.toml", "cpu/pretrain-supervised.toml", "cpu/pretrain-mpp.toml",
            "cpu/finetune-hires.toml", "cpu/vtab-1k.toml"} <= names


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: str(p.relative_to(ROOT / "recipes")))
def test_recipe_is_valid_and_documents_its_command_and_the_paper(path):
    tables = [k for k, v in tomllib.loads(path.read_text()).items() if isinstance(v, dict)]
    assert tables and set(tables) <= set(CONFIGS), tables
    for command in tables:
        values = load_recipe(path, command, CONFIGS[command])
        CONFIGS[command](**values).validate()
    header = path.read_text().split("\n[")[0]
    assert "# Paper:" in header
    run = re.search(r"# Run:(.*?)(?:\n# [A-Z]|\n\n)", header, re.S).group(1)
    assert f"--recipe recipes/{path.relative_to(ROOT / 'recipes')}" in run  # the command names this very file
    if path.parent.name == "paper":
        assert re.search(r"\d\d\.\d\d?%?", header), "the paper's reported numbers belong in the header"


def test_the_cpu_dino_recipe_computes_on_both_cores_and_keeps_the_references_rule():
    """recipes/cpu/pretrain-dino.toml: `threads = 2` (a system setting, not DINO's: its header gives the step's
    163-185 against 138-144 img/s on 2 cores), and main_dino.py's lr rule, blr 5e-4 × batch / 256."""
    values = load_recipe(ROOT / "recipes/cpu/pretrain-dino.toml", "pretrain", PretrainConfig)
    cfg = PretrainConfig(**values).validate()
    assert (cfg.threads, cfg.blr, cfg.batch_size) == (2, 5e-4, 64)


def test_precedence_recipe_then_set_then_options(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('[pretrain]\nlr = 0.5\nsteps = 10\nmodel = "vit-micro/4"\n')
    chosen = resolve(PretrainConfig, "pretrain", str(recipe), ["steps=20", "image-size=32"], {"model": "vit-nano/4"})
    assert chosen == {"lr": 0.5, "steps": 20, "image_size": 32, "model": "vit-nano/4"}
    with pytest.raises(VitxError, match="given twice"):
        resolve(PretrainConfig, "pretrain", str(recipe), ["model=vit-ti/4"], {"model": "vit-nano/4"})


def test_set_values_are_parsed_by_the_field_type():
    assert parse_sets(["lrs=0.001,0.01", "sweep_steps=[5, 6]", "image_size=none", "sweep=no", "lr=1",
                       "adapters=lora(rank=4, alpha=8)", "model=vit-b/16", "precision=bf16"], TransferConfig) == {
        "lrs": [0.001, 0.01], "sweep_steps": [5, 6], "image_size": None, "sweep": False, "lr": 1.0,
        "adapters": ["lora(rank=4, alpha=8)"], "model": "vit-b/16", "precision": "bf16"}
    assert parse_sets(["lr=.001", "weight_decay=1."], PretrainConfig) == {"lr": 0.001, "weight_decay": 1.0}
    with pytest.raises(VitxError, match=re.escape("--set steps is given twice (3 and 4)")):
        parse_sets(["steps=3", "steps=4"], PretrainConfig)
    with pytest.raises(VitxError, match=re.escape("start is given twice: --from 'a' and --set start='b'")):
        resolve(TransferConfig, "transfer", None, ["start=b"], {"start": "a"})
    assert parse_sets(["objective=mpp(corrupt_rate=0.4)", "skip_corrupt=true", "data=1e3", 'model="vit-b/16"'],
                      PretrainConfig) == {"objective": "mpp(corrupt_rate=0.4)", "skip_corrupt": True,
                                          "data": "1e3", "model": "vit-b/16"}  # text stays text
    for bad, message in [("steps=1.5", "steps must be an integer, got '1.5'"),
                         ("lr=fast", "lr must be a number, got 'fast'"),
                         ("grad_checkpointing=maybe", "must be true or false"),
                         ("batch_size=none", "batch_size must be an integer"),
                         ("stepz=3", "unknown key 'stepz' (did you mean steps"),
                         ("steps", "--set takes key=value")]:
        with pytest.raises(VitxError, match=re.escape(message)):
            parse_sets([bad], PretrainConfig)


def test_recipe_file_errors_are_one_line(tmp_path):
    cases = {"wrong.toml": ("[transfer]\nlr = 0.1\n", "has no [pretrain] table (it has [transfer])"),
             "typo.toml": ("[pretrain]\nlearning_rate = 0.1\n", "[pretrain]: unknown key 'learning_rate'"),
             "type.toml": ('[pretrain]\nsteps = "many"\n', "steps must be an integer, got 'many'"),
             "broken.toml": ("[pretrain\nlr = 0.1\n", "is not a valid TOML recipe")}
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text)
        proc = vitx_cli("pretrain", "--recipe", str(tmp_path / name), "--output-dir", str(tmp_path / "run"))
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", ["pretrain", "transfer"])
def test_unknown_set_key_exits_non_zero_with_one_line(command, tmp_path):
    proc = vitx_cli(command, "--set", "lrr=0.1", "--output-dir", str(tmp_path / "run"))
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert line.startswith("error: --set: unknown key 'lrr' (did you mean lr") and "\n" not in line, line
    assert not (tmp_path / "run").exists()


def test_cpu_supervised_recipe_runs_with_its_settings(tmp_path):
    run = tmp_path / "run"
    proc = vitx_cli("pretrain", "--recipe", "recipes/cpu/pretrain-supervised.toml", "--set", "steps=3", "--set",
                    "batch_size=16", "--set", "warmup_steps=1", "--set", "eval_samples=16", "--workers", "0",
                    "--log-with", "none", "--output-dir", str(run))
    assert proc.returncode == 0, proc.stderr[-2000:]
    saved = json.loads((run / "config.json").read_text())["run"]
    recipe = tomllib.loads((ROOT / "recipes/cpu/pretrain-supervised.toml").read_text())["pretrain"]
    expected = {**recipe, "steps": 3, "batch_size": 16, "warmup_steps": 1, "eval_samples": 16,
                "output_dir": str(run)}
    assert {k: saved[k] for k in expected} == expected
    log = metrics(run)
    assert [m["step"] for m in log] == [3] and "val_top1" in log[-1]  # the last step is logged and evaluated


def test_cpu_mpp_recipe_runs_with_its_settings(mpp_run):
    """The session's `mpp_run` is the CPU MPP recipe with --set overrides: every other setting is the recipe's."""
    saved = json.loads((mpp_run / "config.json").read_text())["run"]
    recipe = tomllib.loads((ROOT / "recipes/cpu/pretrain-mpp.toml").read_text())["pretrain"]
    expected = {**recipe, **MPP_OVERRIDES, "output_dir": str(mpp_run)}
    assert {k: saved[k] for k in expected} == expected


@pytest.mark.parametrize("name", ["finetune-hires", "vtab-1k"])
def test_cpu_transfer_recipes_run(name, tmp_path, pretrained_run):
    out = tmp_path / "out"
    small = ["--set", "shots=20", "--set", "batch_size=8", "--set", "test_samples=32", "--set", "steps=2",
             "--set", "sweep_steps=[2]", "--set", "lrs=[0.03]", "--workers", "0"]
    proc = vitx_cli("transfer", "--recipe", f"recipes/cpu/{name}.toml", "--from", str(pretrained_run), *small,
                    "--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    recipe = tomllib.loads((ROOT / f"recipes/cpu/{name}.toml").read_text())["transfer"]
    result = json.loads((out / recipe["task"].replace("/", "-") / "result.json").read_text())
    assert result["image_size"] == recipe["image_size"] == 32  # from the recipe: 16px checkpoint, 8×8 grid
    assert len(result["sweep"]) == (1 if recipe.get("sweep", True) else 0)  # --set lrs=[0.03] sweep_steps=[2]
    assert result["chosen"] == {"lr": 0.03, "steps": 2} and result["shots"] == 20
    assert result["test_samples"] == 32
    final = out / recipe["task"].replace("/", "-") / "final"  # the reported number is the saved model's
    assert result["test_top1"] == pytest.approx(saved_model_accuracy(final, recipe["task"], 32), abs=1e-6)


def test_a_recipe_value_that_is_not_finite_is_one_line(tmp_path):
    """TOML reads `nan` and `inf` as floats, and nan passes every `<= 0` check: refused before anything runs."""
    recipe = tmp_path / "r.toml"
    recipe.write_text("[pretrain]\nlr = nan\n")
    result = vitx_cli("pretrain", "--recipe", str(recipe), "--output-dir", str(tmp_path / "run"))
    assert result.returncode == 2 and result.stderr.strip() == "error: --lr must be a finite number, got nan"
    assert not (tmp_path / "run").exists()
    with pytest.raises(VitxError, match=r"--lrs must be finite numbers, got \[0\.1, inf\]"):
        TransferConfig(lrs=[0.1, float("inf")]).validate()


def test_values_nested_too_deeply_and_bounds_far_above_any_run_are_one_line(tmp_path):
    """A recipe 200,000 lists or 20,000 inline tables deep, and a --set list 50,000 deep, are more than tomllib's
    recursion can read: one line each, exit 2, nothing written. A weight decay of 1e30 (or its end value) is a
    typo, refused as --weight-decay is."""
    deep = {"lists.toml": "[pretrain]\nsteps = " + "[" * 200_000 + "]" * 200_000 + "\n",
            "tables.toml": "[pretrain]\nsteps = " + "{a = " * 20_000 + "1" + "}" * 20_000 + "\n"}
    for name, text in deep.items():
        (tmp_path / name).write_text(text)
        proc = vitx_cli("pretrain", "--recipe", str(tmp_path / name), "--output-dir", str(tmp_path / "run"))
        assert proc.returncode == 2 and proc.stderr == \
            f"error: {tmp_path / name} is not a valid TOML recipe (nested too deeply to read: not a recipe)\n"
    for command, key in [("transfer", "lrs"), ("pretrain", "steps")]:
        proc = vitx_cli(command, "--set", f"{key}=" + "[" * 50_000 + "]" * 50_000, "--output-dir", str(tmp_path / "run"))
        assert proc.returncode == 2 and proc.stderr == \
            f"error: --set: {key} is nested too deeply to read, got '{'[' * 77}...'\n", proc.stderr[-300:]
    for flag in ("--weight-decay", "--weight-decay-end"):
        proc = vitx_cli("pretrain", flag, "1e30", "--output-dir", str(tmp_path / "run"))
        assert proc.returncode == 2 and proc.stderr == \
            f"error: {flag} 1e+30 is too large: at most 10, far above any real run (a typo?)\n"
    assert not (tmp_path / "run").exists()


def test_a_config_built_in_python_with_text_for_a_list_is_one_line():
    """TransferConfig(adapters='lora') from Python: one line, not 'unknown adapter l' from the text's characters."""
    with pytest.raises(VitxError, match=r"^--adapter takes a list, e.g. \['lora'\]; got the text 'lora'$"):
        TransferConfig(start="scratch", adapters="lora").validate()
    with pytest.raises(VitxError, match=r"^--monitor-probes takes a list"):
        PretrainConfig(monitor_probes="knn").validate()
    assert TransferConfig(start="scratch", adapters=["lora"]).validate().adapters == ["lora"]

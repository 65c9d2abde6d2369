"""Entry-point discovery: a broken plugin is one warning line, the others still load."""
import vitx.discovery as plugins
from vitx.registry import OBJECTIVES
from vitx.registry import temporary as vitx_temporary


class FakeEntryPoint:
    def __init__(self, name, load):
        self.name, self.value, self.dist, self._load = name, f"{name}_module", None, load

    def load(self):
        return self._load()


def test_broken_plugin_is_reported_and_others_load(monkeypatch, capsys):
    def good():
        OBJECTIVES.register("fake-good", object, description="registered by a fake plugin", overwrite=True)

    def bad():
        raise ImportError("No module named 'missing_dependency'")

    asked = []

    def entry_points(group):
        asked.append(group)
        return [FakeEntryPoint("broken", bad), FakeEntryPoint("good", good)] if group == "vitx.objectives" else []

    monkeypatch.setattr(plugins, "entry_points", entry_points)
    monkeypatch.setattr(plugins, "_done", set())
    monkeypatch.setattr(plugins, "loaded", {})
    monkeypatch.setattr(plugins, "failed", {})
    try:
        plugins.load_plugins("backbone")  # metadata only: no objective plugin is imported for a backbone
        assert asked == ["vitx.plugins", "vitx.backbones"] and not plugins.loaded and not plugins.failed
        plugins.load_plugins("objective")
        plugins.load_plugins()  # every group; each is read once
        assert sorted(asked) == sorted(["vitx.plugins", *plugins.KIND_GROUPS.values()])
        err = capsys.readouterr().err.strip().splitlines()
        assert err == ["warning: vitx plugin 'broken' failed to load: ImportError: No module named 'missing_dependency'"]
        assert OBJECTIVES.get("fake-good").source == "entry point good (good_module)"
        assert list(plugins.loaded) == ["good"] and list(plugins.failed) == ["broken"]
    finally:  # an entry point's registration outlives temporary() by design (the environment has it): undone here
        OBJECTIVES._entries.pop("fake-good", None)


PLUGIN = '''
"""A user's objective in one file: supervised learning with a label-smoothed loss, under a new name."""
import vitx
from vitx.objectives.supervised import Supervised


@vitx.register_objective("smooth-sup", description="supervised with label smoothing 0.2 (a file plugin)")
class SmoothSup(Supervised):
    def __init__(self, backbone, num_classes, **options):
        super().__init__(backbone, num_classes, label_smoothing=0.2, **options)
'''


def test_file_plugin_objective_pretrains_then_transfers(tmp_path):
    from .helpers import as_flags, vitx_cli, tiny

    plugin = tmp_path / "my_objective.py"
    plugin.write_text(PLUGIN)
    run = tmp_path / "run"
    proc = vitx_cli("pretrain", "--plugin", str(plugin), "--objective", "smooth-sup",
                    *as_flags(tiny(tmp_path, output_dir=str(run), steps=3, save_every=3)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (run / "model.safetensors").exists()
    proc = vitx_cli("transfer", "--task", "vtab/dsprites_loc", "--from", str(run), "--shots", "20",
                    "--batch-size", "8", "--no-sweep", "--steps", "2", "--test-samples", "32", "--workers", "0",
                    "--output-dir", str(tmp_path / "t"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "t" / "vtab-dsprites_loc" / "result.json").exists()
    listed = vitx_cli("--plugin", str(plugin), "objectives")
    assert "smooth-sup" in listed.stdout and "file" in listed.stdout


def test_a_plugin_file_that_raises_is_one_line(tmp_path):
    from .helpers import vitx_cli

    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('this plugin is broken')\n")
    proc = vitx_cli("objectives", "--plugin", str(bad))
    assert proc.returncode == 0 and "supervised" in proc.stdout
    lines = [line for line in proc.stderr.splitlines() if "bad.py" in line]
    assert lines == [f"warning: vitx plugin '{bad}' failed to load: RuntimeError: this plugin is broken"]
    exits = tmp_path / "exits.py"  # a script's habit, not a plugin's: it must not end vitx without a word
    exits.write_text("import sys\nsys.exit(0)\n")
    proc = vitx_cli("objectives", "--plugin", str(exits))
    assert proc.returncode == 0 and "supervised" in proc.stdout
    assert f"warning: vitx plugin '{exits}' failed to load: it called sys.exit(0)" in proc.stderr
    # a command that does work does not do it without the plugin the user named: one error line, nothing run
    proc = vitx_cli("pretrain", "--plugin", str(bad), "--steps", "1", "--output-dir", str(tmp_path / "run"))
    assert proc.returncode == 2 and proc.stderr == f"error: plugin {bad} (--plugin) failed to load: RuntimeError: this " \
                                                   "plugin is broken; the command would run without it (`vitx " \
                                                   "plugins` lists what loaded)\n", proc.stderr
    assert not (tmp_path / "run").exists()


def test_a_plugin_backbone_that_fails_to_build_is_one_line(tmp_path):
    """A backbone factory that raises, or returns no module: `vitx models` lists it with "?" and one warning,
    and a command that builds it ends in one line naming the plugin."""
    from .helpers import vitx_cli

    plugin = tmp_path / "bb.py"
    plugin.write_text("from vitx.registry import register_backbone\n"
                      "@register_backbone('broken-bb')\ndef broken(**kw):\n    raise ValueError('factory exploded')\n"
                      "@register_backbone('number-bb')\ndef number(**kw):\n    return 42\n")
    proc = vitx_cli("models", "--plugin", str(plugin))
    assert proc.returncode == 0 and "vit-b/16" in proc.stdout and "Traceback" not in proc.stderr, proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith("warning")] == [
        f"warning: backbone 'broken-bb' (file {plugin}) failed to build: ValueError: factory exploded",
        f"warning: backbone 'number-bb' (file {plugin}): its factory returned int, not a torch module"]
    proc = vitx_cli("bench", "--plugin", str(plugin), "--model", "broken-bb", "--device", "cpu")
    assert proc.returncode == 2 and proc.stderr == \
        f"error: backbone 'broken-bb' (file {plugin}) failed to build: ValueError: factory exploded\n", proc.stderr


def test_vitx_plugins_lists_origins_and_components(tmp_path):
    from .helpers import vitx_cli

    plugin = tmp_path / "my_objective.py"
    plugin.write_text(PLUGIN)
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('broken on purpose')\n")
    proc = vitx_cli("plugins", "--plugin", str(plugin), "--plugin", str(bad))
    assert proc.returncode == 0, proc.stderr
    assert "objective smooth-sup" in proc.stdout and "built-in" in proc.stdout and "21 tasks" in proc.stdout
    assert "entry point mae" in proc.stdout and "failed" in proc.stdout
    assert "objective simclr" in proc.stdout and "adapter lora" in proc.stdout  # the first-party packages
    assert sum("bad.py" in line for line in proc.stderr.splitlines()) == 1


def test_plugin_first_imported_inside_temporary_stays_registered(monkeypatch):
    """An installed plugin that a `temporary()` block happens to import first is part of the environment: it
    must still be there after the block (Python will not import it a second time)."""
    def register():
        OBJECTIVES.register("fake-installed", object, description="an installed plugin", overwrite=True)

    monkeypatch.setattr(plugins, "entry_points",
                        lambda group: [FakeEntryPoint("installed", register)] if group == "vitx.objectives" else [])
    monkeypatch.setattr(plugins, "_done", set())
    monkeypatch.setattr(plugins, "loaded", {})
    try:
        with vitx_temporary():
            assert OBJECTIVES.get("fake-installed").source == "entry point installed (installed_module)"
            OBJECTIVES.register("made-inside", object)
        assert "fake-installed" in OBJECTIVES and "made-inside" not in OBJECTIVES
    finally:
        OBJECTIVES._entries.pop("fake-installed", None)


def test_temporary_undoes_registrations():
    import vitx

    with vitx.temporary():
        vitx.register_objective("temp-objective")(object)
        vitx.register_task("temp/task", lambda: None)  # (a function returning a Task, checked when it is asked)
        assert "temp-objective" in vitx.OBJECTIVES and "temp/task" in vitx.TASKS
    assert "temp-objective" not in vitx.OBJECTIVES and "temp/task" not in vitx.TASKS


def test_a_plugins_malformed_components_are_one_line(tmp_path):
    """A task that is not a Task is listed with "?" and one warning, an adapter that is not an Adapter, or an
    option an adapter does not have, is one line where it is used; a task function that raises is listed with
    "?"; an objective whose forward returns no tensor loss ends the run in one line naming it."""
    from .helpers import vitx_cli

    plugin = tmp_path / "bad_parts.py"
    plugin.write_text("import vitx\nvitx.register_task('evil/task', 'not a Task')\n")
    proc = vitx_cli("tasks", "evil/*", "--plugin", str(plugin))
    assert proc.returncode == 0 and "evil/task" in proc.stdout and proc.stderr == f"warning: task 'evil/task' (file " \
        f"{plugin}) is registered as str, not a vitx.tasks.Task (or a function returning one)\n", proc.stderr
    plugin.write_text("import vitx\n@vitx.register_adapter('zzz')\ndef zzz(**kw):\n    return None\n")
    proc = vitx_cli("transfer", "--plugin", str(plugin), "--adapter", "zzz")
    assert proc.returncode == 2 and proc.stderr == f"error: adapter 'zzz' (file {plugin}) is registered as function " \
        "zzz, not a subclass of vitx.adapters.Adapter\n", proc.stderr
    for given, hint in (("l2", ""), ("regs", "; did you mean reg?")):  # an option it does not have: its own named
        proc = vitx_cli("transfer", "--adapter", f"fewshot({given}=1)")
        assert proc.returncode == 2 and proc.stderr == f"error: adapter 'fewshot' has no option '{given}'{hint} (its " \
                                                       "options: reg)\n", proc.stderr
    task_fn = tmp_path / "task_fn.py"
    task_fn.write_text("import vitx\n@vitx.register_task('evil/fn')\ndef f():\n    raise RuntimeError('boom')\n")
    proc = vitx_cli("tasks", "evil/*", "--plugin", str(task_fn))
    assert proc.returncode == 0 and "evil/fn" in proc.stdout and \
        f"warning: task 'evil/fn' (file {task_fn}) failed to build: RuntimeError: boom\n" == proc.stderr, proc.stderr
    objective = tmp_path / "int_loss.py"
    objective.write_text("import vitx\nfrom vitx.objectives.base import Objective\n"
                         "@vitx.register_objective('int-loss')\nclass IntLoss(Objective):\n"
                         "    def forward(self, batch):\n        return {'loss': 0}\n")
    proc = vitx_cli("pretrain", "--plugin", str(objective), "--objective", "int-loss", "--steps", "2", "--workers",
                    "0", "--output-dir", str(tmp_path / "run"))
    assert proc.returncode == 2 and proc.stderr.endswith(
        "error: objective 'int-loss': its forward must return a dict with a scalar float tensor 'loss', got loss 0\n"), \
        proc.stderr

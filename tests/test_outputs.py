"""Every file a command writes over (settings/paths.py's rule): one of its own kind (a vitx page, a figure vitx
drew, bench's figures, inspect's numbers) is replaced, a user's file only with --force, a run's own files never;
and paths no filesystem takes (not UTF-8, a name over 255 bytes) are one line before any work."""
import json
import re
import shutil

import pytest

from .helpers import vitx_cli


@pytest.fixture()
def run(pretrained_run, tmp_path):
    """A copy of the session's run (its checkpoints too: they are among the run's own files)."""
    return shutil.copytree(pretrained_run, tmp_path / "run")


def test_plot_replaces_its_own_figure_a_users_file_with_force_and_a_runs_file_never(run, tmp_path):
    mine, figure = tmp_path / "photo.png", tmp_path / "plot.png"
    mine.write_bytes(b"\x89PNG my holiday")
    proc = vitx_cli("plot", str(run), "-o", str(mine))
    assert proc.returncode == 2 and proc.stderr == f"error: --output {mine} exists and is not a figure vitx drew; " \
                                                   "give a new file, or --force to replace it\n"
    assert mine.read_bytes() == b"\x89PNG my holiday"
    for _ in range(2):  # drawn, then drawn again over itself: no --force needed
        assert vitx_cli("plot", str(run), "-o", str(figure)).returncode == 0
    assert vitx_cli("plot", str(run), "-o", str(mine), "--force").returncode == 0
    assert mine.read_bytes().startswith(b"\x89PNG") and b"Software\x00vitx" in mine.read_bytes()[:8192]
    before = (run / ".vitx-run").read_bytes()
    proc = vitx_cli("plot", str(run), "-o", str(run / ".vitx-run"), "--force")
    assert proc.returncode == 2 and proc.stderr == f"error: --output {run / '.vitx-run'} is one of the vitx run's own " \
        f"files in {run}; write elsewhere (--force never replaces a run's own files)\n", proc.stderr
    assert (run / ".vitx-run").read_bytes() == before


def test_report_force_never_replaces_a_runs_weights_or_records(run):
    step = sorted((run / "checkpoints").iterdir())[-1]
    for own in (run / "model.safetensors", run / "metrics.jsonl", run / "config.json", step / "model.safetensors"):
        before = own.read_bytes()
        proc = vitx_cli("report", str(run), "-o", str(own), "--force")
        holder = run if own.parent == run else step.parent.parent
        assert proc.returncode == 2 and proc.stderr == f"error: --output {own} is one of the vitx run's own " \
            f"files in {holder}; write elsewhere (--force never replaces a run's own files)\n", proc.stderr
        assert own.read_bytes() == before


def test_a_runs_own_page_leaves_a_users_report_html_alone(run):
    from vitx.pages import write_own_page

    (run / "report.html").write_text("my notes")
    said = []
    assert write_own_page(run, "run", False, said.append) is None
    assert (run / "report.html").read_text() == "my notes"
    assert said == [f"warning: {run / 'report.html'} not written: a file of that name is there and is not a vitx page"]


def test_bench_outputs_replace_bench_files_only(tmp_path):
    from vitx.errors import VitxError
    from vitx.speed.config import BenchConfig

    mine, ours, profile = tmp_path / "mine.json", tmp_path / "bench.json", tmp_path / "profile.txt"
    mine.write_text('{"mine": 1}')
    ours.write_text(json.dumps({"images_per_s": 10.0, "gflop_per_image": 1.0}))
    profile.write_text("vitx bench --profile: 3 steps of vit-nano/4, supervised, batch 8\n...")
    BenchConfig(output=str(ours), profile=str(profile)).validate()  # its own: replaced unasked
    with pytest.raises(VitxError, match=r"--output .*mine.json exists and is not a file vitx bench wrote; give a new "
                                        r"file, or --force to replace it"):
        BenchConfig(output=str(mine)).validate()
    BenchConfig(output=str(mine), force=True).validate()
    with pytest.raises(VitxError, match="--output and --profile name the same file"):
        BenchConfig(output=str(ours), profile=str(tmp_path / "." / "bench.json")).validate()


def test_inspect_refuses_a_users_file_of_its_names_before_any_work(run, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "analysis.json").write_text('{"x": 42}')
    proc = vitx_cli("inspect", str(run), "--output-dir", str(out))
    assert proc.returncode == 2 and proc.stderr == f"error: --output-dir {out / 'analysis.json'} exists and is not " \
                                                   "what vitx inspect wrote; give a new file, or --force to replace it\n"
    assert (out / "analysis.json").read_text() == '{"x": 42}' and sorted(p.name for p in out.iterdir()) == \
        ["analysis.json"]


def test_paths_no_filesystem_takes_are_one_line(pretrained_run, tmp_path):
    """A name over 255 bytes (ENAMETOOLONG wherever it is first used) and an argument that is not UTF-8 (a
    folder named in Latin-1: it reaches Python as surrogates, and safetensors and JSON would fail after the
    training): one line, nothing written."""
    long = str(tmp_path / ("a" * 300))
    for args in (["report", long], ["export", str(pretrained_run), "--to", long],
                 ["plot", str(pretrained_run), "-o", long + ".png"]):
        proc = vitx_cli(*args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and \
            "a name in this path is longer than the filesystem allows" in proc.stderr, proc.stderr
    # 250 bytes: the filesystem takes the name, not the temporary name written first (refused before drawing)
    proc = vitx_cli("plot", str(pretrained_run), "-o", str(tmp_path / f"{'a' * 246}.png"))
    assert proc.returncode == 2 and re.search(r"the file name is longer than the \d+ bytes vitx can write here \(it "
                                              r"writes under a temporary name of \d+ more bytes first, then renames\)\n$",
                                              proc.stderr), proc.stderr
    assert vitx_cli("plot", str(pretrained_run), "-o", str(tmp_path / f"{'a' * 150}.png")).returncode == 0
    latin = tmp_path / "caf\udce9"  # café in Latin-1, as Python reads it from a UTF-8 locale
    proc = vitx_cli("pretrain", "--steps", "2", "--output-dir", str(latin))
    assert proc.returncode == 2 and proc.stderr == f"error: the argument {str(latin)[:-1]}\\udce9 is not valid UTF-8; " \
                                                   "vitx's files record paths and names as UTF-8: rename it\n"
    assert [p.name for p in tmp_path.iterdir()] == [f"{'a' * 150}.png"]  # (the one name that fits)


def test_force_replaces_a_users_file_in_a_run_folder_but_never_the_runs_own(run, tmp_path):
    """Inside a run's folder only the run's own files are protected: an eval result a user keeps there is
    replaced with --force, a checkpoint's inspect/ output too; the run's curves (a vitx figure) are not."""
    from vitx.errors import VitxError
    from vitx.plots.canvas import is_vitx_figure
    from vitx.settings.paths import writable_file

    (run / "knn.json").write_text("{}")
    writable_file(run / "knn.json", "--output", force=True)
    step = sorted((run / "checkpoints").iterdir())[-1]
    (step / "inspect").mkdir()
    (step / "inspect" / "attention_distance.png").write_bytes(b"old")
    writable_file(step / "inspect" / "attention_distance.png", "--output-dir", force=True)
    for own in (run / "curves.png", step / "curves.png", step / "accelerate" / "model.safetensors"):
        if own.exists():
            with pytest.raises(VitxError, match="is one of the vitx run's own files in"):
                writable_file(own, "--output", force=True, ours=is_vitx_figure)


def test_a_reproductions_records_and_a_run_file_named_from_inside_the_run_are_its_own(run, tmp_path, monkeypatch):
    from vitx.errors import VitxError
    from vitx.settings.paths import writable_file

    repro = tmp_path / "repro"
    repro.mkdir()
    (repro / ".vitx-run").write_text("")
    for name in ("plan.json", "results.json", "REPORT.md"):
        (repro / name).write_text("{}")
        with pytest.raises(VitxError, match="is one of the vitx run's own files"):
            writable_file(repro / name, "--output", force=True)
    monkeypatch.chdir(run)  # `-o curves.png` typed inside the run's folder
    with pytest.raises(VitxError, match="is one of the vitx run's own files"):
        writable_file("curves.png", "--output", force=True)

"""The HTML pages (vitx/pages/) in a real browser: headless Chromium, driven over its DevTools pipe with the
network off, loads the page of a pre-training run, of a transfer suite of two embedded tasks and of a comparison
of two runs. Each figure's numbers (its data-values) must equal the run's own files, no request may leave the
page, scripts are off (the page needs none), and the screenshot must show something. Then what needs no
browser: the reproduction's page against its REPORT.md, a VTAB-1k-sized suite's page size, the pages a run
writes at its end and at a stop, and the command's one-line errors.

Chromium is Debian's `chromium` package (`.ci/run` installs it); without it the browser tests are skipped."""
from __future__ import annotations

import base64
import io
import json
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from .helpers import ROOT, TINY, TRANSFER, metrics, tiny, vitx_cli

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
REQUIRED = bool(os.environ.get("VITX_REQUIRE_BROWSER"))  # set by .ci/run, which installs Chromium: never skip there
needs_browser = pytest.mark.skipif(CHROMIUM is None and not REQUIRED,
                                   reason="no Chromium here (Debian: apt-get install chromium; .ci/run installs it)")


class Browser:
    """Headless Chromium over the DevTools protocol on a pipe (fd 3 in, fd 4 out; no port, no extra package).
    Networking is off three ways: a proxy on a closed port, every host name unresolvable, and the page's
    network emulated offline; every request the page makes is recorded anyway."""

    def __init__(self) -> None:
        self.profile = tempfile.mkdtemp(prefix="vitx-chromium-")
        commands, self._to_browser = os.pipe()
        self._from_browser, replies = os.pipe()

        def pipes() -> None:  # in the child: its fds 3 and 4 are the pipe's ends
            os.dup2(commands, 3)
            os.dup2(replies, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={self.profile}",
             "about:blank"],
            preexec_fn=pipes, pass_fds=(3, 4), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(commands)
        os.close(replies)
        self._buffer, self._id, self.events = b"", 0, []

    def _wait(self, done, timeout: float = 60.0) -> dict:
        end = time.monotonic() + timeout
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "method" in message:
                    self.events.append(message)
                if done(message):
                    return message
            ready, _, _ = select.select([self._from_browser], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its pipe")
            self._buffer += chunk

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._id += 1
        sent = self._id
        os.write(self._to_browser, json.dumps({"id": sent, "method": method, "params": params or {},
                                               **({"sessionId": session} if session else {})}).encode() + b"\0")
        reply = self._wait(lambda m: m.get("id") == sent)
        assert "error" not in reply, reply
        return reply.get("result", {})

    def load(self, page: Path, width: int = 1200, height: int = 900) -> dict:
        """Open `page` with scripts and network off: its DOM as rendered, the URLs it requested, a screenshot."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.events = []
        self.send("Network.enable", session=s)
        self.send("Network.emulateNetworkConditions", {"offline": True, "latency": 0, "downloadThroughput": -1,
                                                       "uploadThroughput": -1}, session=s)
        self.send("Page.enable", session=s)
        self.send("Emulation.setScriptExecutionDisabled", {"value": True}, session=s)
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False}, session=s)
        self.send("Page.navigate", {"url": page.resolve().as_uri()}, session=s)
        self._wait(lambda m: m.get("method") == "Page.loadEventFired" and m.get("sessionId") == s)
        root = self.send("DOM.getDocument", {"depth": -1}, session=s)["root"]["nodeId"]
        dom = self.send("DOM.getOuterHTML", {"nodeId": root}, session=s)["outerHTML"]
        shot = base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"}, session=s)["data"])
        requested = [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]
        self.send("Target.closeTarget", {"targetId": target})
        return {"dom": dom, "requested": requested, "screenshot": shot}

    def close(self) -> None:
        try:
            self.send("Browser.close")
            self.proc.wait(timeout=20)
        except Exception:  # noqa: BLE001 - a browser that will not close is ended
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_browser, self._from_browser):
            os.close(fd)
        shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.fail("VITX_REQUIRE_BROWSER is set but there is no chromium on PATH (apt-get install chromium)")
    b = Browser()
    yield b
    b.close()


class Parsed(HTMLParser):
    """What the tests read from a rendered DOM: each figure's and each data table's numbers (data-values), the
    page's state, every attribute that could fetch something, and its text."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.figures, self.tables, self.fetching, self.text, self.state, self.scripts = {}, {}, [], [], None, 0
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figure" and "data-figure" in a:
            self.figures[a["data-figure"]] = json.loads(a["data-values"])
        if tag == "table" and "data-table" in a:
            self.tables[a["data-table"]] = json.loads(a["data-values"])
        if "data-state" in a:
            self.state = a["data-state"]
        self.scripts += tag in ("script", "link", "iframe", "object", "embed")
        for name in ("src", "href", "srcset", "poster", "action"):
            if a.get(name) and not a[name].startswith(("#", "data:")):
                self.fetching.append(f"<{tag} {name}={a[name][:60]}>")

    def handle_data(self, data):
        self.text.append(data)


def check_loaded(page: dict, path: Path) -> Parsed:
    """What every page must be: nothing requested but itself (and its own data: images), nothing that could
    fetch, no script, a status line, and a screenshot that is not blank."""
    from PIL import Image

    assert page["requested"][0] == path.resolve().as_uri()
    assert [u for u in page["requested"][1:] if not u.startswith("data:")] == [], page["requested"]
    parsed = Parsed(page["dom"])
    assert parsed.fetching == [] and parsed.scripts == 0 and "url(http" not in page["dom"]
    assert parsed.state in ("finished", "running", "stopped", "failed", "incomplete")
    image = Image.open(io.BytesIO(page["screenshot"])).convert("L")
    inked = sum(image.histogram()[:200]) / (image.width * image.height)
    assert image.size == (1200, 900) and 0.01 < inked < 0.9, inked  # text and tables drawn, not a blank screen
    return parsed


def drawn(series: list) -> list[list[float]]:
    return [[float(s), float(v)] for s, v in series]


def logged(rows: list[dict], key: str) -> list[list[float]]:
    """(step, value) of `key` in metrics.jsonl, as the curves draw them (finite numbers only)."""
    return [[float(r["step"]), float(r[key])] for r in rows
            if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool) and r[key] == r[key]]


@needs_browser
def test_a_pretraining_runs_own_page_in_a_browser(browser, pretrained_run, tmp_path):
    """The page the run wrote itself at its end (beside curves.png): its curves are metrics.jsonl's numbers."""
    path = pretrained_run / "report.html"
    parsed = check_loaded(browser.load(path), path)
    rows = metrics(pretrained_run)
    assert parsed.state == "finished"
    panels = parsed.figures["curves"]
    assert [p["title"] for p in panels] == ["loss", "accuracy", "collapse watch (label-free)", "learning rate"]
    for panel in panels:
        (series,) = panel["series"].values()  # one run
        for key, points in series.items():
            assert drawn(points) == logged(rows, key), key
    keys = {k for p in panels for k in next(iter(p["series"].values()))}
    assert {"loss", "val_loss", "top1", "val_top1", "lr", "rankme_fraction", "feature_std"} <= keys
    assert parsed.tables["watch"]["rankme"] == [[r["step"], r["rankme"]] for r in rows if "rankme" in r]
    text = " ".join(parsed.text)
    assert "vitx pretrain --objective supervised --model vit-nano/4 --data embedded:digits --steps 150" in text
    assert "finds nothing to do" in text and f"vitx export {pretrained_run}" in text  # resume, export


@pytest.fixture(scope="module")
def two_task_suite(tmp_path_factory) -> Path:
    """VTAB's two embedded dSprites tasks from scratch: a 2-point sweep, 2 seeds, 2 steps each (~3 s); the
    page is written again by `vitx report` with its figures."""
    from vitx.pages import write_transfer_page
    from vitx.transfer import TransferConfig, transfer

    out = tmp_path_factory.mktemp("pages") / "suite"
    transfer(TransferConfig(start="scratch", model="vit-nano/4", output_dir=str(out), allow_synthetic=True,
                            seeds=[0, 1], quiet=True, **{**TRANSFER, "task": "vtab/dsprites_*", "sweep_steps": [2]}),
             page=write_transfer_page)
    return out


@needs_browser
def test_a_suite_page_in_a_browser(browser, two_task_suite):
    """Each task's sweep figure is its result.json's sweep; the results table is summary.json's, mean ± s.d."""
    own = (two_task_suite / "report.html").read_text()  # written by the transfer at its end, --no-curves: no figure
    assert 'data-state="finished"' in own and "<svg" not in own
    assert "--allow-synthetic" in own  # (it changes the means: suite.json records it, the command repeats it)
    proc = vitx_cli("report", str(two_task_suite))
    assert proc.returncode == 0 and "a transfer" in proc.stdout, proc.stderr
    path = two_task_suite / "report.html"
    parsed = check_loaded(browser.load(path), path)
    summary = json.loads((two_task_suite / "summary.json").read_text())
    for task in summary["tasks"]:
        result = json.loads((two_task_suite / task["task"].replace("/", "-") / "result.json").read_text())
        assert result["test_top1"] == task["test_top1"] and len(result["test_top1_per_seed"]) == 2
        figure = parsed.figures[f"sweep:{task['task']}"]
        assert figure["chosen"] == result["chosen"]
        assert figure["lines"] == {"2": [[p["lr"], p["val_top1"]] for p in sorted(result["sweep"],
                                                                               key=lambda p: p["lr"])]}
        assert parsed.tables["results"]["tasks"][task["task"]] == {"test_top1": result["test_top1"],
                                                                   "test_top1_std": result["test_top1_std"]}
        assert parsed.tables["sweep"][task["task"]] == [[p["lr"], p["steps"], p["val_top1"]] for p in result["sweep"]]
    table = parsed.tables["results"]
    assert (table["mean"], table["std"], table["group_means"]) == (summary["mean"], summary["std"],
                                                                  summary["group_means"])
    published = parsed.tables["published"]["vit-h14-jft"]  # the paper's row over the same two tasks
    assert published["mean"] == pytest.approx((79.4 + 63.3) / 200)
    text = " ".join(parsed.text)
    assert "vitx transfer --task vtab/dsprites_loc,vtab/dsprites_ori" in text and "Appendix B.1.1" in text


@needs_browser
def test_a_comparison_of_two_runs_in_a_browser(browser, pretrained_run, mpp_run, tmp_path):
    out = tmp_path / "both.html"
    proc = vitx_cli("report", str(pretrained_run), str(mpp_run), "--output", str(out))
    assert proc.returncode == 0 and "a comparison of 2 folders" in proc.stdout, proc.stderr
    from vitx.plots.series import labels

    parsed = check_loaded(browser.load(out), out)
    names = labels([pretrained_run, mpp_run])  # the shortest trailing parts that tell them apart
    runs = {names[0]: metrics(pretrained_run), names[1]: metrics(mpp_run)}
    assert set(parsed.tables["finals"]) == set(runs)
    for name, rows in runs.items():
        for key, value in parsed.tables["finals"][name].items():
            assert value == [r[key] for r in rows if key in r][-1], (name, key)
        for panel in parsed.figures["compare-curves"]:
            for key, points in panel["series"].get(name, {}).items():
                assert drawn(points) == logged(rows, key), (name, key)
    drawn_keys = {k for p in parsed.figures["compare-curves"] for k in p["series"].get(names[1], {})}
    assert {"loss", "colour_acc", "monitor_knn"} <= drawn_keys
    text = " ".join(parsed.text)
    assert "Settings that differ" in text and "mpp(corrupt_rate=0.5)" in text


NUMBER = re.compile(r"[-+−]?\d[\d,]*(?:\.\d+)?%?")


def test_the_reproductions_page_has_every_number_of_its_report():
    """`vitx report recipes/reproduction`: REPORT.md as a page, every number in it the same, in the same order;
    its figures embedded, nothing fetched."""
    from vitx.pages import page

    folder = ROOT / "recipes" / "reproduction"
    kind, html = page([folder])
    assert kind == "reproduction" and len(html.encode()) < 2_000_000
    parsed = Parsed(html)
    assert parsed.fetching == [] and parsed.scripts == 0
    report = (folder / "REPORT.md").read_text()
    report = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", report)  # the images' file names: embedded on the page
    text = "".join(parsed.text)
    body = text[text.index("Command:"):]  # (the page's own header and status line come first)
    assert NUMBER.findall(body[:body.rindex("All numbers are in")]) == \
        NUMBER.findall(report[report.index("Command:"):report.rindex("All numbers are in")])
    assert html.count('src="data:image/png;base64,') == len(re.findall(r"!\[[^\]]*\]\(", (folder / "REPORT.md").read_text()))


def _vtab_suite(root: Path) -> Path:
    """A VTAB-1k suite's folder as `vitx transfer --task vtab/all --seeds 0,1,2` leaves it (19 tasks, the paper's
    4 lr × 2 steps sweep), its numbers made up, its summary.json made by vitx's own summarise and compare_with."""
    import random

    from vitx.tasks.published import ORDER
    from vitx.transfer import TransferConfig
    from vitx.transfer.assemble import compare_with
    from vitx.transfer.report import summarise

    cfg = TransferConfig(task="vtab/all", start="timm:vit_base_patch16_224.orig_in21k", seeds=[0, 1, 2],
                         output_dir=str(root))
    draw = random.Random(0)
    group = {t: "natural" if i < 7 else "specialized" if i < 11 else "structured" for i, t in enumerate(ORDER)}
    results = []
    for name in ORDER:
        task = f"vtab/{name}"
        sweep = [{"lr": lr, "steps": steps, "val_top1": draw.random(), "val_loss": draw.random(),
                  "train_loss": draw.random(), "seconds": 30.0} for lr, steps in cfg.points()]
        seeds = [draw.random() for _ in cfg.seeds]
        results.append({"task": task, "group": group[name], "num_classes": 10,
                        "shots": 1000, "sweep": sweep, "chosen": {"lr": 0.01, "steps": 2500}, "selection": "suite",
                        "test_top1": sum(seeds) / 3, "test_top1_per_seed": seeds, "test_top1_std": 0.01,
                        "seeds": cfg.seeds, "seconds": 900.0, "source": "the VTAB-1k release",
                        "input": {"mean": [0.5] * 3, "std": [0.5] * 3, "interpolation": "bicubic", "from": "timm"}})
        folder = root / f"vtab-{name}"
        folder.mkdir(parents=True)
        (folder / "transfer.json").write_text(json.dumps({"task": task}))
        (folder / "result.json").write_text(json.dumps(results[-1]))
    from vitx.transfer.config import result_settings

    (root / "suite.json").write_text(json.dumps({"tasks": [f"vtab/{n}" for n in ORDER],
                                                 "settings": result_settings(cfg)}))
    summary = summarise(results, 19)
    summary["selection"] = {"select": "suite"}
    summary["compare"] = compare_with(cfg, results, summary)
    (root / "summary.json").write_text(json.dumps({"tasks": results, **summary}))
    return root


@pytest.mark.slow
def test_a_vtab_suites_page_is_under_2_mb(tmp_path):
    """19 tasks, an 8-point sweep each, every published row: well under the 2 MB a page may weigh."""
    from vitx.pages import page

    kind, html = page([_vtab_suite(tmp_path / "vtab")])
    parsed = Parsed(html)
    assert kind == "suite" and len(html.encode()) < 2_000_000 and parsed.fetching == []
    assert len([f for f in parsed.figures if f.startswith("sweep:")]) == 19
    assert len(parsed.tables["published"]) == 9 and len(parsed.tables["results"]["tasks"]) == 19


def test_a_stopped_run_writes_its_page_and_stops(tmp_path, monkeypatch):
    """A stop signal mid-run: report.html says where the run stopped and how to go on (no figures: a stopped
    job has seconds), and the stop goes on; Ctrl-C the same, never swallowed; a page that cannot be written is
    one warning line, the run intact."""
    from vitx.errors import Preempted
    from vitx.pages import write_run_page
    from vitx.runner import loop, pretrain

    step = loop.Trainer.step

    def stop_at_3(signum):
        def stepping(self, *args, **kwargs):
            step(self, *args, **kwargs)
            if self.step_count == 3:
                if signum is None:
                    raise KeyboardInterrupt
                os.kill(os.getpid(), signum)
        return stepping

    monkeypatch.setattr(loop.Trainer, "step", stop_at_3(signal.SIGUSR1))
    with pytest.raises(Preempted):
        pretrain(tiny(tmp_path, steps=8, save_every=8, curves=True, quiet=True), page=write_run_page)
    page = (tmp_path / "run" / "report.html").read_text()
    assert 'data-state="stopped"' in page and "SIGUSR1 at step 3" in page and "<svg" not in page
    assert "--resume</code> continues from" in page

    monkeypatch.setattr(loop.Trainer, "step", stop_at_3(None))
    with pytest.raises(KeyboardInterrupt):
        pretrain(tiny(tmp_path, output_dir=str(tmp_path / "ctrl-c"), steps=8, save_every=8, quiet=True),
                 page=write_run_page)
    assert "Ctrl-C" in (tmp_path / "ctrl-c" / "report.html").read_text()

    from vitx import pages
    from vitx.pages import run

    monkeypatch.setattr(loop.Trainer, "step", step)
    monkeypatch.setattr(run, "run_page", lambda *a, **k: 1 / 0)
    said = []
    assert pages.write_own_page(tmp_path / "run", "run", False, said.append) is None
    assert said == [f"warning: {tmp_path / 'run' / 'report.html'} not written (ZeroDivisionError: division by zero)"]
    monkeypatch.setattr(run, "run_page", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        pages.write_own_page(tmp_path / "run", "run", False, said.append)


def test_a_page_of_a_run_in_progress_says_so(pretrained_run, two_task_suite, tmp_path):
    """A run whose folder another process holds (its .lock, as a training run holds it) is in progress, and its
    page says so; so is a transfer with an item leased now. Let go, the run reads as finished again."""
    import sys

    from vitx.pages import page

    run = tmp_path / "run"
    shutil.copytree(pretrained_run, run, ignore=shutil.ignore_patterns("checkpoints"))
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a+'); "
                               "fcntl.lockf(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
                               str(run / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        _, html = page([run], figures=False)
        assert 'data-state="running"' in html and "a process is writing this run now" in html
    finally:
        holder.kill()
        holder.wait()
    assert 'data-state="finished"' in page([run], figures=False)[1]

    suite = tmp_path / "suite"
    shutil.copytree(two_task_suite, suite)
    (suite / "summary.json").unlink()
    (suite / "leases").mkdir(exist_ok=True)
    (suite / "leases" / "vtab-dsprites_ori-final-seed1.lease").write_text(json.dumps({"host": "node7", "pid": 42}))
    _, html = page([suite], figures=False)
    assert 'data-state="running"' in html and "vtab-dsprites_ori-final-seed1 (node7, pid 42)" in html
    for result in suite.glob("*/result.json"):  # no task finished yet: the sweep points on disk are shown
        result.unlink()
    _, html = page([suite], figures=False)
    assert 'data-table="sweep"' in html and "No sweep points on disk yet" not in html


def test_report_errors_are_one_line(tmp_path, pretrained_run, two_task_suite):
    for args, fragment in (([str(tmp_path / "nothing")], "no such folder"),
                           ([str(pretrained_run / "metrics.jsonl")], "is a file"),
                           ([str(tmp_path)], "is not a vitx run, transfer or reproduction"),
                           ([str(pretrained_run), str(two_task_suite)], "compare runs with runs"),
                           ([str(pretrained_run), str(pretrained_run)], "are the same folder; name each once"),
                           ([str(pretrained_run), f"{pretrained_run}/./"], "are the same folder; name each once")):
        proc = vitx_cli("report", *args, "--output", str(tmp_path / "x.html"))
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and fragment in proc.stderr, proc.stderr
    assert not (tmp_path / "x.html").exists()
    page_before = (pretrained_run / "report.html").read_bytes()
    for output, fragment in ((tmp_path / "x.png", "a page is HTML; give a name ending in .html"),
                             (pretrained_run / "report.html", "is the page of the run in")):  # (a comparison there)
        proc = vitx_cli("report", str(pretrained_run), f"{pretrained_run}-other", "--output", str(output))
        assert proc.returncode == 2 and fragment in proc.stderr, proc.stderr
    assert (pretrained_run / "report.html").read_bytes() == page_before and not (tmp_path / "x.png").exists()


def test_report_reads_damaged_records_as_one_line_and_replaces_only_its_own_pages(tmp_path, pretrained_run,
                                                                                   two_task_suite):
    """A config.json or summary.json edited into nonsense is one line naming it, never a traceback or a page
    that misreads it; --output over a file that is not a vitx page (a user's own, a run's weights) is refused
    unless --force, and a vitx page is replaced."""
    import shutil

    run, suite = tmp_path / "run", tmp_path / "suite"
    shutil.copytree(pretrained_run, run, ignore=shutil.ignore_patterns("checkpoints"))
    shutil.copytree(two_task_suite, suite)
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "step": "many"}))
    summary = json.loads((suite / "summary.json").read_text())
    (suite / "summary.json").write_text(json.dumps({**summary, "tasks": "oops"}))
    for folder, said in ((run, f"{run}/config.json: step must be a whole number of steps, got \"many\""),
                         (suite, f"{suite / 'summary.json'} is damaged: its tasks are not the task results vitx "
                                 "writes")):
        proc = vitx_cli("report", str(folder), "--output", str(tmp_path / "x.html"))
        assert proc.returncode == 2 and proc.stderr == f"error: {said}\n", proc.stderr
    (run / "config.json").write_text(json.dumps(config))
    weights = (run / "model.safetensors").read_bytes()
    proc = vitx_cli("report", str(run), "--output", str(run / "model.safetensors"))
    assert proc.returncode == 2 and proc.stderr == f"error: --output {run / 'model.safetensors'} is one of the vitx " \
                                                   f"run's own files in {run}; write elsewhere (--force never " \
                                                   "replaces a run's own files)\n"
    assert (run / "model.safetensors").read_bytes() == weights
    for extra in ([], ["--force"]):  # its own page again, and a user's file with --force
        target = run / "report.html" if not extra else tmp_path / "mine.html"
        if extra:
            target.write_text("mine")
        proc = vitx_cli("report", str(run), "--output", str(target), *extra)
        assert proc.returncode == 0 and target.read_text().startswith("<!doctype html>"), proc.stderr


def test_a_page_says_when_metrics_lines_are_damaged(tmp_path, pretrained_run):
    """A metrics.jsonl whose lines are not metrics records is said on the page (how many, and that they are left
    out), never read as a run that has logged nothing yet; one torn last line (a kill) is not worth a word."""
    from vitx.pages import page

    run = tmp_path / "run"
    shutil.copytree(pretrained_run, run, ignore=shutil.ignore_patterns("checkpoints"))
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join(lines + ['{"step": 9']) + "\n")
    html = page([run], figures=False)[1]
    assert "not metrics records" not in html and "Nothing logged yet" not in html
    assert "&lt;code" not in html and "vitx report " in html  # (the Curves line's command: markup, not text)
    (run / "metrics.jsonl").write_text("\n".join(lines[:2] + ["garbage", "[1, 2]", '{"step": "x"}',
                                                             '{"step": 999, "loss": {"a": 1}, "val_loss": NaN}']) + "\n")
    html = page([run], figures=False)[1]
    assert "3 lines are not metrics records and are left out" in html
    assert "{&#x27;a&#x27;: 1}" not in html and '<td class="num">nan</td>' in html  # diverged: said; no number: not
    (run / "metrics.jsonl").write_text("garbage\n\n[1]\n")
    html = page([run], figures=False)[1]
    assert "metrics.jsonl holds 2 lines and none is a metrics record" in html and "Nothing logged yet" not in html


def test_the_input_row_says_what_training_saw():
    """A transfer's VTAB protocol trains on whole resized images (preprocess.augment false), an objective with views
    on its own crops: the page said `random resized crop` for both."""
    from vitx.pages.run import _augmentation

    pre = {"crop_scale": 0.08, "hflip": True, "randaugment": ""}
    assert _augmentation(pre, None) == "random resized crop scale ≥ 0.08, flip on"
    assert _augmentation({**pre, "augment": False}, None) == "no augmentation (each image resized whole, as " \
                                                             "evaluation sees it)"
    assert _augmentation(pre, [{"count": 2}, {"count": 4}]).startswith("the objective's 6 views of each image")

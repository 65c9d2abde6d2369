"""Streamed sources: WebDataset tar shards and a `datasets` stream (a local copy in the hub's parquet layout
standing in for the hub). Each process reads its own shards, and a killed run resumes at the next sample."""
import io
import itertools
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vitx.data.opener import open_source
from vitx.data.streams import expand_braces
from vitx.errors import VitxError

from .helpers import ROOT, as_flags

SHARDS, PER_SHARD = 4, 24  # 96 samples; sample n has label n, so a label names its sample


def _jpeg(n: int, size: int = 20) -> bytes:
    buf = io.BytesIO()
    Image.fromarray((np.random.default_rng(n).random((size, size, 3)) * 255).astype(np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    """WebDataset shards as `tar --sort=name` writes them: s00000.jpg, s00000.cls, ... and classnames.txt."""
    root = tmp_path_factory.mktemp("shards")
    for s in range(SHARDS):
        with tarfile.open(root / f"train-{s:04d}.tar", "w") as tar:
            for n in range(s * PER_SHARD, (s + 1) * PER_SHARD):
                for ext, data in (("cls", str(n).encode()), ("jpg", _jpeg(n))):
                    info = tarfile.TarInfo(f"s{n:05d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    (root / "classnames.txt").write_text("\n".join(f"sample{n}" for n in range(SHARDS * PER_SHARD)))
    return root


@pytest.fixture(scope="module")
def hub_copy(tmp_path_factory) -> Path:
    """A local copy of a hub dataset as `hf download` leaves it: data/<split>-0000i-of-0000k.parquet."""
    import datasets

    root = tmp_path_factory.mktemp("hub")
    (root / "data").mkdir()
    n = SHARDS * PER_SHARD
    feats = datasets.Features({"image": datasets.Image(),
                               "label": datasets.ClassLabel(names=[f"sample{i}" for i in range(n)])})
    ds = datasets.Dataset.from_dict({"image": [{"bytes": _jpeg(i), "path": None} for i in range(n)],
                                     "label": list(range(n))}, features=feats)
    for s in range(SHARDS):
        ds.shard(SHARDS, s, contiguous=True).to_parquet(str(root / f"data/train-{s:05d}-of-{SHARDS:05d}.parquet"))
    ds.select(range(8)).to_parquet(str(root / "data/validation-00000-of-00001.parquet"))
    return root


def _spec(kind: str, shards: Path, hub_copy: Path) -> tuple[str, bool]:
    """(--data, --stream) for each kind of stream."""
    return (str(shards / "train-{0000..0003}.tar"), False) if kind == "shards" else (str(hub_copy), True)


def test_shard_patterns(shards):
    assert expand_braces("a-{08..11}.tar") == ["a-08.tar", "a-09.tar", "a-10.tar", "a-11.tar"]
    assert expand_braces("{x,y}/p{0..1}.tar") == ["x/p0.tar", "x/p1.tar", "y/p0.tar", "y/p1.tar"]
    assert open_source(str(shards), "train").num_shards == SHARDS  # a folder of shards
    assert open_source(str(shards), "validation") is None
    with pytest.raises(VitxError, match=r"shard .*train-0004\.tar does not exist"):
        open_source(str(shards / "train-{0000..0004}.tar"), "train")


def test_a_damaged_shard_or_another_process_count_is_one_line(shards, tmp_path):
    from vitx.runner import pretrain

    broken = tmp_path / "broken"
    broken.mkdir()
    with tarfile.open(shards / "train-0001.tar") as tar:
        middle = [m for m in tar.getmembers() if m.name.endswith(".jpg")][12]
    cut = middle.offset_data + middle.size // 2  # inside the 13th image's bytes
    (broken / "train-0000.tar").write_bytes((shards / "train-0001.tar").read_bytes()[:cut])
    with pytest.raises(VitxError, match=r"shard .*broken/train-0000\.tar is cut short"):
        open_source(str(broken), "train")

    opts = dict(model="vit-nano/4", data=str(shards), image_size=16, batch_size=8, steps=4, save_every=2,
                eval_samples=0, workers=0, log_with="none", objective="mpp", output_dir=str(tmp_path / "run"))
    pretrain({**opts, "steps": 2})  # stopped at its step-2 checkpoint, as a preempted run would be
    config = tmp_path / "run" / "checkpoints" / "step_00000002" / "config.json"
    record = json.loads(config.read_text())
    assert record["data"]["processes"] == 1
    record["data"]["processes"] = 2  # as if it had run on 2 processes
    config.write_text(json.dumps(record))
    with pytest.raises(VitxError, match="streams .* on 2 process"):
        pretrain({**opts, "steps": 2}, resume=True)


def test_a_shard_cut_at_a_sample_boundary_is_refused_not_read_short(shards, tmp_path):
    """A copy stopped between two samples reads as a valid, shorter tar: without the check, training would
    silently see 12 of the shard's 24 samples."""
    with tarfile.open(shards / "train-0002.tar") as tar:
        cut = [m for m in tar.getmembers() if m.name.endswith(".cls")][12].offset  # the 13th sample's header
    half = tmp_path / "half"
    half.mkdir()
    for s in range(SHARDS):
        shutil.copy(shards / f"train-{s:04d}.tar", half)
    (half / "train-0002.tar").write_bytes((shards / "train-0002.tar").read_bytes()[:cut])
    with tarfile.open(half / "train-0002.tar") as tar:
        assert len(tar.getmembers()) == 24  # what a reader sees: 12 whole samples, no error
    assert open_source(str(shards), "train").num_shards == SHARDS  # whole shards pass
    with pytest.raises(VitxError, match=r"shard .*half/train-0002\.tar is cut short"):
        open_source(str(half / "train-{0000..0003}.tar"), "train")


def test_a_cut_shard_whose_last_kib_is_zeros_is_refused(tmp_path):
    """Samples whose last member ends in zeros (a mask saved as .npy): cut at the 21st sample, the file still
    ends in 1 KiB of zeros, as a whole tar does, and a reader sees 20 of 60 samples without an error. The tar's
    structure tells: the end-of-archive marker is missing after the last member."""
    whole, cut_dir = tmp_path / "whole", tmp_path / "cut"
    whole.mkdir()
    cut_dir.mkdir()
    mask = io.BytesIO()
    np.save(mask, np.zeros((32, 32), np.uint8))  # a 128-byte header, then 1,024 zero bytes
    with tarfile.open(whole / "train-0000.tar", "w") as tar:
        for n in range(60):
            for ext, data in (("cls", str(n % 3).encode()), ("jpg", _jpeg(n)), ("npy", mask.getvalue())):
                info = tarfile.TarInfo(f"s{n:05d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    with tarfile.open(whole / "train-0000.tar") as tar:
        cut = tar.getmember("s00020.cls").offset  # the 21st sample's first header
    (cut_dir / "train-0000.tar").write_bytes((whole / "train-0000.tar").read_bytes()[:cut])
    raw = (cut_dir / "train-0000.tar").read_bytes()
    assert not any(raw[-1024:])  # what the tail check looked at: zeros, as at the end of a whole tar
    with tarfile.open(cut_dir / "train-0000.tar") as tar:
        assert len(tar.getmembers()) == 60  # 20 whole samples, no error
    assert open_source(str(whole), "train").num_shards == 1
    with pytest.raises(VitxError, match=r"shard .*cut/train-0000\.tar is cut short .*after member s00019\.npy"):
        open_source(str(cut_dir), "train")


@pytest.mark.parametrize("prefix, fmt", [("../", tarfile.GNU_FORMAT), ("/tmp/elsewhere/", tarfile.USTAR_FORMAT),
                                         ("/" + "d" * 120 + "/", tarfile.PAX_FORMAT),
                                         ("/" + "d" * 120 + "/", tarfile.GNU_FORMAT)])
def test_a_shard_with_unsafe_member_names_is_refused_by_name(tmp_path, prefix, fmt):
    """Members named outside the archive's folder (`../`, absolute; in the ustar name and prefix fields, a pax
    path record or a GNU long name) are refused at open in one line that names the member, before any sample
    is read; the same samples with relative names open."""
    for folder, named in (("unsafe", prefix), ("safe", "")):
        (tmp_path / folder).mkdir()
        with tarfile.open(tmp_path / folder / "train-0000.tar", "w", format=fmt) as tar:
            for n in range(4):
                for ext, data in (("cls", str(n % 2).encode()), ("jpg", _jpeg(n))):
                    info = tarfile.TarInfo(f"{named}s{n:05d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    assert open_source(str(tmp_path / "safe"), "train").num_shards == 1
    with pytest.raises(VitxError) as refused:
        open_source(str(tmp_path / "unsafe"), "train")
    assert str(refused.value) == (
        f"shard {tmp_path / 'unsafe' / 'train-0000.tar'}: member '{prefix}s00000.cls' has an unsafe name (an absolute "
        "path, or '..' out of the archive's folder); nothing was read from it: write the shard with relative member "
        "names (tar without -P)")


@pytest.mark.parametrize("kind", ["shards", "hub"])
def test_each_process_reads_its_own_shards_and_resumes_at_its_position(kind, shards, hub_copy, monkeypatch):
    monkeypatch.setattr("datasets.config.SLEEP_TIME_ON_THREADS_SHUTDOWN", 0)  # 5 s at a shuffled epoch's end
    spec, stream = _spec(kind, shards, hub_copy)
    source = open_source(spec, "train", stream=stream, shuffle_buffer=0)
    assert source.num_classes == SHARDS * PER_SHARD and source.num_shards == SHARDS
    epoch = {r: [label for _, label in itertools.islice(source.records(r, 2, seed=0), 2 * PER_SHARD)]
             for r in range(2)}
    shards_read = {r: {n // PER_SHARD for n in labels} for r, labels in epoch.items()}
    assert shards_read[0] | shards_read[1] == set(range(SHARDS)) and not shards_read[0] & shards_read[1]
    assert sorted(epoch[0] + epoch[1]) == list(range(SHARDS * PER_SHARD))  # an epoch: every sample once
    assert source.sharding_note(2) is None and "not a multiple of 3" in source.sharding_note(3)

    shuffled = open_source(spec, "train", stream=stream, shuffle_buffer=16)
    run = list(itertools.islice(shuffled.micro_batches(8, rank=1, world=2, seed=3), 9))  # crosses an epoch
    resumed = next(shuffled.micro_batches(8, rank=1, world=2, seed=3, start_micro_step=7))
    assert [(label, p) for (_, label), p in resumed] == [(label, p) for (_, label), p in run[7]]
    assert [p for _, p in run[7]] == list(range(7 * 8 + 4, 8 * 8))  # rank 1's half of micro-step 7
    assert [label for (_, label), _ in run[0]] != sorted(label for (_, label), _ in run[0])  # shuffled


def _alive(pid: int) -> bool:
    """Whether `pid` is still a running process (a zombie, killed but not reaped by its parent, is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


RECORDING = '''
"""Supervised, writing each optimiser step's labels to $VITX_TEST_SEEN/rank<r>.jsonl (a test plugin); held after
step $VITX_TEST_HOLD_AT until killed (its pid in held<r>.pid), so a kill lands mid-run however slowly a loaded
machine runs it."""
import json
import os
import time

import datasets.config
import torch.distributed as dist

datasets.config.SLEEP_TIME_ON_THREADS_SHUTDOWN = 0  # datasets sleeps 5 s when a shuffled parquet epoch ends

import vitx
from vitx.objectives.supervised import Supervised


@vitx.register_objective("supervised-recording")
class Recording(Supervised):
    def forward(self, batch):
        self.__dict__.setdefault("_seen", []).extend(batch["label"].tolist())
        return super().forward(batch)

    def on_step_end(self, step):
        rank = dist.get_rank() if dist.is_initialized() else 0
        with open(os.path.join(os.environ["VITX_TEST_SEEN"], f"rank{rank}.jsonl"), "a") as f:
            f.write(json.dumps({"step": step, "labels": self.__dict__.pop("_seen", [])}) + "\\n")
        if step == int(os.environ.get("VITX_TEST_HOLD_AT", "0")):
            with open(os.path.join(os.environ["VITX_TEST_SEEN"], f"held{rank}.pid"), "w") as f:
                f.write(str(os.getpid()))
            time.sleep(3600)
'''


@pytest.mark.skipif(shutil.which("accelerate") is None, reason="accelerate CLI not on PATH")
@pytest.mark.slow  # 40 s a kind: two launches of 2 processes. In the default suite, each process's shards and its
# position on resume are checked in-process (test_each_process_reads_its_own_shards_...), kill -9 in test_runner
@pytest.mark.parametrize("kind", ["shards", "hub"])
def test_two_processes_stream_and_resume_at_the_right_sample_after_kill_9(kind, shards, hub_copy, tmp_path):
    """Acceptance: 2 processes pre-train from a stream; killed with SIGKILL after a checkpoint and resumed, each
    process continues with exactly the samples an uninterrupted run would read next, from its own shards."""
    spec, stream = _spec(kind, shards, hub_copy)
    plugin, seen = tmp_path / "recording.py", tmp_path / "seen"
    plugin.write_text(RECORDING)
    seen.mkdir()
    run = tmp_path / "run"
    opts = dict(objective="supervised-recording", model="vit-nano/4", data=spec, image_size=16, batch_size=8,
                steps=16, warmup_steps=2, save_every=4, log_every=1, eval_samples=0, workers=1, shuffle_buffer=16,
                log_with="none", curves=False, output_dir=str(run))
    cmd = ["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29521" if stream else "29522",
           "-m", "vitx", "--plugin", str(plugin), "pretrain", *as_flags(opts), *(["--stream"] if stream else [])]
    env = {**os.environ, "VITX_TEST_SEEN": str(seen)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**env, "VITX_TEST_HOLD_AT": "6"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # held after step 6
    deadline = time.time() + 900  # only catches a run that never gets there
    held = [seen / f"held{rank}.pid" for rank in range(2)]
    while not all(p.exists() and p.read_text() for p in held):
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.time() < deadline
        time.sleep(0.02)
    for pid in (int(p.read_text()) for p in held):  # torch's launcher starts each in a session of its own
        os.kill(pid, signal.SIGKILL)
        while _alive(pid):
            time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher
    proc.wait()
    assert max(json.loads(line)["step"] for line in (seen / "rank0.jsonl").read_text().splitlines()) < 16

    start = max(int(p.name.split("_")[1]) for p in (run / "checkpoints").glob("step_*"))
    assert start == 4  # held at step 6: killed between the checkpoints of steps 4 and 8
    resumed = subprocess.run([*cmd, "--resume"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming" in resumed.stdout

    source = open_source(spec, "train", stream=stream, shuffle_buffer=16)
    read = {}
    for rank in range(2):
        expected = [[label for (_, label), _ in keys]
                    for keys in itertools.islice(source.micro_batches(8, rank, 2, seed=0), 16)]
        lines = [json.loads(line) for line in (seen / f"rank{rank}.jsonl").read_text().splitlines()]
        before, after = lines[:-(16 - start)], lines[-(16 - start):]  # the resumed run: steps start+1..16
        assert [m["step"] for m in after] == list(range(start + 1, 17))
        assert [m["labels"] for m in after] == expected[start:]
        assert [m["step"] for m in before] == list(range(1, len(before) + 1)) and len(before) >= start
        assert [m["labels"] for m in before] == expected[:len(before)]
        read[rank] = {n // PER_SHARD for m in lines[:12] for n in m["labels"]}  # 12 steps × 4 images: an epoch
    assert len(read[0]) == len(read[1]) == 2 and not read[0] & read[1]  # two shards each, none shared

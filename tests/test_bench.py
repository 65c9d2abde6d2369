"""`vitx bench` (vitx/speed/): the runner's own step timed on the CPU, its figures printed and written, FLOPs as
torch counts them, and one-line refusals."""
import json

import pytest
import torch

from .helpers import vitx_cli


def test_bench_times_the_runners_step_and_says_img_s_tflops_mfu_and_input_wait(tmp_path):
    out = tmp_path / "bench.json"
    result = vitx_cli("bench", "--device", "cpu", "--model", "vit-nano/4", "--batch-size", "16", "--steps", "2",
                      "--warmup", "1", "--peak-tflops", "0.5", "--output", str(out))
    assert result.returncode == 0, result.stderr
    said = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    assert set(said) == {"bench", "data", "steps", "img/s", "TFLOP/s", "MFU", "input wait", "memory"}
    assert said["bench"].startswith("vit-nano/4 at 16 px, supervised, batch 16, precision no; CPU")
    assert ", no loader workers (a CPU crops images held in memory itself: images made in this process)" in \
        said["bench"]  # (--workers is not used for them there: said, not silently)
    saved = json.loads(out.read_text())
    assert saved["images_per_s"] > 0 and float(said["img/s"]) == round(saved["images_per_s"], 1)
    assert saved["steps"] == 2 and saved["loss"] == pytest.approx(2.3, abs=0.2)  # ln 10 at the start
    # vit-nano/4 at 16 px: 17 tokens of width 64, 4 blocks, MLP 256, 10 classes; forward FLOPs by hand, and the
    # backward twice them but for the patch embedding's input (the images need no gradient)
    n, d, blocks = 17, 64, 4
    per_block = 2 * n * 12 * d * d + 4 * n * n * d  # qkv, proj and the MLP; QKᵀ and attention · V
    patches, head = 2 * 16 * (3 * 4 * 4) * d, 2 * d * 10
    assert saved["gflop_per_image"] * 1e9 == pytest.approx(3 * (blocks * per_block + head) + 2 * patches, rel=0.02)
    assert saved["tflops"] == pytest.approx(saved["images_per_s"] * saved["gflop_per_image"] / 1e3)
    assert saved["mfu"] == pytest.approx(saved["tflops"] / 0.5) and saved["peak_source"] == "given with --peak-tflops"
    assert 0 <= saved["input_wait"] <= 1 and saved["memory_gib"] is None
    assert saved["workers"] == 0  # synthetic images held in memory: a CPU crops them in the process itself


def test_an_input_bound_measurement_says_so():
    """1,299 img/s with the input waited for 97% of the time (B/16's synthetic data cropped in the training
    process on an H200, 2026-11-28): on a GPU the line says the loader, not the GPU, set the rate."""
    from vitx.speed.bench import Measured

    base = dict(model="vit-b/16", objective="supervised", image_size=224, batch_size=256, precision="bf16",
                compiled=False, device="NVIDIA H200", processes=1, torch="2.11", data="synthetic", warmup=3,
                warmup_s=1.0, steps=20, timed_s=3.9, loss=2.3, images_per_s=1299.0, gflop_per_image=105.9,
                tflops=137.5, peak_tflops=989.0, peak_source="datasheet", mfu=0.139, memory_gib=17.7)
    line = next(x for x in Measured(**base, input_wait=0.97, workers=15, none_because="").lines()
                if x.startswith("input wait"))
    assert line == "input wait: 97.0% of the timed steps' time: the input sets the rate, not the GPU; more than " \
                   "its 15 loader workers would feed it"
    line = next(x for x in Measured(**base, input_wait=0.6, workers=0, none_because="--workers 0").lines()
                if x.startswith("input wait"))
    assert line.endswith("not the GPU; its images are made in this process between steps (--workers 0)")
    on_cpu = {**base, "memory_gib": None, "device": "CPU, 2 threads"}  # the wait is then part of each step's time
    assert "input wait: 97.0% of the timed steps' time" in Measured(**on_cpu, input_wait=0.97, workers=1,
                                                                     none_because="").lines()
    quiet = next(x for x in Measured(**base, input_wait=0.3, workers=15, none_because="").lines()
                 if x.startswith("input wait"))
    assert quiet == "input wait: 30.0% of the timed steps' time"


def test_a_cpu_has_no_known_peak():
    from vitx.speed.flops import device_peak

    assert device_peak(torch.device("cpu"), "bf16") == (None, "unknown for cpu")


@pytest.mark.parametrize("args, said", [
    (("--steps", "0"), "--steps must be positive, got 0"),
    (("--device", "tpu"), "--device must be one of auto, cuda, cpu, got 'tpu'"),
    (("--peak-tflops", "-1"), "--peak-tflops must be positive"),
    (("--model", "vit-nope"), "vit-nope"),
    (("--set", "steps=-5"), "--set steps: vitx bench sets --steps (the steps it times, after --warmup's); give "
                            "--steps instead"),  # (the run's length is the measurement's: it was ignored unsaid)
    (("--set", "data=embedded:digits"), "--set data: vitx bench sets --data"),
])
def test_bad_input_is_one_line(args, said):
    result = vitx_cli("bench", "--device", "cpu", *args)
    assert result.returncode == 2 and said in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here")
def test_device_cuda_without_a_gpu_is_one_line():
    result = vitx_cli("bench", "--device", "cuda")
    assert result.returncode == 2 and "--device cuda: torch sees no GPU here" in result.stderr


def test_an_output_or_profile_that_cannot_be_written_is_refused_before_measuring(tmp_path):
    """--output and --profile are checked before the measurement (minutes on a GPU), not at its last line."""
    (tmp_path / "file").write_text("")
    for flag, path, said in [("--output", tmp_path, f"--output {tmp_path} is a folder; give a file to write, e.g. "
                                                    f"--output {tmp_path / 'bench.json'}"),
                             ("--profile", tmp_path / "file" / "p.txt", f"--profile {tmp_path / 'file' / 'p.txt'}: "
                                                                         f"{tmp_path / 'file'} is a file, not a folder")]:
        result = vitx_cli("bench", "--device", "cpu", flag, str(path))
        assert result.returncode == 2 and result.stderr == f"error: {said}\n", result.stderr
        assert "img/s" not in result.stdout  # refused before anything was measured


def test_a_pipe_named_as_the_output_is_written_into_never_replaced(tmp_path):
    """A device or pipe named as a file (/dev/stdout, /dev/null) is written to; the atomic rename would put a
    regular file in its place (as root, /dev/null itself). A FIFO stands in for the device here."""
    import os
    import stat
    import threading

    import matplotlib.pyplot as plt

    from vitx.plots.canvas import save
    from vitx.safe_io import atomic_write_text

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for write in (lambda: atomic_write_text(fifo, "figures\n"), lambda: save(plt.figure(), fifo.with_suffix(""))):
        got = []
        reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
        reader.start()
        write()
        reader.join(timeout=60)
        assert got and got[0] and stat.S_ISFIFO(fifo.stat().st_mode)  # its bytes came through; still a pipe
    assert got[0].startswith(b"\x89PNG") and sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]

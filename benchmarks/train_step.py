"""Benchmark (not a test): the vitx training step, eager and compiled, against a plain timm + PyTorch loop.

Same model, batch, data, optimiser and gradient clipping on every side, timed in alternating rounds in one run.
Prints images/s for each, the FLOPs per image (forward + backward, counted by torch's FlopCounterMode with
attention in its math form, so that CPU attention kernels are counted too) and the
model FLOP utilisation (MFU): achieved FLOP/s over the device's peak. The peak is the datasheet dense rate
for known GPUs at the run's precision (H100 SXM bf16 989 TFLOP/s, ...), else the best matmul rate measured in
the same run (this is what CPUs get). The batch is uint8 on the host, as the loader hands it over; every side
moves it to the device and normalises it there.

    python benchmarks/train_step.py                      # vit-ti/16 at 224, batch 32, eager vitx and plain
    python benchmarks/train_step.py --sides vitx,vitx-compile,plain,plain-compile
    python benchmarks/train_step.py --model vit-b/16 --batch 256 --precision bf16 --sides vitx,vitx-compile,plain
    python benchmarks/train_step.py --model vit-micro/4 --batch 128
    python benchmarks/train_step.py --objectives "supervised,mpp,mae(decoder_dim=192,decoder_depth=1,decoder_heads=3)"
"""
from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from typing import Callable

import timm
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from vitx.registry import BACKBONES
from vitx.runner import Trainer, build, resolve_config


DATASHEET = {  # dense TFLOP/s without sparsity: (bf16/fp16, tf32)
    "H100 SXM": (989, 495), "H100 80GB HBM3": (989, 495), "H100 PCIe": (756, 378), "H100 NVL": (835, 418),
    "H200": (989, 495), "A100": (312, 156), "L40S": (362, 183), "A10G": (125, 62.5), "RTX 4090": (165, 82.6),
}


def device_peak(device: torch.device, precision: str) -> tuple[float, str]:
    """(peak FLOP/s, where it comes from) at the run's precision."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, (half, tf32) in DATASHEET.items():
            if key in name:
                return (half if precision in ("bf16", "fp16") else tf32) * 1e12, f"datasheet, {name}"
    dtype = torch.bfloat16 if precision == "bf16" and device.type == "cuda" else torch.float32
    return matmul_peak(device, dtype), f"measured {dtype} matmul, {device}"


def matmul_peak(device: torch.device = torch.device("cpu"), dtype: torch.dtype = torch.float32,
                n: int = 2048, repeats: int = 12) -> float:
    """Best sustained matmul rate in FLOP/s (2n³ per product)."""
    n = 8192 if device.type == "cuda" else n
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    best = 0.0
    for _ in range(repeats):
        _sync(device)
        t = time.perf_counter()
        for _ in range(4):
            a @ b
        _sync(device)
        best = max(best, 4 * 2 * n**3 / (time.perf_counter() - t))
    return best


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _random_batch(args: argparse.Namespace, size: int) -> dict[str, torch.Tensor]:
    """The same batch for every side, as the loader hands it over: uint8 images (B, 3, S, S), labels (B,)."""
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (args.batch, 3, size, size), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, args.classes, (args.batch,), generator=g)
    batch = {"image": images, "label": labels, "skipped": torch.zeros(args.batch, dtype=torch.long)}
    if torch.cuda.is_available():
        batch = {k: v.pin_memory() for k, v in batch.items()}
    return batch


def _vitx_trainer(args: argparse.Namespace, objective: str, out: str, compile: bool = False) -> Trainer:
    """A vitx run of `objective` on args.model, stepped by hand with the benchmark's batch."""
    cfg, _ = resolve_config({"model": args.model, "objective": objective, "batch_size": args.batch,
                             "data": f"embedded:shapes(classes={args.classes})", "steps": 10**6,
                             "warmup_steps": 10, "output_dir": out, "log_with": "none", "eval_samples": 0,
                             "precision": args.precision, "compile": compile}, resume=False)
    return Trainer(build(cfg))


def compare_objectives(args: argparse.Namespace) -> None:
    """Median vitx step time of each objective on the same model and batch, alternating, relative to supervised."""
    names = [n.strip() for n in re.split(r",(?![^()]*\))", args.objectives)]  # commas outside (...)
    if "supervised" not in names:
        names.insert(0, "supervised")
    spec = BACKBONES.get(args.model).obj
    batch = _random_batch(args, spec.img_size)
    times: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as out:
        trainers = {}
        for i, name in enumerate(names):
            trainers[name] = _vitx_trainer(args, name, f"{out}/{i}")
            trainers[name].step([batch]), trainers[name].step([batch])  # warm-up
        for _ in range(args.rounds):
            for name in names:
                for _ in range(args.steps):
                    t = time.perf_counter()
                    trainers[name].step([batch])
                    trainers[name].pop_metrics()
                    times[name].append(time.perf_counter() - t)
    base = statistics.median(times["supervised"])
    print(f"model {args.model} at {spec.img_size}px, batch {args.batch}, {torch.get_num_threads()} threads, "
          f"{args.rounds}×{args.steps} timed steps per objective (median)")
    for name in names:
        t = statistics.median(times[name])
        print(f"{name:>12.60}: {t * 1e3:8.1f} ms/step  {args.batch / t:8.1f} img/s  {name}/supervised {t / base:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="vit-ti/16")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--precision", default="no", choices=["no", "bf16"], help="bf16: autocast on every side")
    ap.add_argument("--sides", default="vitx,plain", help="of vitx, vitx-compile, plain, plain-compile")
    ap.add_argument("--steps", type=int, default=6, help="timed steps per side per round")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (vitx, plain, vitx, ...)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per side first (compilation happens here)")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--objectives", default="",
                    help="comma-separated objectives to time against supervised instead (e.g. supervised,mpp)")
    args = ap.parse_args()
    if args.objectives:
        compare_objectives(args)
        return

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    spec = BACKBONES.get(args.model).obj
    size = spec.img_size
    batch = _random_batch(args, size)
    sides = [s.strip() for s in args.sides.split(",")]
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    mean = torch.full((1, 3, 1, 1), 0.5, device=device)

    with tempfile.TemporaryDirectory() as out:
        steps: dict[str, Callable[[], None]] = {}
        for side in sides:
            if side.startswith("vitx"):  # the runner's own step: accumulate context, clipping, schedule, metrics
                trainer = _vitx_trainer(args, "supervised(head='linear')", f"{out}/{side}", side.endswith("compile"))

                def vitx_step(trainer: Trainer = trainer) -> None:
                    trainer.step([batch])
                    trainer.pop_metrics()  # the runner does this at log steps; here at every step (worst case)

                steps[side] = vitx_step
            else:  # a hand-written timm + PyTorch loop on the same architecture
                torch.manual_seed(0)
                plain = timm.create_model(spec.timm_arch, num_classes=args.classes, **{
                    k: v for k, v in spec.timm_kwargs().items() if k != "num_classes"}).to(device)
                opt = torch.optim.AdamW(plain.parameters(), lr=1e-3, weight_decay=0.1,
                                        **({"fused": True} if device.type == "cuda" else {}))
                model = torch.compile(plain) if side.endswith("compile") else plain

                def plain_step(model: torch.nn.Module = model, plain: torch.nn.Module = plain, opt=opt) -> None:
                    x = batch["image"].to(device, non_blocking=True).float().div_(255).sub_(mean).div_(mean)
                    y = batch["label"].to(device, non_blocking=True)
                    with amp:
                        loss = F.cross_entropy(model(x), y)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(plain.parameters(), 1.0)
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    loss.item()

                steps[side] = plain_step
                if "flops" not in locals():
                    x = torch.randn(args.batch, 3, size, size, device=device)
                    with FlopCounterMode(display=False) as counter, amp, sdpa_kernel(SDPBackend.MATH):
                        F.cross_entropy(plain(x), batch["label"].to(device)).backward()
                    opt.zero_grad(set_to_none=True)
                    flops = counter.get_total_flops() / args.batch
        if "flops" not in locals():
            probe = timm.create_model(spec.timm_arch, **spec.timm_kwargs()).to(device)
            with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
                probe(torch.randn(args.batch, 3, size, size, device=device)).sum().backward()
            flops = counter.get_total_flops() / args.batch
            del probe

        times: dict[str, list[float]] = {side: [] for side in sides}
        for side in sides:  # warm-up (and compilation)
            t = time.perf_counter()
            for _ in range(args.warmup):
                steps[side]()
            _sync(device)
            print(f"{side}: {args.warmup} warm-up steps in {time.perf_counter() - t:.1f} s", flush=True)
        for _ in range(args.rounds):
            for side in sides:
                for _ in range(args.steps):
                    _sync(device)
                    t = time.perf_counter()
                    steps[side]()
                    _sync(device)
                    times[side].append(time.perf_counter() - t)

    peak, source = device_peak(device, args.precision)
    ips = {k: args.batch / statistics.median(v) for k, v in times.items()}
    what = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"model {args.model} at {size}px, batch {args.batch}, precision {args.precision}, {what}, torch "
          f"{torch.__version__}; {args.rounds}×{args.steps} timed steps per side (median)")
    print(f"peak: {peak / 1e12:.3f} TFLOP/s ({source}); FLOPs per image (fwd+bwd): {flops / 1e9:.2f} GFLOP")
    for side in sides:
        achieved = ips[side] * flops
        print(f"{side:>14}: {ips[side]:9.2f} img/s  {achieved / 1e12:8.3f} TFLOP/s  MFU {achieved / peak:6.1%}")
    if "plain" in ips:
        for side in sides:
            if side != "plain":
                print(f"ratio {side} / plain: {ips[side] / ips['plain']:.3f}")


if __name__ == "__main__":
    main()

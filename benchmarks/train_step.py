"""Benchmark (not a test): the vitx training step, eager and compiled, against a plain timm + PyTorch loop, and the
plain loop with one change at a time (the step variants of issue 50: fused AdamW, no host syncs, an attention
kernel, torch.compile's modes and CUDA graphs, bf16 weights against bf16 autocast), with MFU.

Same model, batch, data, optimiser and gradient clipping on every side, timed in alternating rounds in one run.
Prints images/s for each, the FLOPs per image (forward + backward, counted by torch's FlopCounterMode:
`vitx.speed.flops.count_flops`, which `vitx bench` uses too) and the model FLOP utilisation (MFU): achieved
FLOP/s over the device's peak, the datasheet dense rate for known GPUs at the run's precision (H100 SXM bf16 989
TFLOP/s, ...: `vitx.speed.flops.device_peak`), else the best matmul rate measured in the same run (what CPUs
get). The batch is uint8 on the host, as the loader hands it over; every side moves it to the device and
normalises it there.

A side is a base and its changes, `+`-joined:
  vitx                the runner's own step (`Trainer.step`: accumulation, clipping, skip, schedule, metrics), its
                      metrics read at every step (the runner reads them at log steps: the worst case)
  plain               a hand-written loop: timm model, AdamW (fused on a GPU), bf16 autocast with --precision bf16,
                      cross-entropy, clip_grad_norm_, step, and `loss.item()` every step (a user's logging)
  +compile            torch.compile the model (vitx: --compile); +compile=MODE a mode of torch.compile's
                      (reduce-overhead: CUDA graphs; max-autotune, max-autotune-no-cudagraphs)
  +unfused            plain: torch's default (foreach) AdamW instead of the fused kernel
  +nosync             plain: no `loss.item()`: the host never waits for the device inside the loop
  +sdpa=KERNEL        plain: attention on one kernel only: flash, efficient, cudnn or math
  +bf16w              plain: bf16 weights and activations with an fp32 master copy that the optimiser steps
                      (instead of fp32 weights under bf16 autocast)
`vitx-compile` and `plain-compile` are vitx+compile and plain+compile.

    python benchmarks/train_step.py                      # vit-ti/16 at 224, batch 32, eager vitx and plain
    python benchmarks/train_step.py --sides vitx,vitx+compile,plain,plain+compile
    python benchmarks/train_step.py --model vit-b/16 --batch 256 --precision bf16 --sides plain,plain+nosync,plain+bf16w
    python benchmarks/train_step.py --objectives "supervised,mpp,mae(decoder_dim=192,decoder_depth=1,decoder_heads=3)"
"""
from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vitx.registry import BACKBONES  # noqa: E402
from vitx.speed.bench import build_trainer  # noqa: E402
from vitx.speed.flops import count_flops, device_peak, matmul_peak, synchronize  # noqa: E402

CHANGES = ("compile", "unfused", "nosync", "sdpa", "bf16w")
ALIASES = {"vitx-compile": "vitx+compile", "plain-compile": "plain+compile"}
KERNELS = ("flash", "efficient", "cudnn", "math")


def parse_side(side: str) -> tuple[str, dict[str, str]]:
    """'plain+compile=reduce-overhead+nosync' → ('plain', {'compile': 'reduce-overhead', 'nosync': ''})."""
    base, *changes = ALIASES.get(side, side).split("+")
    parsed = dict((c.split("=", 1) + [""])[:2] for c in changes)
    unknown = set(parsed) - set(CHANGES)
    if base not in ("vitx", "plain") or unknown or (base == "vitx" and set(parsed) - {"compile"}):
        sys.exit(f"error: side {side!r}: a base (vitx or plain) and changes of {', '.join(CHANGES)} (vitx takes "
                 "+compile only)")
    if parsed.get("sdpa", "flash") not in KERNELS:
        sys.exit(f"error: side {side!r}: +sdpa= takes one of {', '.join(KERNELS)}")
    return base, parsed


def _random_batch(args: argparse.Namespace, size: int) -> dict[str, torch.Tensor]:
    """The same batch for every side, as the loader hands it over: uint8 images (B, 3, S, S), labels (B,)."""
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (args.batch, 3, size, size), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, args.classes, (args.batch,), generator=g)
    batch = {"image": images, "label": labels, "skipped": torch.zeros(args.batch, dtype=torch.long)}
    if torch.cuda.is_available():
        batch = {k: v.pin_memory() for k, v in batch.items()}
    return batch


def _vitx_trainer(args: argparse.Namespace, objective: str, out: str, compile: bool = False):
    """A vitx run of `objective` on args.model, stepped by hand with the benchmark's batch."""
    return build_trainer({"model": args.model, "objective": objective, "batch_size": args.batch,
                          "data": f"embedded:shapes(classes={args.classes})", "steps": 10**6, "warmup_steps": 10,
                          "output_dir": out, "log_with": "none", "eval_samples": 0, "watch_every": 0,
                          "precision": args.precision, "compile": compile,
                          "workers": 0})  # stepped by hand on its own batches: no loader, all the cores compute


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


def _compiled(model: torch.nn.Module, mode: str) -> torch.nn.Module:
    return torch.compile(model, mode=mode or None)


def vitx_side(args: argparse.Namespace, changes: dict[str, str], batch: dict, out: str) -> Callable[[], None]:
    if changes.get("compile"):
        sys.exit("error: vitx's --compile has no modes here (the runner compiles with inductor's default)")
    trainer = _vitx_trainer(args, "supervised(head='linear')", out, "compile" in changes)

    def step() -> None:
        trainer.step([batch])
        trainer.pop_metrics()  # the runner does this at log steps; here at every step (worst case)

    return step


def plain_side(args: argparse.Namespace, changes: dict[str, str], batch: dict, spec, device: torch.device
               ) -> tuple[Callable[[], None], torch.nn.Module]:
    """The hand-written loop with `changes`; returns the step and its (uncompiled) model."""
    import timm

    torch.manual_seed(0)
    model = timm.create_model(spec.timm_arch, num_classes=args.classes, **{
        k: v for k, v in spec.timm_kwargs().items() if k != "num_classes"}).to(device)
    mean = torch.full((1, 3, 1, 1), 0.5, device=device)
    bf16w = "bf16w" in changes
    cuda = device.type == "cuda"
    if bf16w:  # bf16 weights the model runs; fp32 master weights the optimiser steps (mixed precision by hand)
        model = model.to(torch.bfloat16)
        master = [p.detach().float().clone().requires_grad_(True) for p in model.parameters()]
        for m in master:  # fp32 gradients, kept: the bf16 ones are copied in at each step
            m.grad = torch.zeros_like(m)
        params = master
    else:
        params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1,
                            **({"fused": True} if cuda and "unfused" not in changes else {}))
    forward = _compiled(model, changes["compile"]) if "compile" in changes else model
    graphs = changes.get("compile") in ("reduce-overhead", "max-autotune")
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16" and not bf16w)
    kernel = changes.get("sdpa")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    attention = (lambda: sdpa_kernel(backends[kernel])) if kernel else contextlib.nullcontext
    sync = "nosync" not in changes
    total = torch.zeros((), device=device)

    def step() -> None:
        nonlocal total
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        x = batch["image"].to(device, non_blocking=True).float().div_(255).sub_(mean).div_(mean)
        y = batch["label"].to(device, non_blocking=True)
        with amp, attention():
            loss = F.cross_entropy(forward(x.to(torch.bfloat16) if bf16w else x).float(), y)
        loss.backward()
        if bf16w:
            torch._foreach_copy_([m.grad for m in master], [p.grad for p in model.parameters()])  # bf16 → fp32
            model.zero_grad(set_to_none=True)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if bf16w:
            with torch.no_grad():
                torch._foreach_copy_(list(model.parameters()), master)  # fp32 → bf16
        else:
            opt.zero_grad(set_to_none=True)
        if sync:
            loss.item()  # a user's per-step logging: the host waits for the device
        else:
            total = total + loss.detach()

    return step, model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="vit-ti/16")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--precision", default="no", choices=["no", "bf16"], help="bf16: autocast on every side")
    ap.add_argument("--sides", default="vitx,plain", help="comma-separated sides (see above)")
    ap.add_argument("--steps", type=int, default=6, help="timed steps per side per round")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (vitx, plain, vitx, ...)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per side first (compilation happens here)")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--peak-tflops", type=float, default=None,
                    help="the device's peak, where no datasheet applies (instead of measuring a matmul's rate)")
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
    sides = list(dict.fromkeys(s.strip() for s in args.sides.split(",")))  # each once
    parsed = {side: parse_side(side) for side in sides}

    with tempfile.TemporaryDirectory() as out:
        steps: dict[str, Callable[[], None]] = {}
        probe = None
        for i, side in enumerate(sides):
            base, changes = parsed[side]
            if base == "vitx":
                steps[side] = vitx_side(args, changes, batch, f"{out}/{i}")
            else:
                steps[side], model = plain_side(args, changes, batch, spec, device)
                if probe is None and "bf16w" not in changes:  # fp32 weights: the FLOPs as the others run them
                    probe = model
        if probe is None:  # the FLOPs of the architecture's forward and backward, with the benchmark's head
            import timm

            probe = timm.create_model(spec.timm_arch, num_classes=args.classes, **{
                k: v for k, v in spec.timm_kwargs().items() if k != "num_classes"}).to(device)
        amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")
        x, y = torch.randn(args.batch, 3, size, size, device=device), batch["label"].to(device)

        def forward_backward() -> None:
            with amp:
                loss = F.cross_entropy(probe(x), y)
            loss.backward()

        flops = count_flops(forward_backward, device) / args.batch
        probe.zero_grad(set_to_none=True)

        for side in list(sides):  # warm-up (and compilation); a side this machine cannot run is said and left out
            t = time.perf_counter()
            try:
                for _ in range(args.warmup):
                    steps[side]()
                synchronize(device)
            except (RuntimeError, NotImplementedError) as exc:
                print(f"{side}: failed, left out: {type(exc).__name__}: {str(exc).strip().splitlines()[0]}", flush=True)
                sides.remove(side)
                continue
            print(f"{side}: {args.warmup} warm-up steps in {time.perf_counter() - t:.1f} s", flush=True)
        times: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(args.rounds):
            for side in sides:
                for _ in range(args.steps):
                    synchronize(device)
                    t = time.perf_counter()
                    steps[side]()
                    synchronize(device)
                    times[side].append(time.perf_counter() - t)

    peak, source = device_peak(device, args.precision)
    if args.peak_tflops:
        peak, source = args.peak_tflops * 1e12, "given with --peak-tflops"
    elif peak is None:
        dtype = torch.bfloat16 if args.precision == "bf16" and device.type == "cuda" else torch.float32
        peak, source = matmul_peak(device, dtype), f"measured {dtype} matmul, {device}"
    ips = {k: args.batch / statistics.median(v) for k, v in times.items()}
    what = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"model {args.model} at {size}px, batch {args.batch}, precision {args.precision}, {what}, torch "
          f"{torch.__version__}; {args.rounds}×{args.steps} timed steps per side (median)")
    print(f"peak: {peak / 1e12:.3f} TFLOP/s ({source}); FLOPs per image (fwd+bwd): {flops / 1e9:.2f} GFLOP")
    width = max(14, *(len(s) for s in sides))
    for side in sides:
        achieved = ips[side] * flops
        print(f"{side:>{width}}: {ips[side]:9.2f} img/s  {achieved / 1e12:8.3f} TFLOP/s  MFU {achieved / peak:6.1%}")
    if "plain" in ips:
        for side in sides:
            if side != "plain":
                print(f"ratio {side} / plain: {ips[side] / ips['plain']:.3f}")


if __name__ == "__main__":
    main()

"""Benchmark (not a test): the vitx training step against a plain timm + PyTorch loop, in one run.

Same model, batch, data, optimiser and gradient clipping on both sides. Prints images/s for each, their ratio,
the FLOPs per image (forward + backward, counted by torch's FlopCounterMode) and the achieved FLOP/s as a
fraction of this machine's measured fp32 matmul peak.

    python benchmarks/train_step.py                      # vit-ti/16 at 224, batch 32
    python benchmarks/train_step.py --model vit-micro/4 --batch 128
    python benchmarks/train_step.py --objectives "supervised,mpp,mae(decoder_dim=192,decoder_depth=1,decoder_heads=3)"
"""
from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time

import timm
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from vitx.registry import BACKBONES
from vitx.runner import Trainer, build, resolve_config


def matmul_peak(n: int = 2048, repeats: int = 12) -> float:
    """Best sustained fp32 matmul rate in FLOP/s (2n³ per product)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    best = 0.0
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(4):
            a @ b
        best = max(best, 4 * 2 * n**3 / (time.perf_counter() - t))
    return best


def _random_batch(args: argparse.Namespace, size: int) -> dict[str, torch.Tensor]:
    """The same in-memory batch for every side: images (B, 3, S, S), labels (B,)."""
    g = torch.Generator().manual_seed(0)
    images = torch.randn(args.batch, 3, size, size, generator=g)
    labels = torch.randint(0, args.classes, (args.batch,), generator=g)
    return {"image": images, "label": labels, "skipped": torch.zeros(args.batch, dtype=torch.long)}


def _vitx_trainer(args: argparse.Namespace, objective: str, out: str) -> Trainer:
    """A vitx run of `objective` on args.model, stepped by hand with the benchmark's batch."""
    cfg, _ = resolve_config({"model": args.model, "objective": objective, "batch_size": args.batch,
                             "data": f"embedded:shapes(classes={args.classes})", "steps": 10**6,
                             "warmup_steps": 10, "output_dir": out, "log_with": "none", "eval_samples": 0},
                            resume=False)
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
    ap.add_argument("--steps", type=int, default=6, help="timed steps per side per round")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (vitx, plain, vitx, ...)")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--objectives", default="",
                    help="comma-separated objectives to time against supervised instead (e.g. supervised,mpp)")
    args = ap.parse_args()
    if args.objectives:
        compare_objectives(args)
        return

    spec = BACKBONES.get(args.model).obj
    size = spec.img_size
    batch = _random_batch(args, size)
    images, labels = batch["image"], batch["label"]

    # vitx: the runner's own step (accumulate context, clipping, schedule, metric bookkeeping)
    with tempfile.TemporaryDirectory() as out:
        trainer = _vitx_trainer(args, "supervised(head='linear')", out)

        def vitx_step() -> None:
            trainer.step([batch])
            trainer.pop_metrics()  # what the runner does at every log step; here at every step (worst case)

        # plain: a hand-written timm + PyTorch loop on the same architecture
        torch.manual_seed(0)
        plain = timm.create_model(spec.timm_arch, num_classes=args.classes, **{
            k: v for k, v in spec.timm_kwargs().items() if k != "num_classes"})
        opt = torch.optim.AdamW(plain.parameters(), lr=1e-3, weight_decay=0.1)

        def plain_step() -> None:
            loss = F.cross_entropy(plain(images), labels)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(plain.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss.item()

        with FlopCounterMode(display=False) as counter:
            F.cross_entropy(plain(images), labels).backward()
        opt.zero_grad(set_to_none=True)
        flops_per_image = counter.get_total_flops() / args.batch

        times: dict[str, list[float]] = {"vitx": [], "plain": []}
        for fn in (vitx_step, plain_step):  # warm-up
            fn(), fn()
        for _ in range(args.rounds):
            for name, fn in (("vitx", vitx_step), ("plain", plain_step)):
                for _ in range(args.steps):
                    t = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - t)

    peak = matmul_peak()
    ips = {k: args.batch / statistics.median(v) for k, v in times.items()}
    print(f"model {args.model} at {size}px, batch {args.batch}, {torch.get_num_threads()} threads, "
          f"{args.rounds}×{args.steps} timed steps per side (median)")
    print(f"fp32 matmul peak: {peak / 1e9:.1f} GFLOP/s")
    print(f"FLOPs per image (fwd+bwd): {flops_per_image / 1e9:.2f} GFLOP")
    for name in ("plain", "vitx"):
        achieved = ips[name] * flops_per_image
        print(f"{name:>5}: {ips[name]:7.2f} img/s  {achieved / 1e9:6.1f} GFLOP/s  {achieved / peak:6.1%} of peak")
    print(f"ratio vitx / plain: {ips['vitx'] / ips['plain']:.3f}")


if __name__ == "__main__":
    main()

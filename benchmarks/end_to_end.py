"""End to end with a negligible model (not a test): `vitx pretrain` against the plain torchvision + timm loop a
user would write, on the same JPEGs, alternated in one run; and the same for DINO's multi-crop views.

    python benchmarks/end_to_end.py [--folder DIR] [--rounds 2] [--steps 24] [--batch 64] [--workers 1]

Both sides train the same negligible timm ViT (patch 16 at 224 px, width 16, one block: the step costs next to
nothing, so the figure is the input pipeline's and the loop's) with AdamW, from the same folder of 600
photo-like 500×375 JPEGs (benchmarks/input_pipeline.py writes it):
  vitx            `vitx pretrain` in this process: its loader (uint8 decode and crop in the worker, normalised in
                  the main process), its loop and its bookkeeping; img/s from metrics.jsonl after a warm-up log
  plain           torchvision `ImageFolder` + `RandomResizedCrop(224)` + flip + `ToTensor` + `Normalize`,
                  `DataLoader(num_workers=W, shuffle=True)`, the same model, AdamW, timed after the same warm-up
  vitx DINO views `vitx pretrain --objective 'dino(local_crops=8, ...)'` (2 × 224 + 8 × 96 crops per image,
                  DINO's augmentation) with a negligible head as well (DINO_NEGLIGIBLE: DINO's own 2048 → 256 →
                  65,536 head costs about 1 s a step on one CPU thread, which would measure the head, not the
                  input): img/s ÷ the single crop's is the issue-37 figure
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

NEGLIGIBLE = dict(img_size=224, patch_size=16, embed_dim=16, depth=1, num_heads=1)
DINO_NEGLIGIBLE = "dino(local_crops=8, out_dim=256, hidden_dim=32, bottleneck_dim=16)"  # DINO's views, a tiny head


def negligible(num_classes: int = 0) -> torch.nn.Module:
    import timm

    return timm.models.vision_transformer.VisionTransformer(num_classes=num_classes, **NEGLIGIBLE)


def vitx_rate(folder: Path, steps: int, batch: int, workers: int, objective: str = "supervised") -> float:
    """img/s of `vitx pretrain` over its second half (the first half warms the workers up)."""
    import vitx
    from vitx.runner import pretrain

    if "negligible" not in vitx.BACKBONES:
        vitx.register_backbone("negligible")(lambda **overrides: negligible())
    with tempfile.TemporaryDirectory() as out:
        pretrain({"model": "negligible", "objective": objective, "data": str(folder), "image_size": 224,
                  "batch_size": batch, "steps": steps, "warmup_steps": 1, "log_every": steps // 2,
                  "save_every": steps, "eval_samples": 0, "workers": workers, "crop_scale": 0.08,
                  "log_with": "none", "curves": False, "quiet": True, "output_dir": f"{out}/run"})
        rows = [json.loads(line) for line in (Path(out) / "run" / "metrics.jsonl").read_text().splitlines()]
    return rows[-1]["images_per_s"]


def plain_rate(folder: Path, steps: int, batch: int, workers: int) -> float:
    """img/s of the plain loop over its second half."""
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms

    tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                             transforms.ToTensor(), transforms.Normalize((0.5,) * 3, (0.5,) * 3)])
    data = datasets.ImageFolder(str(folder), tf)
    loader = DataLoader(data, batch_size=batch, shuffle=True, num_workers=workers, drop_last=True,
                        persistent_workers=workers > 0)
    model = negligible(len(data.classes))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    done, start, it = 0, 0.0, iter(loader)
    while done < steps:
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            continue
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        done += 1
        if done == steps // 2:
            start = time.perf_counter()
    return (steps - steps // 2) * batch / (time.perf_counter() - start)


def main() -> None:
    from input_pipeline import write_folder

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folder", default="/tmp/vitx-bench-jpegs")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--dino", action=argparse.BooleanOptionalAction, default=True, help="also DINO's views")
    args = ap.parse_args()
    folder = Path(args.folder)
    write_folder(folder, 600)
    torch.set_num_threads(1)
    print(f"{len(list(folder.glob('*/*.jpg')))} JPEGs; {len(os.sched_getaffinity(0))} cores; {args.workers} "
          f"worker(s); batch {args.batch}; torch {torch.__version__}", flush=True)
    rates: dict[str, list[float]] = {"vitx": [], "plain": [], "vitx DINO views": []}
    for r in range(args.rounds):
        rates["vitx"].append(vitx_rate(folder, args.steps, args.batch, args.workers))
        rates["plain"].append(plain_rate(folder, args.steps, args.batch, args.workers))
        if args.dino:
            rates["vitx DINO views"].append(vitx_rate(folder, max(4, args.steps // 4), args.batch, args.workers,
                                                      DINO_NEGLIGIBLE))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.0f} img/s" for k, v in rates.items() if v), flush=True)
    mean = {k: sum(v) / len(v) for k, v in rates.items() if v}
    print(f"vitx ÷ plain: {mean['vitx'] / mean['plain']:.2f}x (goal ≥ 1.3)")
    if args.dino:
        print(f"DINO views ÷ single crop: {mean['vitx DINO views'] / mean['vitx']:.2f}x (goal ≥ 0.5)")


if __name__ == "__main__":
    main()

"""Input pipeline throughput against bare decoding of the same files, in one run.

    python benchmarks/input_pipeline.py [--folder DIR] [--images 600] [--workers 1,15] [--batch 64]
                                        [--decoders pil,torchvision,torchcodec] [--multi-crop 2x224+8x96]

Writes (once) a folder of 500×375 JPEGs at quality 90 in `class/xxx.jpg` layout (photo-like content: smooth
colour fields, occluding discs, sensor noise; ~55 KB each) unless --folder names one, then measures:
  bare PIL decode   `Image.open(f).convert("RGB")` of every file on one core (file reads included), best of 2
  vitx train loader the runner's loader (decode, random-resized crop to --size, flip, uint8 batches) with each
                    worker count, consumed by a negligible model (the batch is only moved to the device)
  --decoders        each named decoder alone on the files' bytes in memory, one core, best of 2: `pil`
                    (Image.open + convert("RGB")), `torchvision` (torchvision.io.decode_jpeg, deprecated since
                    0.29), `torchcodec` (torchcodec.decoders.decode_jpeg, its replacement; when installed)
  --multi-crop      the loader again, making an objective's views instead of one crop: N×S+M×s crops per image
                    (default DINO's 2 global 224px + 8 local 96px, with its flip, colour jitter, grayscale, blur
                    and solarisation: the vitx-dino plugin's views); img/s counts images, not crops, and the
                    ratio to the single crop's is the issue-37 figure (goal ≥ 0.5). On a GPU the workers make
                    the geometry and the device the photometry (data/photometry.py), inside the timed loop
  photometry        the photometry alone on one micro-batch of each view (--batch crops): ms on the CPU as a
                    worker runs it (in cache-sized chunks, large crops sample by sample) and, on a GPU,
                    batched on the device
The ratio vitx(1 worker) / bare PIL is the issue-13 figure (target ≥ 0.6).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageFilter

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def write_folder(root: Path, count: int) -> None:
    """`count` photo-like JPEGs under root/class{0,1}/ (those already there are kept), made in parallel on every
    core: each image from its own generator (seed [0, i]), so the files are the same whatever the core count."""
    from multiprocessing import Pool

    missing = [i for i in range(count) if not _jpeg_path(root, i).exists()]
    if len(missing) < 16:
        for i in missing:
            _write_jpeg(root, i)
        return
    with Pool(min(len(missing), os.cpu_count() or 1)) as pool:
        pool.starmap(_write_jpeg, [(root, i) for i in missing], chunksize=8)


def _jpeg_path(root: Path, i: int) -> Path:
    return root / f"class{i % 2}" / f"{i:05d}.jpg"


def _write_jpeg(root: Path, i: int) -> None:
    """Image i: smooth colour fields, 30 occluding discs, sensor noise, a slight blur; 500×375, quality 90."""
    rng = np.random.default_rng([0, i])
    yy, xx = np.mgrid[:375, :500]
    path = _jpeg_path(root, i)
    path.parent.mkdir(parents=True, exist_ok=True)
    base = Image.fromarray((rng.random((17, 22, 3)) * 255).astype(np.uint8)).resize((500, 375), Image.BICUBIC)
    arr = np.asarray(base).astype(np.float32)
    for _ in range(30):
        cx, cy, r = rng.uniform(0, 500), rng.uniform(0, 375), rng.uniform(5, 80)
        disc = (xx - cx) ** 2 + (yy - cy) ** 2 < r * r
        arr[disc] = arr[disc] * 0.3 + rng.uniform(0, 255, 3) * 0.7
    arr += rng.normal(0, 12, arr.shape)
    img = Image.fromarray(arr.clip(0, 255).astype(np.uint8)).filter(ImageFilter.GaussianBlur(0.6))
    tmp = path.with_suffix(".tmp.jpg")
    img.save(tmp, quality=90)
    tmp.replace(path)  # whole or absent: a run cut short leaves no half-written file behind


def bare_pil(files: list[Path]) -> float:
    best = 0.0
    for _ in range(2):
        start = time.perf_counter()
        for f in files:
            with Image.open(f) as img:
                img.convert("RGB")
        best = max(best, len(files) / (time.perf_counter() - start))
    return best


def _decoder(name: str):
    """bytes → (3, H, W) uint8 by one library, for `--decoders`."""
    import io
    import warnings

    if name == "pil":
        return lambda data: torch.from_numpy(np.array(Image.open(io.BytesIO(data)).convert("RGB"))).permute(2, 0, 1)
    if name == "torchvision":
        from torchvision.io import ImageReadMode, decode_jpeg

        warnings.filterwarnings("ignore", "The image decoding", DeprecationWarning)  # measured, not used here
        return lambda data: decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)
    if name == "torchcodec":
        from torchcodec.decoders import decode_jpeg

        return lambda data: decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode="RGB")
    raise SystemExit(f"--decoders: unknown decoder '{name}' (pil, torchvision, torchcodec)")


def bare_decoder(files: list[Path], name: str) -> float:
    decode = _decoder(name)
    data = [f.read_bytes() for f in files]
    best = 0.0
    for _ in range(2):
        start = time.perf_counter()
        for d in data:
            decode(d)
        best = max(best, len(data) / (time.perf_counter() - start))
    return best


def dino_views(spec: str) -> list:
    """`2x224+6x96` → the vitx-dino plugin's views (DINO's augmentation), expanded: one entry per crop."""
    from vitx.data.views import expand
    from vitx_dino import dino_views as views

    (n_global, big), (n_local, small) = [tuple(int(v) for v in part.split("x")) for part in spec.split("+")]
    return expand(views(big, small, n_global, n_local), big)


def vitx_loader(folder: Path, workers: int, batch: int, size: int, batches: int, device: torch.device,
                views: list | None = None) -> float:
    from vitx.data import Preprocess, open_source, train_loader
    from vitx.data.photometry import Params, apply

    source = open_source(str(folder), "train")
    loader = train_loader(source, Preprocess(image_size=size, crop_scale=0.08), global_micro_batch=batch, rank=0,
                          world=1, seed=0, start_micro_step=0, workers=workers, skip_corrupt=False,
                          pin=device.type == "cuda", **({"views": views} if views else {}))
    it = iter(loader)
    for _ in range(2 + workers):  # warm-up: start the workers, fill the prefetch queue once
        next(it)
    # the rate over the second half only: the first drains the batches the workers queued before the clock
    # started (up to 2 per worker), which would otherwise count as made in no time
    stamps = []
    for _ in range(batches):
        b = next(it)
        crops = [c.to(device, non_blocking=True) for c in (b["views"] if views else [b["image"]])]
        if "photometry" in b:  # a GPU run: the colours are made on the device, as the runner does
            crops = [apply(c, Params(**p)) for c, p in zip(crops, b["photometry"])]
        x = crops[0]  # (B, 3, S, S) uint8: the negligible model
        if device.type == "cuda":
            torch.cuda.synchronize()
        stamps.append(time.perf_counter())
    half = batches // 2
    rate = (batches - 1 - half) * batch / (stamps[-1] - stamps[half])
    assert x.dtype == torch.uint8
    del it, loader
    return rate


def photometry_ms(views: list, batch: int, device: torch.device) -> float:
    """ms for the photometry of one micro-batch of every view (uint8 crops of a photo-like image), as the
    run does it on `device`: in cache-sized chunks on a CPU, batched on a GPU; best of 3."""
    from vitx.data.photometry import Params, apply, draw

    rng = np.random.default_rng(0)
    work = []
    for v, view in enumerate(views):
        base = torch.from_numpy((rng.random((batch, 3, 8, 8)) * 255).astype(np.float32))
        crops = torch.nn.functional.interpolate(base, size=(view.size, view.size), mode="bicubic")
        crops = crops.clamp(0, 255).to(torch.uint8).to(device)  # (B, 3, S, S) smooth colour fields
        # the parameters stay on the host, as the loader hands them (apply reads them there, waits for nothing)
        params = Params.stack([draw(view, np.random.default_rng([v, j])) for j in range(batch)])
        work.append((crops, params))
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for crops, params in work:
            apply(crops, params)
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folder", default="/tmp/vitx-bench-jpegs")
    parser.add_argument("--images", type=int, default=600)
    parser.add_argument("--workers", default=f"1,{max(1, len(os.sched_getaffinity(0)) - 1)}")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batches", type=int, default=0,
                        help="batches per worker count, the second half timed (default: 2 passes, ≥ 8 per worker)")
    parser.add_argument("--multi-crop", default="2x224+8x96", help="views per image for the multi-crop line ('': skip)")
    parser.add_argument("--decoders", default="", help="also time these decoders alone: pil,torchvision,torchcodec")
    args = parser.parse_args()
    folder = Path(args.folder)
    write_folder(folder, args.images)
    files = sorted(folder.glob("*/*.jpg"))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.set_num_threads(1)
    print(f"{len(files)} JPEGs in {folder} (mean {np.mean([f.stat().st_size for f in files]) / 1e3:.0f} KB); "
          f"{len(os.sched_getaffinity(0))} cores; device {device}; torch {torch.__version__}", flush=True)
    pil = bare_pil(files)
    print(f"bare PIL decode, one core: {pil:.0f} img/s", flush=True)
    for name in [v for v in args.decoders.split(",") if v]:
        rate = bare_decoder(files, name)
        print(f"decoder {name} alone, bytes in memory, one core: {rate:.0f} img/s = {rate / pil:.2f}x bare PIL",
              flush=True)
    if args.multi_crop:
        views = dino_views(args.multi_crop)
        print(f"photometry of one micro-batch of {args.batch} per view ({args.multi_crop}): "
              f"CPU {photometry_ms(views, args.batch, torch.device('cpu')):.0f} ms (in chunks, one core)"
              + (f", GPU {photometry_ms(views, args.batch, device):.1f} ms (batched)" if device.type == "cuda" else ""),
              flush=True)
    for w in [int(v) for v in args.workers.split(",")]:
        batches = args.batches or max(8, 8 * w, 2 * len(files) // args.batch)
        single = vitx_loader(folder, w, args.batch, args.size, batches, device)
        print(f"vitx train loader, {w} worker(s), {args.size}px: {single:.0f} img/s = {single / pil:.2f}x bare PIL "
              f"(per worker {single / w / pil:.2f}x)", flush=True)
        if args.multi_crop:
            rate = vitx_loader(folder, w, args.batch, args.size, batches, device, dino_views(args.multi_crop))
            print(f"vitx train loader, {w} worker(s), multi-crop {args.multi_crop} (DINO's augmentation): "
                  f"{rate:.0f} img/s = {rate / w:.0f} per worker = {rate / single:.2f}x the single crop", flush=True)


if __name__ == "__main__":
    main()

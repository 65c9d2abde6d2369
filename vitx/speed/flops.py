"""What a training step computes and what the device could: FLOPs counted by torch, and the device's dense peak.

MFU (model FLOP utilisation) is achieved FLOP/s over the peak. The FLOPs are counted, not estimated: torch's
`FlopCounterMode` over one forward and backward, every matmul, convolution and attention kernel it registers. On a
GPU the attention kernels the run uses are counted as they are (flash, memory-efficient, cuDNN: registered); on a
CPU its fused attention kernel is not registered, so attention is counted in its math form there. A masked
attention (packed crops: `backbones/packing.py`) is counted whole, masked pairs included: compare such runs by
images per second. The peak is the datasheet's dense rate (no sparsity) for the GPUs in `DATASHEET`; elsewhere it
is unknown unless given (`vitx bench --peak-tflops`) or measured (`matmul_peak`, what benchmarks/train_step.py
does on a CPU)."""
from __future__ import annotations

import contextlib
import time
from typing import Callable

import torch

# dense TFLOP/s without sparsity, by a substring of torch.cuda.get_device_name: (bf16/fp16, tf32, fp32)
DATASHEET = {
    "H100 SXM": (989, 495, 67), "H100 80GB HBM3": (989, 495, 67), "H100 PCIe": (756, 378, 51),
    "H100 NVL": (835, 418, 60), "H200": (989, 495, 67), "A100": (312, 156, 19.5), "L40S": (362, 183, 91.6),
    "A10G": (125, 62.5, 31.2), "RTX 4090": (165, 82.6, 82.6),
}


def count_flops(run: Callable[[], object], device: torch.device) -> int:
    """FLOPs of `run()` (a forward and backward) as torch's FlopCounterMode counts them; attention in its math form
    off a GPU (the CPU's fused kernel is not counted)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    math = sdpa_kernel(SDPBackend.MATH) if device.type != "cuda" else contextlib.nullcontext()
    with FlopCounterMode(display=False) as counter, math:
        run()
    return int(counter.get_total_flops())


def device_peak(device: torch.device, precision: str, tf32: bool | None = None) -> tuple[float | None, str]:
    """(dense peak FLOP/s at the run's precision, where it comes from) for a GPU in DATASHEET; (None, why) for
    any other device. `precision` is the run's (bf16 and fp16 run on the half-precision rate); float32 matmuls run
    at the TF32 rate where TF32 is on (`tf32`, default: torch's current setting)."""
    if device.type != "cuda":
        return None, f"unknown for {device.type}"
    name = torch.cuda.get_device_name(device)
    tf32 = torch.backends.cuda.matmul.allow_tf32 if tf32 is None else tf32
    for key, (half, tf32_rate, fp32) in DATASHEET.items():
        if key in name:
            if precision in ("bf16", "fp16"):
                return half * 1e12, f"datasheet dense {precision}, {name}"
            return (tf32_rate if tf32 else fp32) * 1e12, f"datasheet dense {'tf32' if tf32 else 'fp32'}, {name}"
    return None, f"unknown for {name} (not in vitx's table)"


def matmul_peak(device: torch.device = torch.device("cpu"), dtype: torch.dtype = torch.float32,
                n: int = 2048, repeats: int = 12) -> float:
    """The best sustained matmul rate measured here in FLOP/s (2n³ per product; n = 8192 on a GPU): a stand-in
    peak where no datasheet applies."""
    n = 8192 if device.type == "cuda" else n
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    best = 0.0
    for _ in range(repeats):
        synchronize(device)
        t = time.perf_counter()
        for _ in range(4):
            a @ b
        synchronize(device)
        best = max(best, 4 * 2 * n**3 / (time.perf_counter() - t))
    return best


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a GPU's kernels run after the host has moved on)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


__all__ = ["DATASHEET", "count_flops", "device_peak", "matmul_peak", "synchronize"]

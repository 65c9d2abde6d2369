"""How fast a run trains here: `vitx bench` (bench.py: the runner's own step timed on synthetic or given data),
its settings (config.py), and the FLOPs and device peaks behind its MFU (flops.py, which benchmarks/train_step.py
shares)."""
from ..lazy import lazy_exports

__all__ = ["BenchConfig", "Measured", "build_trainer", "count_flops", "device_peak", "matmul_peak", "measure"]
__getattr__, __dir__ = lazy_exports(__name__, {"BenchConfig": ".config", "Measured": ".bench",
                                               "build_trainer": ".bench", "measure": ".bench",
                                               "count_flops": ".flops", "device_peak": ".flops",
                                               "matmul_peak": ".flops"})

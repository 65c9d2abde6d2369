"""A vitx plugin file (`--plugin benchmarks/deterministic_plugin.py`) for the GPU acceptance's exact-resume check:
attention on PyTorch's math kernel and deterministic cuDNN/cuBLAS, so that two runs of the same steps give the
same bits and any difference left is the resume's. Slower; for checks, not for training."""
import os

import torch

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # read when cuBLAS starts: before the first matmul
torch.backends.cuda.enable_flash_sdp(False)  # the fused attention backwards accumulate with atomics
torch.backends.cuda.enable_mem_efficient_sdp(False)
torch.backends.cuda.enable_cudnn_sdp(False)
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False

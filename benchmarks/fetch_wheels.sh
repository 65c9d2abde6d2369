#!/usr/bin/env bash
# Run HERE (with network) before benchmarks/gpu_acceptance.sh is sent to a GPU machine that cannot download:
# the packages vitx's GPU acceptance needs that the device image lacks (datasets, lightly for the MAE and
# SimCLR plugins, deepspeed), as wheels for its Python 3.12 in .whl/ (ignored by git; carry it with the tree).
# Versions are those that run together here; --no-deps everywhere, so every missing dependency is named.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
download=(python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
          --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
          --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl)
"${download[@]}" datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 \
    lightly==1.6.0 hydra-core==1.3.8 omegaconf==2.3.1 \
    hjson pydantic==2.13.4 pydantic-core==2.46.4 annotated-types==0.7.0 typing-inspection==0.4.2
# Published as source only: built here into pure-Python wheels (DeepSpeed without its compiled ops, which it
# builds just in time on the GPU machine when needed; its build imports the torch installed here).
DS_BUILD_OPS=0 python3 -m pip wheel --no-deps --no-build-isolation -w .whl antlr4-python3-runtime==4.9.3 deepspeed==0.19.8
ls -la .whl

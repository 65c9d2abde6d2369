#!/usr/bin/env bash
# The GPU acceptance in one command, on one H100 in under 25 minutes (benchmarks/gpu_acceptance.py says what it
# runs): installs the wheels carried in .whl/ (made by benchmarks/fetch_wheels.sh) and vitx with its plugins,
# then runs every step under its own time limit. Arguments go to gpu_acceptance.py (--dry-run, --only, ...).
# Results: runs/gpu-acceptance/ (summary.md, summary.json, a log per step), copied to $OUT when it is set.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
if [[ " $* " != *" --dry-run "* ]]; then
    if compgen -G ".whl/*.whl" >/dev/null; then
        timeout 300 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl
        export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
    fi
    timeout 300 python3 -m pip install -q --no-index --no-deps --no-build-isolation \
        -e . -e plugins/vitx-mae -e plugins/vitx-simclr -e plugins/vitx-dino
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
timeout 1500 python3 benchmarks/gpu_acceptance.py "$@"

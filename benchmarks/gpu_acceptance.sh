#!/usr/bin/env bash
# The GPU acceptance as one prepared command per 15-minute loan (benchmarks/gpu_acceptance.py says what each group
# runs): installs the wheels carried in .whl/ (made by benchmarks/fetch_wheels.sh) and vitx with its plugins, then
# runs the group's steps, each under its own limit, all of it ending within 10 minutes (the device tool's limit
# for a command: run it with timeout_s 600). Arguments go to gpu_acceptance.py (--only reproduce, --dry-run, ...).
# Results: runs/gpu-acceptance/ (summary.md, summary.json, a log per step), copied to $OUT when it is set.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
if [[ " $* " != *" --dry-run "* ]] && [[ -d /tmp/site ]] && PYTHONPATH=/tmp/site python3 -c "import vitx_dino, vitx_mae, vitx_simclr, datasets" 2>/dev/null; then
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"  # a warm machine: installed by the call before
    echo "installed before"
elif [[ " $* " != *" --dry-run "* ]]; then
    if compgen -G ".whl/*.whl" >/dev/null; then
        timeout 240 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl
        export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
    fi
    timeout 240 python3 -m pip install -q --no-index --no-deps --no-build-isolation \
        -e . -e plugins/vitx-mae -e plugins/vitx-simclr -e plugins/vitx-dino
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    echo "installed in ${SECONDS} s"
fi
# the steps share what is left of 585 s (a later --deadline given here wins); the outer limit is the last resort
timeout $((595 - SECONDS)) python3 benchmarks/gpu_acceptance.py --deadline $((585 - SECONDS)) "$@"

#!/usr/bin/env bash
# Runs the GPU tests on a machine with an NVIDIA GPU: one prepared call.
# Creates a fresh virtual environment, prints what the machine has, runs `pytest -m gpu`,
# and records a short real recording with `gpulens record --collectors nvml`.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT_DIR="${OUT:-$(mktemp -d)}"
PY="${PYTHON:-python3}"
"$PY" -m venv .venv-gpu
.venv-gpu/bin/python -m pip install --quiet --upgrade pip
.venv-gpu/bin/python -m pip install --quiet -e '.[dev]'
nvidia-smi -L || true
.venv-gpu/bin/gpulens doctor | tee "$OUT_DIR/doctor.txt"
.venv-gpu/bin/python -m pytest -m gpu tests/gpu -v -p no:cacheprovider 2>&1 | tee "$OUT_DIR/pytest-gpu.txt"
GPULENS_COLLECT_COLLECTORS=nvml .venv-gpu/bin/gpulens record --data-dir "$OUT_DIR/store" \
  --duration 20 2>&1 | tee "$OUT_DIR/record.txt"
.venv-gpu/bin/gpulens query --data-dir "$OUT_DIR/store" \
  "SELECT gpu_model, count(*) n, avg(gpu_util_ratio) duty, avg(sm_active_ratio) sm,
          avg(tensor_active_ratio) tensor, avg(power_watts) w FROM gpu GROUP BY 1" \
  | tee "$OUT_DIR/query.txt"

#!/usr/bin/env bash
# The GPU check, one prepared call on a machine with an NVIDIA GPU and no network:
#   bash tests/gpu/run_on_gpu.sh          (outputs under $OUT when set, else a temp dir)
# Uses the machine's python3 (torch, nvidia-ml-py, pyarrow, psutil... installed) with
# PYTHONPATH=src; duckdb and orjson come from wheels in .whl/ when present (no pip from the
# network). Steps: GPUs and driver; `pytest -m gpu tests/gpu`; about 80 s of `gpulens agent`
# (or `gpulens record` where fastapi/uvicorn are missing) with the nvml collector while a bf16
# matmul loop and a data-starved loop run, scraping /metrics during each (states, useful
# work), then a bf16 loop tracked by gpulens.torch into the agent's store under GPULENS_JOB;
# SIGTERM; then what gpulens measured per workload, and the tracked job's report (training
# figures, MFU, telemetry joined on the job). Before the recording: eager against torch.compile
# of one model served through gpulens.torch.inference at four loads, and the report's serving
# section (latency per engine, engine choice by load). Total about 6 minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT_DIR="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT_DIR"
PY=python3
export PYTHONPATH=src
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -2
  export PYTHONPATH="src:/tmp/site"
fi
status=0

echo "== GPUs and driver"
{ nvidia-smi -L; nvidia-smi --query-gpu=index,name,driver_version,memory.total,power.limit \
    --format=csv; "$PY" -c 'import pynvml, torch; print("nvidia-ml-py", pynvml.__version__ if hasattr(pynvml, "__version__") else "?", "torch", torch.__version__, "cuda", torch.version.cuda)'; } \
  2>&1 | tee "$OUT_DIR/gpus.txt"

echo "== pytest -m gpu"
timeout 240 "$PY" -m pytest -m gpu tests/gpu -v -p no:cacheprovider -rs 2>&1 \
  | tee "$OUT_DIR/pytest-gpu.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "== serving latency: eager against torch.compile of one model (gpulens.torch.inference)"
SERVE="$OUT_DIR/serve-store"
rm -rf "$SERVE"
timeout 240 "$PY" - "$SERVE" <<'PYEOF' 2>&1 | tee "$OUT_DIR/serving.txt"
import sys, time, torch
import gpulens.torch as gt
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096), torch.nn.GELU(),
    torch.nn.Linear(4096, 1024)).to("cuda:0", torch.float16).eval()
x = torch.randn(64, 1024, device="cuda:0", dtype=torch.float16)
for engine in ("eager", "compile"):
    infer = gt.inference(model, job="svc-gpu", engine=engine, data_dir=sys.argv[1], interval_s=1.0)
    with torch.no_grad():
        for _ in range(100):  # warm-up (compiles)
            infer(x)
        for qps in (100, 400, 1600, None):  # offered load per 3 s, None: back to back
            end = time.monotonic() + 3
            while time.monotonic() < end:
                infer(x)
                if qps:
                    time.sleep(1 / qps)
            time.sleep(1.1)  # a window of its own per load
    infer.close()
    print(engine, "->", infer.engine, infer.fallback_reason or "", infer.calls, "calls")
PYEOF
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
"$PY" -m gpulens report --data-dir "$SERVE" --job svc-gpu --format json \
  >"$OUT_DIR/report-serving.json" || status=1
"$PY" -m gpulens report --data-dir "$SERVE" --job svc-gpu | sed -n '/^Serving/,/^$/p' \
  | tee -a "$OUT_DIR/serving.txt"

echo "== 60 s recording with two workloads (the agent when its web deps import, else record)"
DATA="$OUT_DIR/store"
WL="$OUT_DIR/workloads.jsonl"
rm -rf "$DATA" "$WL"
PORT=19477
if "$PY" -c 'import fastapi, uvicorn, jinja2, plotly' 2>/dev/null; then
  GPULENS_COLLECT_COLLECTORS=nvml,host GPULENS_COLLECT_INTERVAL_SECONDS=1 \
    timeout -s TERM 110 "$PY" -m gpulens agent --data-dir "$DATA" --listen "127.0.0.1:$PORT" \
    >"$OUT_DIR/record.txt" 2>&1 &
  AGENT=1
else
  GPULENS_COLLECT_COLLECTORS=nvml GPULENS_COLLECT_INTERVAL_SECONDS=1 \
    timeout 120 "$PY" -m gpulens record --data-dir "$DATA" --duration 90 \
    >"$OUT_DIR/record.txt" 2>&1 &
  AGENT=0
fi
REC=$!
sleep 4
scrape() {  # the agent's /metrics while a workload runs
  [ "$AGENT" -eq 1 ] || return 0
  sleep "$1"
  "$PY" - "$PORT" "$OUT_DIR/metrics-$2.txt" <<'PYEOF'
import sys, urllib.request
port, path = sys.argv[1], sys.argv[2]
text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
open(path, "w").write(text)
for line in text.splitlines():
    if line.startswith(("gpulens_gpu_state", "gpulens_useful_work_ratio")) and not line.endswith(" 0.0"):
        print(line)
PYEOF
}
NGPU=$(nvidia-smi -L | grep -c '^GPU ' || true)
if [ "${NGPU:-1}" -ge 2 ]; then  # side by side on two GPUs, ~50 s each
  CUDA_VISIBLE_DEVICES=0 timeout 70 "$PY" tests/gpu/workload.py matmul 48 "$WL" &
  W1=$!
  CUDA_VISIBLE_DEVICES=1 timeout 70 "$PY" tests/gpu/workload.py starved 48 "$WL" &
  W2=$!
  scrape 40 both
  wait "$W1" "$W2"
else  # one GPU: one after the other, so each has the GPU's counters to itself
  CUDA_VISIBLE_DEVICES=0 timeout 40 "$PY" tests/gpu/workload.py matmul 24 "$WL" &
  scrape 20 matmul
  wait
  CUDA_VISIBLE_DEVICES=0 timeout 40 "$PY" tests/gpu/workload.py starved 24 "$WL" &
  scrape 20 starved
  wait
fi 2>&1 | tee "$OUT_DIR/workloads.txt"
# gpulens.torch inside a training loop, writing into the agent's store; GPULENS_JOB in the
# environment the process starts with is how the agent attributes its GPU time to that job
GPULENS_JOB=torch-tracked CUDA_VISIBLE_DEVICES=0 timeout 40 "$PY" tests/gpu/workload.py \
  tracked 20 "$WL" "$DATA" 2>&1 | tee -a "$OUT_DIR/workloads.txt"
if [ "$AGENT" -eq 1 ]; then
  kill -TERM "$REC" 2>/dev/null
fi
wait "$REC"
rc=$?
[ "$rc" -eq 0 ] || [ "$AGENT" -eq 1 -a "$rc" -eq 124 ] || status=1
cat "$OUT_DIR/record.txt"

echo "== what gpulens measured per workload"
"$PY" -m gpulens query --data-dir "$DATA" --format csv \
  "SELECT epoch_ns(ts) AS ts_ns, * FROM gpu ORDER BY ts" >"$OUT_DIR/gpu.csv" || status=1
"$PY" -m gpulens query --data-dir "$DATA" --format csv \
  "SELECT epoch_ns(ts) AS ts_ns, * FROM process ORDER BY ts" >"$OUT_DIR/process.csv" || status=1
"$PY" -m gpulens query --data-dir "$DATA" --format csv \
  "SELECT event, message FROM event" | head -20 | tee "$OUT_DIR/events.csv"
"$PY" tests/gpu/summarize.py "$WL" "$OUT_DIR/gpu.csv" "$OUT_DIR/process.csv" \
  | tee "$OUT_DIR/summary.md" || status=1
echo "== the tracked job: app readings and telemetry joined on the job"
"$PY" -m gpulens query --data-dir "$DATA" --format csv \
  "SELECT epoch_ns(ts) AS ts_ns, * FROM app ORDER BY ts" >"$OUT_DIR/app.csv" || status=1
"$PY" -m gpulens report --data-dir "$DATA" --job torch-tracked --step 10 \
  | tee "$OUT_DIR/report-torch-tracked.txt" || status=1
"$PY" -m gpulens report --data-dir "$DATA" --job torch-tracked --step 10 --format json \
  >"$OUT_DIR/report-torch-tracked.json" || status=1
"$PY" - "$OUT_DIR/report-torch-tracked.json" <<'PYEOF' || status=1
import json, sys
doc = json.load(open(sys.argv[1]))
[job] = doc["training"]
print(f"tracked job: {job['steps']} steps, MFU {job['mfu']}, data wait {job['data_wait_ratio']}, "
      f"telemetry joined: {job['telemetry']}, GPUs in the report: {len(doc['gpus'])}")
assert job["telemetry"], "the agent's attribution did not carry the job"
assert job["mfu"] and 0 < job["mfu"] <= 1, job["mfu"]
PYEOF
echo "outputs in $OUT_DIR"
exit "$status"

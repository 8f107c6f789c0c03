#!/usr/bin/env bash
# The multi-GPU checks of issue 16, as run on a lent GPU machine (results under benches/results/):
#   1. a TP-shaped process tree holding real memory on every GPU: owned by the family rule, a stranger
#      flagged foreign, stopped with no process and no memory left (tools/multi_gpu_probe.py);
#   2. NVML sampling cost for all GPUs (benches/nvml_sample.py);
#   3. `moe-tui gpus` and the dashboard (120x40, 80x24) while GPUs carry different loads
#      (tools/gpu_load.py: matmul on the even GPUs, memory only on the odd ones);
#   4. the TUI's own cost on the quiet host (benches/tui_overhead.py).
# Usage: benches/gpu_box_check.sh OUTDIR. Never changes a GPU setting.
set -u
out=${1:?usage: gpu_box_check.sh OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
n=$(nvidia-smi -L | wc -l)
even=$(seq -s, 0 2 $((n - 1))); odd=$(seq -s, 1 2 $((n - 1)))
nvidia-smi -L > "$out/gpus.txt"
python3 tools/multi_gpu_probe.py --out "$out" > "$out/probe.txt" 2>&1; echo "probe rc=$?" | tee -a "$out/probe.txt"
python3 benches/nvml_sample.py --n 200 --out "$out/nvml_sample.json" > "$out/nvml_sample.txt" 2>&1
python3 tools/gpu_load.py --gpus "$even" --hold-gpus "$odd" --hold-gib 24 --seconds 60 &
load=$!
sleep 20
python3 -m moe_tui gpus >> "$out/gpus.txt" 2>&1
python3 tools/gpu_dashboard_shot.py --out "$out" --wait 8 > "$out/dashboard.txt" 2>&1
wait $load
python3 benches/tui_overhead.py --trials 3 > "$out/tui_overhead.txt" 2>&1
cp benches/results/tui_overhead-* "$out/" 2>/dev/null
echo done

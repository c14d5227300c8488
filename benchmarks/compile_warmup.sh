#!/bin/bash
# First-iteration time of a compiled preset: a run with empty compile caches, then the same config again.
#   bash benchmarks/compile_warmup.sh [task] [iterations]
# torch keeps its compile caches in TORCHINDUCTOR_CACHE_DIR (syncfree's default: ~/.cache/syncfree/torchinductor);
# this script points it at a fresh folder so that the first run starts cold.
set -euo pipefail
task=${1:-pendulum}
iterations=${2:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TORCHINDUCTOR_CACHE_DIR="$work/inductor" OMP_NUM_THREADS=1
for run in cold warm; do
  start=$(date +%s.%N)
  syncfree train --task "$task" --iterations "$iterations" --log.progress false --log.dir "$work/runs" \
    --log.run_name "$run" > /dev/null 2>&1
  end=$(date +%s.%N)
  python3 - "$work/runs/$run/metrics.jsonl" "$run" "$start" "$end" <<'PY'
import json, sys
path, run, start, end = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
records = [json.loads(line) for line in open(path)]
print(f"{run}: first iteration {records[0]['iteration_seconds']:.1f} s, later iterations "
      f"{sum(r['iteration_seconds'] for r in records[1:]) / max(len(records) - 1, 1):.2f} s each, "
      f"whole command {end - start:.1f} s")
PY
done

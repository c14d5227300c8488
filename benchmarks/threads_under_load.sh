#!/bin/bash
# The CartPole quick start (40 iterations) with the chosen threads (threads=0) and with 2, unloaded and with two
# busy-loop processes on the machine, in alternating rounds. Prints one line per run: wall seconds, start-up
# included.
#   bash benchmarks/threads_under_load.sh [rounds]
set -euo pipefail
rounds=${1:-4}
log_dir=$(mktemp -d)
trap 'rm -rf "$log_dir"' EXIT
run() {
  local start end
  start=$(date +%s.%N)
  syncfree train --iterations 40 --log.progress false --log.dir "$log_dir" --threads "$1" > /dev/null 2>&1
  end=$(date +%s.%N)
  python3 -c "print(f'{$end - $start:.1f}')"
}
for round in $(seq "$rounds"); do
  for threads in 0 2; do echo "round $round unloaded threads=$threads: $(run $threads) s"; done
  python3 -c "while True: pass" & hog1=$!
  python3 -c "while True: pass" & hog2=$!
  for threads in 0 2; do echo "round $round loaded threads=$threads: $(run $threads) s"; done
  kill $hog1 $hog2
done

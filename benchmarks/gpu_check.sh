#!/usr/bin/env bash
# The device check, run on a CUDA machine from the repository root with `.whl` carried (see fetch_gpu_wheels.sh):
# installs the missing wheels, runs the small-preset tests on CUDA (sync budgets under sync-debug mode "error"),
# then the gpu-smoke bench of point-mass and g1-track. Results go to $OUT (or benchmarks/results/).
# `bash benchmarks/gpu_check.sh tests` or `... bench` runs one half (each fits one 10-minute device call).
set -uo pipefail
part=${1:-all}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
out=${OUT:-benchmarks/results}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())" | tee -a "$out/gpu.txt"

if [[ $part != bench ]]; then
SYNCFREE_TEST_DEVICE=cuda timeout 240 python3 -m pytest -q -p no:cacheprovider -x \
    tests/test_host_syncs.py tests/test_budgets.py tests/test_g1_switches.py tests/test_kinematics.py \
    tests/test_gymnasium_adapter.py tests/test_from_rsl_rl_adapter.py tests/test_minibatch_step.py \
    2>&1 | tee "$out/cuda_tests.txt"
# compiled code on CUDA: the whole-minibatch graph against eager, and CUDA-graph replays drawing new noise
SYNCFREE_TEST_DEVICE=cuda timeout 150 python3 -m pytest -q -p no:cacheprovider \
    tests/test_compile.py -k "identical or cuda_graph" 2>&1 | tee "$out/cuda_compile_tests.txt"
fi
[[ $part == tests ]] && exit 0

for task in point-mass g1-track; do  # only results.json and results.md come back (the device returns 8 files)
    timeout 200 python3 -m syncfree bench --task "$task" --profile gpu-smoke --device cuda \
        --out "/tmp/bench-$task" > "/tmp/bench-$task.log" 2>&1
    cp "/tmp/bench-$task/results.json" "$out/$task-gpu-smoke.json"
    cp "/tmp/bench-$task/results.md" "$out/$task-gpu-smoke.md" || tail -20 "/tmp/bench-$task.log"
done

#!/usr/bin/env bash
# The device check, run on a CUDA machine from the repository root with `.whl` carried (see fetch_gpu_wheels.sh).
# Parts, in order, each under its own time limit, each packed into $OUT/results.tgz as soon as it ends (so a part
# that runs out of time loses only itself):
#   tests     the small-preset tests on CUDA: sync budgets under sync-debug mode "error", compiled graphs against
#             eager, CUDA-graph replays drawing new noise, switch equivalence, resume
#   side      point-mass at 4,096 envs: syncfree (optimized, bf16, baseline) against rsl_rl 5.5.1 (eager, compiled)
#   g1        g1-track at 4,096 envs (torch PD): baseline, optimized, optimized in bf16
#   grid      grid-arena at 256 and 1,024 simulations: baseline, optimized
#   side-large  point-mass at 65,536 envs: syncfree optimized against rsl_rl
#   ceiling   cartpole at 262,144 and 1,048,576 envs: compiled step, and compile=hot replayed as CUDA graphs
#   offpolicy g1-track at 4,096 envs trained by SAC and by TD3 (no random steps first): env steps/s and the phases of
#             their 32 gradient steps per iteration, baseline against optimized (the `g1` part has PPO's figures)
# On one H200 (torch 2.11), compiling took most of each part: 35-41 s for syncfree's compiled trainer at one size
# of point-mass, and none of the benchmark parts finished inside the limits below (the tests part reached 172 of
# 177 tests in 120 s). A whole check needs two 10-minute calls: `LIMIT_SCALE=2 ... tests side`, then
# `LIMIT_SCALE=2 ... g1 grid side-large ceiling` (LIMIT_SCALE multiplies every part's limit).
# `bash benchmarks/gpu_check.sh side g1` runs only those parts; TESTS="tests/a.py::b ..." replaces the tests'
# list, SIDE_SF / SIDE_RSL (';'-separated) the side-by-side part's syncfree and rsl_rl variants. SMOKE=1 runs
# every part at toy sizes on the CPU (checks the script itself; nothing is measured).
set -uo pipefail
cd "$(dirname "$0")/.."
parts=("$@")
[[ ${#parts[@]} == 0 ]] && parts=(tests side g1 grid side-large ceiling)
out=${OUT:-benchmarks/results/gpu-check}
res=/tmp/gpu-check
mkdir -p "$out" "$res"
device=cuda
[[ ${SMOKE:-0} == 1 ]] && device=cpu

if [[ ${SMOKE:-0} != 1 ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl || exit 1
    # mettagrid imports boto3 for S3 paths this check never reads; the machine cannot reach S3 anyway
    mkdir -p /tmp/stubs/boto3 /tmp/stubs/botocore
    touch /tmp/stubs/boto3/__init__.py /tmp/stubs/botocore/__init__.py
    printf 'class ClientError(Exception):\n    pass\n\n\nclass NoCredentialsError(Exception):\n    pass\n' \
        > /tmp/stubs/botocore/exceptions.py
    export PYTHONPATH=/tmp/site:/tmp/stubs:$PWD/src
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$res/gpu.txt"
fi
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
python3 -c "import torch, syncfree, rsl_rl, jsonargparse; print('torch', torch.__version__, 'cuda',
torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else '')" | tee -a "$res/gpu.txt"
python3 -c "import mettagrid, gymnasium, mujoco; print('mettagrid, gymnasium, mujoco import')" 2>&1 \
    | tail -1 | tee -a "$res/gpu.txt"

pack() {  # everything so far, one file back
    tar -czf "$out/results.tgz.part" -C "$res" . && mv "$out/results.tgz.part" "$out/results.tgz"
}

timed() {  # timed SECONDS NAME COMMAND...: run, log, note the exit status and the time taken
    # at the limit, an interrupt first: pytest then still prints the failures so far (it prints them at its end)
    local limit=$(($1 * ${LIMIT_SCALE:-1})) name=$2 start=$SECONDS
    shift 2
    echo "== $name (limit ${limit}s)"
    timeout -s INT -k 15 "$limit" "$@" > "$res/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc seconds=$((SECONDS - start))" | tee -a "$res/parts.txt"
    tail -25 "$res/$name.log"
    pack
}

side_by_side() {  # side_by_side LIMIT NAME TASK SIZES RSL-VARIANTS SYNCFREE-VARIANTS
    local -a sizes rsl sf
    read -r -a sizes <<< "$4"
    IFS=';' read -r -a rsl <<< "$5"
    IFS=';' read -r -a sf <<< "$6"
    timed "$1" "$2" python3 benchmarks/side_by_side_rsl_rl.py --task "$3" --device "$device" --threads 1 \
        --num_envs "${sizes[@]}" --repeats 3 --iterations 2 --min_seconds 0.5 --warmup 2 \
        --rsl_variants "${rsl[@]}" --syncfree_variants "${sf[@]}" --out "$res/$2"
}

bench() {  # bench LIMIT NAME TASK SIZES [EXTRA ARGUMENTS...]
    local limit=$1 name=$2 task=$3 sizes="[${4// /,}]"
    shift 4
    timed "$limit" "$name" python3 -m syncfree bench --task "$task" --device "$device" --num_envs "$sizes" \
        --repeats 3 --iterations 2 --min_seconds 0.5 --out "$res/$name" "$@"
}

small() { [[ ${SMOKE:-0} == 1 ]] && echo "$2" || echo "$1"; }

for part in "${parts[@]}"; do
    case $part in
    tests)
        read -r -a tests <<< "${TESTS:-tests/test_budgets.py tests/test_host_syncs.py tests/test_minibatch_step.py \
            tests/test_compile.py tests/test_autocast.py tests/test_switches.py tests/test_g1_switches.py \
            tests/test_kinematics.py tests/test_gymnasium_adapter.py tests/test_from_rsl_rl_adapter.py \
            tests/test_checkpoint.py}"
        SYNCFREE_TEST_DEVICE=$device timed "${TESTS_LIMIT:-$(small 120 400)}" cuda-tests python3 -m pytest -v \
            -p no:cacheprovider -n 6 --timeout 90 --tb=short -rfE --junitxml="$res/cuda-tests.xml" "${tests[@]}" ;;
    side)
        side_by_side "${SIDE_LIMIT:-$(small 90 300)}" side-by-side-point-mass point-mass "$(small 4096 64)" \
            "${SIDE_RSL-rsl_rl;rsl_rl compiled}" "${SIDE_SF-syncfree optimized;syncfree optimized, bf16;syncfree baseline}" ;;
    side-large)
        side_by_side "$(small 55 300)" side-by-side-point-mass-65536 point-mass "$(small 65536 128)" "rsl_rl" \
            "syncfree optimized" ;;
    g1)
        bench "$(small 110 300)" g1-track-4096 g1-track "$(small 4096 16)" --ablations true \
            --rows '["optimized, autocast=bf16"]' ;;
    grid)
        bench "$(small 100 300)" grid-arena-scale grid-arena "$(small "256 1024" 2)" --repeats 2 --iterations 1 \
            --min_seconds 0 ;;
    offpolicy)
        for algorithm in sac td3; do
            bench "$(small 120 300)" "$algorithm-g1-track-4096" g1-track "$(small 4096 16)" --algorithm "$algorithm" \
                --settings "{\"$algorithm.learning_starts\": 0, \"$algorithm.buffer_size\": $(small 1000000 4096)}" \
                --repeats 2 --iterations 2
        done ;;
    ceiling)
        side_by_side "$(small 55 300)" cartpole-ceiling cartpole "$(small "262144 1048576" 64)" "" \
            "syncfree optimized;syncfree optimized, compile=hot" ;;
    *) echo "unknown part: $part (allowed: tests side g1 grid side-large ceiling offpolicy)"; exit 2 ;;
    esac
done
cat "$res/parts.txt"

#!/usr/bin/env bash
# The device check, run on a CUDA machine from the repository root with `.whl` carried (see fetch_gpu_wheels.sh), as
# one call of at most 8 minutes: the parts run in turn inside BUDGET seconds (default 450, start-up not counted),
# each under its own limit cut to what is left, and a part with under 20 s left is not started. As soon as a part
# ends, its figures are in $OUT/results.tgz and its line (exit status, seconds; 124: its limit) in $OUT/parts.txt, so
# a part that runs out of time loses only itself. Parts, in the default order:
#   side      point-mass at 4,096 envs: syncfree (optimized, baseline) against rsl_rl 5.5.1 (eager)
#   offpolicy g1-track at 4,096 envs trained by SAC and by TD3 (no random steps first): env steps/s and the phases of
#             their 32 gradient steps per iteration, baseline (eager) against optimized (each gradient step one
#             compiled graph, `compile=step`, replayed as a CUDA graph); OFFPOLICY="sac" (or "td3") runs one of them
#   ceiling   cartpole at 1,048,576 envs: compiled step, and compile=hot replayed as CUDA graphs
#   g1        g1-track at 4,096 envs (torch PD): baseline, optimized, optimized in bf16 (ABLATIONS=true adds a row
#             per switch, each compiling its own graphs)
#   grid      grid-arena at 256 and 1,024 simulations: baseline, optimized
#   tests     the small-preset tests on CUDA: sync budgets under sync-debug mode "error", compiled graphs against
#             eager, CUDA-graph replays drawing new noise, switch equivalence, resume
#   side-large  point-mass at 65,536 envs: syncfree optimized against rsl_rl
#   g1-rsl    g1-track at 4,096 envs: rsl_rl 5.5.1's PPO against syncfree's (optimized), the PPO figure the
#             offpolicy part's SAC and TD3 are set against
#   mjlab     (not in the default order) mjlab's G1 velocity task at 4,096 envs on Warp's CUDA kernels: SAC's env
#             steps/s and gradient steps/s (OFFPOLICY_MJLAB=td3 times TD3 instead; both do not fit one call's
#             budget), then rsl_rl's PPO as mjlab ships it (rsl-rl-lib 5.4.2, its own runner). Its wheels
#             (fetch_gpu_wheels.sh mjlab) come in pieces, one per call to one warm machine: each call runs
#             `gpu_check.sh mjlab` carrying .whl-mjlab/pieces/N; until the last has come the part only stashes
#             them (parts.txt: rc=pieces-3), then installs them in /tmp/site-mjlab (MJLAB_TMP names another folder
#             than /tmp) and runs. It needs neither .whl nor the other parts' installs. SMOKE=1 runs it in the
#             environment at hand (.venv-mjlab); SMOKE=1 MJLAB_PIECES=1 installs from the pieces as the device
#             does, a rehearsal in a Python 3.12 environment holding only the device's packages.
# Compile caches: each benchmark process writes the compile artifacts it used (torch.compiler.save_cache_artifacts)
# to $OUT/compile-cache/PART.bin, and after each part the caches' folder is packed there (inductor-cache.tgz);
# carried back as `.compile-cache/` (COMPILE_CACHE names another folder), both go into the caches before the first
# part (benchmarks/compile_cache.py loads the artifacts), and the graphs compile from them.
# On one H200 with cold caches, compiling took most of each part (35-41 s for syncfree's compiled trainer at one
# size of point-mass, benchmarks/results/gpu-check-h200/); the parts' graphs and their compile times on a CPU are in
# benchmarks/results/compile-parts-cpu/.
# `bash benchmarks/gpu_check.sh side g1` runs only those parts, in that order; TESTS="tests/a.py::b ..." replaces the
# tests' list, SIDE_SF / SIDE_RSL (';'-separated) the side-by-side part's syncfree and rsl_rl variants; LIMIT_SCALE
# multiplies every part's limit (BUDGET still bounds them all). SMOKE=1 runs the parts at toy sizes on the CPU
# (checks the script itself; nothing is measured; the off-policy part takes 2 gradient steps of 256 per iteration;
# tests/test_gpu_check.py runs it).
set -uo pipefail
cd "$(dirname "$0")/.."
parts=("$@")
[[ ${#parts[@]} == 0 ]] && parts=(side offpolicy ceiling g1 grid tests side-large g1-rsl)
main_set=0  # any part but mjlab's needs the .whl set
for part in "${parts[@]}"; do [[ $part != mjlab ]] && main_set=1; done
out=${OUT:-benchmarks/results/gpu-check}
res=$(mktemp -d /tmp/gpu-check.XXXXXX)  # what comes back, packed
mkdir -p "$out" "$res"
budget=${BUDGET:-450}
cache_in=${COMPILE_CACHE:-.compile-cache}
device=cuda
[[ ${SMOKE:-0} == 1 ]] && device=cpu

if [[ ${SMOKE:-0} != 1 ]]; then
    if ((main_set)); then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            .whl/*.whl || exit 1
    fi
    # mettagrid imports boto3 for S3 paths this check never reads; the machine cannot reach S3 anyway
    mkdir -p /tmp/stubs/boto3 /tmp/stubs/botocore
    touch /tmp/stubs/boto3/__init__.py /tmp/stubs/botocore/__init__.py
    printf 'class ClientError(Exception):\n    pass\n\n\nclass NoCredentialsError(Exception):\n    pass\n' \
        > /tmp/stubs/botocore/exceptions.py
    export PYTHONPATH=/tmp/site:/tmp/stubs:$PWD/src
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$res/gpu.txt"
fi
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/inductor}
if [[ -d $cache_in ]]; then
    mkdir -p "$TORCHINDUCTOR_CACHE_DIR"
    [[ -f $cache_in/inductor-cache.tgz ]] && tar -xzf "$cache_in/inductor-cache.tgz" -C "$TORCHINDUCTOR_CACHE_DIR" \
        && echo "compile cache: $cache_in/inductor-cache.tgz unpacked" | tee -a "$res/gpu.txt"
    python3 benchmarks/compile_cache.py load "$cache_in" | tee -a "$res/gpu.txt"
fi
started=$SECONDS  # the budget counts from here
if ((main_set)); then
    python3 -c "import torch, syncfree, rsl_rl, jsonargparse; print('torch', torch.__version__, 'cuda',
torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else '')" | tee -a "$res/gpu.txt"
    python3 -c "import mettagrid, gymnasium, mujoco; print('mettagrid, gymnasium, mujoco import')" 2>&1 \
        | tail -1 | tee -a "$res/gpu.txt"
fi

pack() {  # everything so far, one file back, and the parts' lines beside it
    tar -czf "$out/results.tgz.part" -C "$res" . && mv "$out/results.tgz.part" "$out/results.tgz"
    cp "$res/parts.txt" "$out/parts.txt"
    mkdir -p "$out/compile-cache"  # and the caches' folder itself (a few MB: on a CPU the artifacts miss its kernels)
    tar -czf "$out/compile-cache/inductor-cache.tgz.part" -C "$TORCHINDUCTOR_CACHE_DIR" . 2>/dev/null \
        && mv "$out/compile-cache/inductor-cache.tgz.part" "$out/compile-cache/inductor-cache.tgz"
}

cached=(python3 benchmarks/compile_cache.py run)  # cached FILE COMMAND...: a python command saving its artifacts

timed() {  # timed SECONDS NAME COMMAND...: run, log, note the exit status and the time taken
    # at the limit, an interrupt first: pytest then still prints the failures so far (it prints them at its end)
    local limit=$(($1 * ${LIMIT_SCALE:-1})) name=$2 start=$SECONDS left=$((budget - SECONDS + started))
    shift 2
    if ((left < 20)); then
        echo "$name rc=not-run seconds=0 (${left}s of the budget left)" | tee -a "$res/parts.txt"
        pack
        return
    fi
    ((limit > left)) && limit=$left
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
    timed "$1" "$2" "${cached[@]}" "$out/compile-cache/$2.bin" benchmarks/side_by_side_rsl_rl.py --task "$3" --device "$device" --threads 1 \
        --num_envs "${sizes[@]}" --repeats 3 --iterations 2 --min_seconds 0.5 --warmup 2 \
        --rsl_variants "${rsl[@]}" --syncfree_variants "${sf[@]}" --out "$res/$2"
}

bench() {  # bench LIMIT NAME TASK SIZES [EXTRA ARGUMENTS...]
    local limit=$1 name=$2 task=$3 sizes="[${4// /,}]"
    shift 4
    timed "$limit" "$name" "${cached[@]}" "$out/compile-cache/$name.bin" -m syncfree bench --task "$task" --device "$device" --num_envs "$sizes" \
        --repeats 3 --iterations 2 --min_seconds 0.5 --out "$res/$name" "$@"
}

small() { [[ ${SMOKE:-0} == 1 ]] && echo "$2" || echo "$1"; }

mjlab_site() {  # the folders mjlab's part imports from, first to last; none while its wheels' pieces are coming
    local tmp=${MJLAB_TMP:-/tmp}  # the stash, the wheels and their install: kept while the machine stays warm
    if [[ ${SMOKE:-0} == 1 && ${MJLAB_PIECES:-0} != 1 ]]; then  # mjlab and its pins installed where this runs
        echo "$PWD/src"
        return
    fi
    if [[ ! -f $tmp/site-mjlab/.installed ]]; then  # messages to the output and gpu.txt, the folders alone to stdout
        python3 benchmarks/wheel_pieces.py gather .whl-mjlab/pieces "$tmp/mjlab-pieces" \
            --extract "$tmp/wheels-mjlab" 2>&1 | tee -a "$res/gpu.txt" >&2
        local rc=${PIPESTATUS[0]}
        ((rc == 0)) || return $rc
        rm -rf "$tmp/site-mjlab"  # an install cut off earlier
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$tmp/site-mjlab" \
            "$tmp"/wheels-mjlab/*.whl >&2 || return 1
        touch "$tmp/site-mjlab/.installed"
    fi
    echo "$tmp/site-mjlab:$PWD/src"  # not /tmp/site: mjlab pins mujoco 3.11 and rsl-rl-lib 5.4.2
}

mjlab_stubs() {  # a folder of stand-ins for what mjlab imports to log to wandb and write videos, never done here
    local stubs missing
    missing='def __getattr__(name):\n    raise ModuleNotFoundError(f"{__name__}.{name}: not installed here")\n'
    stubs=$(mktemp -d /tmp/mjlab-stubs.XXXXXX)
    mkdir -p "$stubs/wandb" "$stubs/mediapy" "$stubs/imageio_ffmpeg"
    printf "run = None\n\n\n$missing" > "$stubs/wandb/__init__.py"
    printf "def set_ffmpeg(path):\n    pass\n\n\n$missing" > "$stubs/mediapy/__init__.py"
    printf "def get_ffmpeg_exe():\n    return 'ffmpeg'\n\n\n$missing" > "$stubs/imageio_ffmpeg/__init__.py"
    echo "$stubs"
}

mjlab_part() {  # SAC (TD3) on mjlab's G1 velocity task against rsl_rl's PPO as mjlab ships it, same env count
    local path rc stubs saved=${PYTHONPATH:-} task=Mjlab-Velocity-Flat-Unitree-G1 envs
    envs=$(small 4096 16)
    path=$(mjlab_site)
    rc=$?
    if [[ -z $path ]]; then
        echo "mjlab rc=pieces-$rc seconds=0 (3: pieces still to carry; else their join or install failed, above)" \
            | tee -a "$res/parts.txt"
        pack
        return
    fi
    stubs=$(mjlab_stubs)
    export PYTHONPATH=$stubs:$path
    python3 -c "import mjlab, mujoco, warp, wandb; print('mjlab', mjlab.__file__, 'mujoco', mujoco.__version__,
'warp', warp.config.version, 'wandb', wandb.__file__)" 2>&1 | tail -1 | tee -a "$res/gpu.txt"
    # with cold caches Warp compiles mujoco_warp's kernels at a process's first env; SMOKE runs eagerly (the plumbing)
    for algorithm in ${OFFPOLICY_MJLAB:-sac}; do
        bench "$(small 280 300)" "$algorithm-mjlab-g1-velocity-4096" "mjlab:$task" "$envs" --algorithm "$algorithm" \
            --settings "{\"$algorithm.learning_starts\": 0$(small "" ", \"$algorithm.buffer_size\": 4096, \
\"$algorithm.updates_per_iteration\": 2, \"$algorithm.batch_size\": 256")}" --repeats 2 --iterations 2 \
            $(small "" "--compile false")
    done
    timed "$(small 150 200)" rsl_rl-mjlab-g1-velocity-4096 python3 benchmarks/mjlab_parity.py --task "$task" \
        --device "$device" --num_envs "$envs" --iterations "$(small 6 2)" --seeds 0 --eval_steps 0 --learners rsl_rl \
        --out "$res/rsl_rl-mjlab-g1-velocity-4096"
    export PYTHONPATH=$saved
    rm -rf "$stubs"
}

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
        side_by_side "${SIDE_LIMIT:-$(small 120 300)}" side-by-side-point-mass point-mass "$(small 4096 64)" \
            "${SIDE_RSL-rsl_rl}" "${SIDE_SF-syncfree optimized;syncfree baseline}" ;;
    side-large)
        side_by_side "$(small 55 300)" side-by-side-point-mass-65536 point-mass "$(small 65536 128)" "rsl_rl" \
            "syncfree optimized" ;;
    g1)
        bench "$(small 110 300)" g1-track-4096 g1-track "$(small 4096 16)" --ablations "${ABLATIONS:-false}" \
            --rows '["optimized, autocast=bf16"]' ;;
    grid)
        bench "$(small 100 300)" grid-arena-scale grid-arena "$(small "256 1024" 2)" --repeats 2 --iterations 1 \
            --min_seconds 0 ;;
    offpolicy)
        for algorithm in ${OFFPOLICY:-sac td3}; do
            bench "$(small 100 300)" "$algorithm-g1-track-4096" g1-track "$(small 4096 16)" --algorithm "$algorithm" \
                --settings "{\"$algorithm.learning_starts\": 0, \"$algorithm.buffer_size\": $(small 1000000 4096)$(small "" \
                ", \"$algorithm.updates_per_iteration\": 2, \"$algorithm.batch_size\": 256")}" \
                --repeats 2 --iterations 2
        done ;;
    g1-rsl)
        side_by_side "$(small 150 300)" side-by-side-g1-track g1-track "$(small 4096 16)" "rsl_rl" \
            "syncfree optimized" ;;
    ceiling)
        side_by_side "$(small 100 300)" cartpole-ceiling cartpole "$(small 1048576 64)" "" \
            "syncfree optimized;syncfree optimized, compile=hot" ;;
    mjlab)
        mjlab_part ;;
    *) echo "unknown part: $part (allowed: tests side g1 grid side-large ceiling offpolicy g1-rsl mjlab)"; exit 2 ;;
    esac
done
cat "$res/parts.txt"

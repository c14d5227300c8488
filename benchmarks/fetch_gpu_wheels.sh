#!/usr/bin/env bash
# Wheels the GPU machine (Python 3.12, torch preinstalled, no network) lacks, fetched here.
#   bash benchmarks/fetch_gpu_wheels.sh          into .whl/: carry it, run benchmarks/gpu_check.sh there
#   bash benchmarks/fetch_gpu_wheels.sh mjlab    mjlab's set into .whl-mjlab/wheels/ (mujoco 3.11, mujoco-warp 3.11,
#       Warp, rsl-rl-lib 5.4.2 and what they import: about 200 MB, more than one call carries), cut into pieces
#       that fit one call beside the working tree, .whl-mjlab/pieces/1, 2, ...: carry one per call to one warm
#       machine, each call running `gpu_check.sh mjlab`; the call that brings the last piece installs them and runs
#       the part (benchmarks/wheel_pieces.py).
# (mettagrid imports boto3 for S3 paths, which the machine cannot reach, and mjlab imports wandb, mediapy and
# imageio-ffmpeg for logging and videos these checks never make: gpu_check.sh stubs them. mujoco 4's viewer,
# mujoco-studio, and PyOpenGL are left out of .whl: no part renders, and with them .whl and the working tree
# passed the 64 MiB a call carries.)
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64
           --platform manylinux_2_31_x86_64 --platform manylinux_2_24_x86_64 --platform any)
# the working tree a call carries, in bytes: tracked files and untracked ones git does not ignore
tree=$(git ls-files --cached --others --exclude-standard -z | xargs -0 -r stat -c %s 2>/dev/null \
    | awk '{s += $1} END {print s + 0}')
download() {  # download FOLDER NAME==VERSION... into an emptied FOLDER (no wheel of an earlier set beside them)
    local folder=$1
    shift
    local ignored="/${folder%%/*}/"  # the whole folder: pieces or wheels left untracked would travel with each call
    grep -qx "$ignored" "$exclude" 2>/dev/null || echo "$ignored" >> "$exclude"
    rm -rf "$folder"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${platforms[@]}" -d "$folder" "$@"
}
if [[ ${1:-} == mjlab ]]; then
    # the versions mjlab 1.6.0 resolved to in .venv-mjlab (scripts/test); the machine has torch, numpy, scipy,
    # tensorboard, rich, onnx and matplotlib
    download .whl-mjlab/wheels \
        mjlab==1.6.0 mujoco==3.11.0 mujoco-warp==3.11.0 warp-lang==1.19.0 rsl-rl-lib==5.4.2 tensordict==0.15.3 \
        pyvers==0.2.3 gitpython==3.2.1 gitdb==4.0.12 smmap==5.0.3 tyro==1.0.17 typeguard==4.6.1 \
        docstring-parser==0.18.0 jsonargparse==4.53.0 typeshed-client==2.15.0 importlib-resources==7.1.0 \
        prettytable==3.19.0 wcwidth==0.9.5 trimesh==5.2.0 viser==1.1.1 mjviser==0.0.14 msgspec==0.23.0 \
        websockets==16.1.1 zstandard==0.25.0 glfw==2.11.0 cffi==2.1.1 pycparser==3.12 pyopengl==3.1.10
    # a piece and the working tree that travels with it under 64 MiB, 4 MiB to spare
    python3 benchmarks/wheel_pieces.py split .whl-mjlab/wheels .whl-mjlab/pieces --mib $((60 - tree / 2**20))
    exit
fi
download .whl \
    jsonargparse==4.53.0 docstring-parser==0.18.0 typeshed-client==2.15.0 importlib-resources==7.1.0 \
    mujoco==4.0.1 mujoco-core==4.0.1 glfw==2.11.0 \
    rsl-rl-lib==5.5.1 tensordict==0.15.3 pyvers==0.2.3 gitpython==3.2.1 gitdb==4.0.12 smmap==5.0.3 \
    gymnasium==1.4.0 farama-notifications==0.0.6 \
    mettagrid==0.26.22 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
    importnb==2023.11.1 pettingzoo==1.27.0 websocket-client==1.9.2
whl=$(du -sb .whl | cut -f1)
cache=0  # compile caches carried back to a call (counted in the tree already unless git ignores them)
git check-ignore -q .compile-cache && cache=$( (du -sb .compile-cache 2>/dev/null || echo 0) | cut -f1)
echo "fetch_gpu_wheels: .whl $((whl / 2**20)) MiB, the working tree $((tree / 2**20)) MiB," \
     ".compile-cache $((cache / 2**20)) MiB"
if ((whl + tree + cache > 64 * 2**20)); then
    echo "fetch_gpu_wheels: together they pass the 64 MiB a call carries; leave a wheel out or carry it apart" >&2
    exit 1
fi

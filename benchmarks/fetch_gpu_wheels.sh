#!/usr/bin/env bash
# Wheels the GPU machine (Python 3.12, torch preinstalled, no network) lacks, fetched here into .whl/.
# Then carry `.whl` to it and run benchmarks/gpu_check.sh there.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d .whl \
    jsonargparse==4.53.0 docstring-parser==0.18.0 typeshed-client==2.15.0 importlib-resources==7.1.0 \
    mujoco==4.0.0 mujoco-core==4.0.0 mujoco-studio==4.0.0 websockets glfw==2.11.0 pyopengl==3.1.10 \
    rsl-rl-lib==5.5.1 tensordict==0.15.3 pyvers==0.2.3 gitpython==3.2.1 gitdb==4.0.12 smmap==5.0.3 \
    gymnasium==1.4.0 farama-notifications==0.0.6
du -sh .whl

#!/usr/bin/env bash
# Wheels the GPU machine (Python 3.12, torch preinstalled, no network) lacks, fetched here into .whl/.
# (mettagrid imports boto3 for S3 paths, which the machine cannot reach: gpu_check.sh stubs it.)
# Then carry `.whl` to it and run benchmarks/gpu_check.sh there.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64
           --platform manylinux_2_31_x86_64 --platform manylinux_2_24_x86_64 --platform any)
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d .whl \
    jsonargparse==4.53.0 docstring-parser==0.18.0 typeshed-client==2.15.0 importlib-resources==7.1.0 \
    mujoco==4.0.1 mujoco-core==4.0.1 mujoco-studio==4.0.1 websockets==17.4 glfw==2.11.0 pyopengl==3.1.10 \
    rsl-rl-lib==5.5.1 tensordict==0.15.3 pyvers==0.2.3 gitpython==3.2.1 gitdb==4.0.12 smmap==5.0.3 \
    gymnasium==1.4.0 farama-notifications==0.0.6 \
    mettagrid==0.26.22 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
    importnb==2023.11.1 pettingzoo==1.27.0 websocket-client==1.9.2
du -sh .whl

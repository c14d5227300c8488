"""FLOPs of one SAC gradient step with `sac_vs_sb3.py`'s networks, and one thread's float32 and bfloat16
matrix-product rates: what bounds the env steps/s of SAC at one gradient step per env step on a CPU.

    OMP_NUM_THREADS=1 python benchmarks/sac_gradient_step_flops.py

The step is counted by torch's `FlopCounterMode` over one update of pendulum's learner (256 x 256 ReLU actor and
twin critics, batch 256, no observation normalization); the rate is timed in the process's CPU time, which leaves
out waiting for other jobs on the machine. bfloat16 products are timed where the CPU has bfloat16 instructions
(AVX512-BF16, AMX; elsewhere torch emulates them, far slower): `autocast` runs the gradient steps' hidden layers so
there."""

from __future__ import annotations

import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from syncfree.config import with_values
from syncfree.tasks import preset, with_algorithm
from syncfree.train.runner import Runner


def gradient_step_flops() -> float:
    cfg = with_values(with_algorithm(preset("pendulum"), "sac"), {
        "env.num_envs": 4, "log.progress": False, "perf.compile": "off", "policy.actor_hidden": [256, 256],
        "policy.critic_hidden": [256, 256], "policy.activation": "relu", "policy.normalize_obs": False,
        "sac.steps_per_env": 64, "sac.updates_per_iteration": 1, "sac.batch_size": 256, "sac.learning_starts": 0,
        "sac.n_step": 1})
    cfg.iterations = 3
    runner = Runner(cfg)
    runner.learn(until=2)  # the buffer holds a batch
    with FlopCounterMode(display=False) as counter:
        runner.algorithm.update(0.5)
    return counter.get_total_flops() / runner.algorithm.gradient_steps


def matmul_rate(n: int, dtype: torch.dtype = torch.float32) -> float:
    """GFLOP/s of `n x n` matrix products in `dtype` on this thread, in CPU time."""
    a, b, c = (torch.randn(n, n).to(dtype) for _ in range(3))
    for _ in range(5):
        torch.mm(a, b, out=c)
    reps = max(10, int(2e10 / (2 * n**3)))
    start = time.process_time()
    for _ in range(reps):
        torch.mm(a, b, out=c)
    return 2 * n**3 * reps / (time.process_time() - start) / 1e9


def main() -> None:
    torch.set_num_threads(1)
    print(f"FLOPs per gradient step: {gradient_step_flops():,.0f}")
    from syncfree.policy.actor_critic import native_bf16

    dtypes = [torch.float32, torch.bfloat16] if native_bf16(torch.device("cpu")) else [torch.float32]
    for dtype in dtypes:
        for n in (256, 512, 1024):
            print(f"{str(dtype)[6:]} matrix product {n} x {n}: {matmul_rate(n, dtype):.1f} GFLOP/s "
                  "(one thread, CPU time)")


if __name__ == "__main__":
    main()

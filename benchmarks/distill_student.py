"""Student-teacher distillation: how fast a student without privileged observations reaches its teacher's return.

    python benchmarks/distill_student.py [--task g1-track] [--num_envs 256] [--teacher_iterations 100] \
        [--student_iterations 40] [--seeds 0 1 2] [--every 5] [--kinds mlp recurrent]

1. A privileged teacher: the task's preset trained by PPO (seed 0, `--teacher_iterations`, `--num_envs`) with
   `policy.actor_obs=critic`, its actor reading what the critic reads (on g1-track: the policy's terms plus the
   privileged ones, such as the root's linear velocity and the body positions).
2. Students, one per seed and kind: the same preset with `distill.teacher` set to it, the actor reading the
   `policy` group only, `distill.gradient_length` 8 (three optimizer steps per 24-step rollout), the student's
   action noise `policy.init_std` 0.1 (it samples with it; the deviation is not trained), Adam at 1e-3. Kinds:
   `mlp` (the preset's MLP) and `recurrent` (`policy.kind=recurrent`: an LSTM of 256, then the MLP).
3. Every `--every` iterations a student's checkpoint is evaluated as `syncfree eval` plays it (its mean action,
   the first episode of 64 fresh envs, seed 12345), and so are the teacher (once) and, as iteration 0, an untrained
   policy of each student's kind and seed, which shows how much of the teacher's return needs no training at all
   (on g1-track's default physics the root follows the reference, so a policy that barely moves scores).

Each run is its own process on one thread. Writes benchmarks/results/distill-<task>-cpu/results.json and results.md:
the teacher's return, each student's return against iterations, the first iteration at which each reaches 90 % of
the teacher's, and the mean and standard deviation over the seeds."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from tqdm import tqdm

from syncfree.bench.report import save_results

ROOT = Path(__file__).resolve().parent.parent
EVAL_ENVS, EVAL_SEED = 64, 12345


def train(task: str, name: str, runs: Path, args: list[str]) -> Path:
    """Train in a process of its own (skipped when the run's last checkpoint exists); returns the run's folder."""
    folder = runs / name
    if not (folder / "latest.pt").is_file():
        command = [sys.executable, "-m", "syncfree", "train", "--task", task, "--log.dir", str(runs),
                   "--log.run_name", name, "--log.progress", "false", *args]
        subprocess.run(command, check=True, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return folder


def mean_return(checkpoint: Path) -> float:
    import syncfree

    return float(syncfree.evaluate(str(checkpoint), num_envs=EVAL_ENVS, seed=EVAL_SEED).mean())


def untrained_return(task: str, num_envs: int, kind: str, seed: int) -> float:
    """The return of an untrained student: a policy of the student's kind freshly initialized (torch seeded with
    `seed`; not bit for bit the weights the run started from, which drew from the generator after its env did),
    evaluated alike."""
    import torch

    from syncfree.algo import algorithm_for
    from syncfree.tasks import make_task_env, preset, with_algorithm
    from syncfree.train.evaluate import evaluate_task

    cfg = preset(task)
    cfg.env.num_envs, cfg.policy.init_std = num_envs, 0.1
    if kind != "mlp":
        cfg = with_algorithm(cfg, "recurrent-ppo" if kind == "recurrent" else kind)
    torch.manual_seed(seed)
    policy = algorithm_for(cfg).build_policy(cfg, make_task_env(cfg, 1, torch.device("cpu"), seed))
    return float(evaluate_task(cfg, policy, EVAL_ENVS, torch.device("cpu"), EVAL_SEED).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="g1-track")
    parser.add_argument("--num_envs", type=int, default=256)
    parser.add_argument("--teacher_iterations", type=int, default=100)
    parser.add_argument("--student_iterations", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--kinds", nargs="+", default=["mlp"], choices=["mlp", "recurrent"])
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    out = ROOT / "benchmarks" / "results" / f"distill-{args.task}-cpu"
    runs = out / "runs"
    size = ["--env.num_envs", str(args.num_envs)]
    teacher = train(args.task, f"teacher-{args.num_envs}envs", runs,
                    [*size, "--seed", "0", "--iterations", str(args.teacher_iterations),
                     "--policy.actor_obs", "critic"])
    teacher_return = mean_return(teacher / "latest.pt")
    checkpoints = list(range(args.every, args.student_iterations + 1, args.every))
    target = 0.9 * teacher_return if teacher_return > 0 else 1.1 * teacher_return
    students: dict[str, dict[int, dict[int, float]]] = {}
    reached: dict[str, dict[int, int | None]] = {}
    sections = []
    for kind in args.kinds:
        students[kind] = {}
        for seed in tqdm(args.seeds, desc=f"{kind} students"):
            name = f"student-{args.num_envs}envs-seed{seed}" + ("" if kind == "mlp" else f"-{kind}")
            folder = train(args.task, name, runs,
                           [*size, "--seed", str(seed), "--iterations", str(args.student_iterations),
                            "--save_every", str(args.every), "--distill.teacher", str(teacher / "latest.pt"),
                            "--distill.gradient_length", "8", "--policy.init_std", "0.1",
                            *(["--policy.kind", kind] if kind != "mlp" else [])])
            students[kind][seed] = {0: untrained_return(args.task, args.num_envs, kind, seed),
                                    **{it: mean_return(folder / f"checkpoint_{it:06d}.pt") for it in checkpoints}}
        reached[kind] = {seed: next((it for it in checkpoints if returns[it] >= target), None)
                         for seed, returns in students[kind].items()}
        rows = ["| iteration | " + " | ".join(f"seed {s}" for s in args.seeds)
                + " | mean ± sd | of the teacher's | of the gap from untrained to the teacher closed |",
                "|---" * (len(args.seeds) + 4) + "|"]
        start = statistics.mean(students[kind][s][0] for s in args.seeds)
        for it in [0, *checkpoints]:
            values = [students[kind][s][it] for s in args.seeds]
            mean = statistics.mean(values)
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            rows.append(f"| {it}{' (untrained)' if it == 0 else ''} | " + " | ".join(f"{v:.2f}" for v in values)
                        + f" | {mean:.2f} ± {sd:.2f} | {mean / teacher_return:.0%} | "
                        f"{(mean - start) / (teacher_return - start):.0%} |")
        sections += [f"## {kind} students", "", *rows, "",
                     "First evaluated iteration at which each reaches 90 % of the teacher's return: "
                     + ", ".join(f"seed {s}: {reached[kind][s] if reached[kind][s] is not None else 'not reached'}"
                                 for s in args.seeds) + ".", ""]
    markdown = "\n".join([
        f"# Distillation on {args.task}: a student without privileged observations against its teacher",
        "",
        f"`python benchmarks/distill_student.py --task {args.task} --num_envs {args.num_envs} --teacher_iterations "
        f"{args.teacher_iterations} --student_iterations {args.student_iterations} --seeds "
        f"{' '.join(map(str, args.seeds))} --every {args.every} --kinds {' '.join(args.kinds)}`",
        "",
        f"Teacher (PPO, `policy.actor_obs=critic`, {args.teacher_iterations} iterations, seed 0): mean return "
        f"{teacher_return:.2f} over the first episodes of {EVAL_ENVS} envs (seed {EVAL_SEED}, mean actions). "
        "Students (`distill.teacher`, the `policy` group only) are evaluated the same way.",
        "",
        *sections,
    ])
    save_results(out, {"task": args.task, "num_envs": args.num_envs, "teacher_iterations": args.teacher_iterations,
                       "student_iterations": args.student_iterations, "teacher_return": teacher_return,
                       "students": {kind: {str(s): {str(it): r for it, r in v.items()} for s, v in by_seed.items()}
                                    for kind, by_seed in students.items()},
                       "reached_90_percent_at": {kind: {str(s): it for s, it in r.items()}
                                                 for kind, r in reached.items()}}, markdown)
    print(markdown)


if __name__ == "__main__":
    main()

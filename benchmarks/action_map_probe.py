"""What each off-policy action map (`sac.action_bounds`) makes of fixed actions on a task with declared bounds: the
first-episode return and length of fixed action rules, before any training.

    python benchmarks/action_map_probe.py [--task g1-track] [--num_envs 64] [--seed 1000] \
        [--set sac.actor_init=zero sac.log_std_max=0]

Rules, each on the same fresh envs (seeded `--seed`): the actor's 0 under each map (`unit` and `symmetric`: the
env's 0, g1-track's default pose; `env`: the middle of each declared range); actions uniform in [-1, 1] mapped by
each (what the random warm-up before `learning_starts` sends); and an untrained SAC actor of the task's SAC preset
(built with torch seeded `--seed`, `--set` applied), its samples as the rollout draws them once learning started.
Random draws come from torch's generator seeded with `--seed`. One line per rule: mean return and mean length over
the envs' first episodes.
"""

from __future__ import annotations

import argparse
import statistics

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="g1-track")
    parser.add_argument("--num_envs", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                        help="settings of the SAC preset (VALUE read as YAML), e.g. sac.actor_init=zero")
    args = parser.parse_args()

    import yaml

    from syncfree.algo import algorithm_for
    from syncfree.algo.offpolicy import OffPolicy
    from syncfree.config import with_values
    from syncfree.tasks import make_task_env, preset, with_algorithm
    from syncfree.tasks.configs import validated

    torch.set_num_threads(1)
    cfg = with_algorithm(preset(args.task), "sac")
    settings = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--set {item!r}: expected KEY=VALUE")
        settings[key] = yaml.safe_load(value)
    cfg = validated(with_values(cfg, settings))
    maps = {}
    for mode in ("unit", "env", "symmetric"):
        cfg.learner.action_bounds = mode
        env = make_task_env(cfg, args.num_envs, torch.device("cpu"), args.seed)
        bounds = OffPolicy.action_bounds(cfg, env)
        env.close()
        low, high = bounds if bounds is not None else (-torch.ones(env.action_spec.size), torch.ones(env.action_spec.size))
        maps[mode] = ((high + low) / 2, (high - low) / 2)  # bias, scale: the policy's map of [-1, 1]

    torch.manual_seed(args.seed)
    actor = algorithm_for(cfg).build_policy(cfg, make_task_env(cfg, 1, torch.device("cpu"), args.seed))
    for rule in ("zero", "uniform", "untrained actor"):
        for mode, (bias, scale) in maps.items():
            env = make_task_env(cfg, args.num_envs, torch.device("cpu"), args.seed)
            generator = torch.Generator().manual_seed(args.seed)
            torch.manual_seed(args.seed)
            returns = torch.zeros(args.num_envs)
            lengths = torch.zeros(args.num_envs)
            finished = torch.zeros(args.num_envs, dtype=torch.bool)
            obs = env.reset()
            with torch.inference_mode():
                for _ in range(env.max_episode_length):
                    if rule == "zero":
                        unit = torch.zeros(args.num_envs, env.action_spec.size)
                    elif rule == "uniform":
                        unit = torch.rand(args.num_envs, env.action_spec.size, generator=generator) * 2 - 1
                    else:
                        unit = actor.sample(actor.actor_input(obs))[0]
                    step = env.step(bias + scale * unit)
                    returns += torch.where(finished, 0.0, step.reward)
                    lengths += (~finished).float()
                    finished |= step.terminated | step.truncated
                    obs = step.obs
                    if bool(finished.all()):
                        break
            env.close()
            print(f"{rule:7s} actions under `{mode}`: return {statistics.mean(returns.tolist()):8.2f} over "
                  f"{statistics.mean(lengths.tolist()):6.1f} steps (mean of {args.num_envs} first episodes)")


if __name__ == "__main__":
    main()

"""MettaGrid's adapter stepped alone (no policy, random actions drawn beforehand) with one of its switches on and
off, interleaved: agent steps/s (and, for `perf.cache_game_config`, the game-config conversions of each) at a few
simulation counts.

    OMP_NUM_THREADS=1 python benchmarks/mettagrid_restarts.py [--switch cache_game_config] [--num_envs 16 64] \
        [--repeats 8] [--steps 256]

Every MettaGrid episode is a new simulation; on the grid-arena preset (64-step episodes) a simulation restarts
every 64 steps, and with `cache_game_config` off, each restart converts the unchanged game config to C++ again.
`--switch host_env_worker`: the second half of the simulations steps in a worker process (the other switch on in
both); conversions are counted in this process only, so they are not reported then."""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import mettagrid.config.mettagrid_c_config as mettagrid_c_config
import torch

from syncfree.bench.report import save_results
from syncfree.bench.run import machine_info
from syncfree.envs.adapters.mettagrid import MettaGridSpec, MettaGridVecEnv
from syncfree.tasks import preset


class CountedConversions:
    """MettaGrid's game-config converter, counting its calls per side while installed."""

    def __init__(self) -> None:
        self.convert = mettagrid_c_config.convert_to_cpp_game_config
        self.calls = {True: 0, False: 0}
        self.side = True

    def __call__(self, game: Any) -> Any:
        self.calls[self.side] += 1
        return self.convert(game)


SWITCHES = ("cache_game_config", "host_env_worker")
ARGUMENT = {"cache_game_config": "cache_game_config", "host_env_worker": "worker"}
"""The adapter's argument for each switch."""


def measure(num_simulations: int, repeats: int, steps: int, seed: int = 0, switch: str = SWITCHES[0]) -> dict:
    spec = MettaGridSpec.of(preset("grid-arena").env)
    counted = CountedConversions()
    mettagrid_c_config.convert_to_cpp_game_config = counted
    envs = {}
    for cache in (True, False):
        counted.side = cache
        envs[cache] = MettaGridVecEnv(spec, num_simulations, "cpu", seed, **{ARGUMENT[switch]: cache})
    n = num_simulations * spec.agents_per_env
    actions = torch.randint(0, 5, (64, n), generator=torch.Generator().manual_seed(seed))
    seconds: dict[bool, list[float]] = {True: [], False: []}
    try:
        with torch.inference_mode():
            for cache, env in envs.items():
                counted.side = cache
                env.reset()
                for t in range(16):  # warm-up
                    env.step(actions[t])
            for _ in range(repeats):
                for cache, env in envs.items():
                    counted.side = cache
                    start = time.perf_counter()
                    for t in range(steps):
                        env.step(actions[t % len(actions)])
                    seconds[cache].append(time.perf_counter() - start)
        started = {cache: env._sims.started for cache, env in envs.items()}
        conversions = dict(counted.calls)
    finally:
        mettagrid_c_config.convert_to_cpp_game_config = counted.convert
        for env in envs.values():
            env.close()

    def rate(xs: list[float]) -> dict[str, float]:
        sps = [steps * n / x for x in xs]
        return {"median": statistics.median(sps), "min": min(sps), "max": max(sps)}

    ratios = [off / on for on, off in zip(seconds[True], seconds[False], strict=True)]
    return {"num_simulations": num_simulations, "agents": n, "steps": steps,
            "on": rate(seconds[True]), "off": rate(seconds[False]),
            "ratio": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
            "simulations_started": started[True], "conversions": {"on": conversions[True], "off": conversions[False]}}


def markdown(result: dict) -> str:
    m, switch = result["machine"], result["switch"]
    counted = switch == "cache_game_config"
    lines = [f"# MettaGrid's adapter, `{switch}` on and off", "",
             f"Machine: {m['processor']}, {m['cpu_count']} cores, torch {m['torch']} with {m['torch_threads']} "
             f"thread(s), Python {m['python']}. grid-arena's preset map (4 agents per simulation, 64-step "
             f"episodes), random actions, {result['repeats']} interleaved repeats of {result['steps']} steps after "
             "16 warm-up steps; ratio = seconds off / seconds on, per repeat.", "",
             f"`python benchmarks/mettagrid_restarts.py --switch {switch} --num_envs "
             f"{' '.join(str(r['num_simulations']) for r in result['sizes'])} --repeats {result['repeats']} "
             f"--steps {result['steps']}`", "",
             "| simulations | agent steps/s on | agent steps/s off | on / off, median (min–max) | simulations started "
             + ("| conversions on / off |" if counted else "|"),
             "|---|---|---|---|---|" + ("---|" if counted else "")]
    for r in result["sizes"]:
        on, off, ratio = r["on"], r["off"], r["ratio"]
        lines.append(f"| {r['num_simulations']} | {on['median']:,.0f} ({on['min']:,.0f}–{on['max']:,.0f}) | "
                     f"{off['median']:,.0f} ({off['min']:,.0f}–{off['max']:,.0f}) | {ratio['median']:.2f} "
                     f"({ratio['min']:.2f}–{ratio['max']:.2f}) | {r['simulations_started']} |"
                     + (f" {r['conversions']['on']} / {r['conversions']['off']} |" if counted else ""))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switch", choices=SWITCHES, default=SWITCHES[0])
    parser.add_argument("--num_envs", type=int, nargs="+", default=[16, 64], help="MettaGrid simulations")
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--out", default="", help="default: benchmarks/results/mettagrid-restarts-cpu, or "
                        "mettagrid-host-env-worker-cpu for that switch")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = args.out or ("benchmarks/results/mettagrid-restarts-cpu" if args.switch == "cache_game_config"
                       else "benchmarks/results/mettagrid-host-env-worker-cpu")
    result = {"machine": machine_info("cpu"), "switch": args.switch, "repeats": args.repeats, "steps": args.steps,
              "sizes": [measure(n, args.repeats, args.steps, switch=args.switch) for n in args.num_envs]}
    save_results(Path(out), result, markdown(result), show=True)


if __name__ == "__main__":
    main()

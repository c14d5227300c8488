"""The configurations `syncfree bench` compares: baseline, optimized, and per switch the ablation rows."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from syncfree.algo.recurrent import SWITCHES_READ
from syncfree.bench.config import BenchConfig, is_recurrent
from syncfree.core.switches import PerfConfig
from syncfree.errors import UserError


def bench_configurations(bench: BenchConfig) -> list[tuple[str, PerfConfig]]:
    """The task's configurations: for a recurrent task, ablation rows only for the switches its algorithm reads;
    with `bench.rows`, only those rows (and baseline and optimized)."""
    if is_recurrent(bench.task):
        configs = configurations(bench.ablations or bool(bench.rows), bench.add_one_in, compile=False,
                                 switches=SWITCHES_READ)
    else:
        configs = configurations(bench.ablations or bool(bench.rows), bench.add_one_in, bench.compile)
    if not bench.rows:
        return configs
    names = [name for name, _ in configs]
    unknown = [row for row in bench.rows if row not in names]
    if unknown:
        raise UserError(f"bench: rows={unknown} unknown; allowed: {', '.join(names)}")
    return [(name, perf) for name, perf in configs if name in ("baseline", "optimized", *bench.rows)]


def configurations(ablations: bool, add_one_in: bool = True, compile: bool = True,
                   switches: Sequence[str] | None = None) -> list[tuple[str, PerfConfig]]:
    """baseline, optimized, and per switch: optimized without it (leave-one-out), baseline with it (add-one-in).
    `compile=False`: all eager, without the compile rows. `switches`: ablation rows for these switches only
    (None: every switch)."""
    if not compile:
        return [(name, dataclasses.replace(perf, compile="off"))
                for name, perf in configurations(ablations, add_one_in, switches=switches)
                if not name.endswith(" compile") and "compile=" not in name]
    configs = [("baseline", PerfConfig.preset("baseline")), ("optimized", PerfConfig.preset("optimized"))]
    # a process-wide switch (e.g. retain_host_memory) is on for every trainer once one turned it on: rows in one
    # process cannot compare its values (benchmarks/host_memory.py does, in separate processes)
    ablated = [f for f in PerfConfig.switches()
               if (switches is None or f.name in switches) and not f.metadata["process_wide"]]
    if ablations:
        for f in ablated:
            changes = {f.name: f.metadata["baseline"]}
            needing = [g.name for g in PerfConfig.switches()  # switches that cannot run without this one
                       if g.metadata["requires"].get(f.name, f.metadata["baseline"]) != f.metadata["baseline"]]
            changes.update({name: PerfConfig.switches_by_name()[name].metadata["baseline"] for name in needing})
            also = f" (and {', '.join(needing)})" if needing else ""
            configs.append((f"optimized - {f.name}{also}", dataclasses.replace(PerfConfig(), **changes)))
        for f in ablated:
            configs.extend((f"optimized, {f.name}={value}", dataclasses.replace(PerfConfig(), **{f.name: value}))
                           for value in f.metadata["variants"])
        for f in ablated if add_one_in else ():  # with the values it needs (e.g. compile)
            configs.append((f"baseline + {f.name}", dataclasses.replace(
                PerfConfig.preset("baseline"), **{f.name: f.metadata["optimized"], **f.metadata["requires"]})))
    return configs

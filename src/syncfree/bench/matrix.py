"""The configurations `syncfree bench` compares: baseline, optimized, and the ablation rows: per switch, and the
seeds' before (`SEEDS_BEFORE`).

An ablation row is left out where its switch changes nothing (`PerfConfig.inert_switches` on the bench's
sizes): a leave-one-out row where the switch is inert beside the optimized ones, an add-one-in row where it is inert
beside the baseline ones. `skipped_rows` says which and why, for the report."""

from __future__ import annotations

import dataclasses
from typing import cast

from syncfree.bench.config import BenchConfig, train_config
from syncfree.core.device import resolve_device
from syncfree.core.switches import PerfConfig, Scope
from syncfree.errors import UserError
from syncfree.tasks import switch_scope

SEEDS_BEFORE = "seeds' before"
"""The row of the seeds' own code before their changes: the baseline, with the switches whose seed's before did more
than the conventional code at that value (`PerfConfig.preset("seed_before")`)."""


def bench_configurations(bench: BenchConfig) -> list[tuple[str, PerfConfig]]:
    """The task's configurations; with `bench.rows`, only those rows (and baseline and optimized)."""
    configs = configurations(bench.ablations or bool(bench.rows), bench.add_one_in, bench.compile,
                             bench_scopes(bench))
    if not bench.rows:
        return configs
    names = [name for name, _ in configs]
    unknown = [row for row in bench.rows if row not in names]
    left_out = skipped_rows(bench)
    inert = [row for row in unknown if row in left_out]
    if inert:  # a row that exists elsewhere, but changes nothing here
        raise UserError(f"bench: row {inert[0]!r} is left out here: {left_out[inert[0]]}")
    if unknown:
        raise UserError(f"bench: rows={unknown} unknown; allowed: {', '.join(names)}")
    return [(name, perf) for name, perf in configs if name in ("baseline", "optimized", *bench.rows)]


def bench_scopes(bench: BenchConfig) -> list[Scope]:
    """The scope of each size the bench compares configurations at (a switch may act at one size only, such as
    the critic chunk size)."""
    device = resolve_device(bench.device)
    return [switch_scope(train_config(bench, n, PerfConfig()), device) for n in bench.num_envs or [0]]


def skipped_rows(bench: BenchConfig) -> dict[str, str]:
    """The ablation rows left out because their switch changes nothing there: row name -> why."""
    if not (bench.ablations or bench.rows):
        return {}
    return _ablations(bench.add_one_in, bench.compile, bench_scopes(bench))[1]


def configurations(ablations: bool, add_one_in: bool = True, compile: bool = True,
                   scopes: list[Scope] | None = None) -> list[tuple[str, PerfConfig]]:
    """baseline, optimized, and per switch: optimized without it (leave-one-out), baseline with it (add-one-in).
    `compile=False`: all eager, without the compile rows. `scopes`: leave out the rows whose switch changes
    nothing in every one of these (None: keep every row)."""
    configs = [("baseline", PerfConfig.preset("baseline")), ("optimized", PerfConfig.preset("optimized"))]
    if ablations:
        configs += _ablations(add_one_in, compile, scopes)[0]
    if not compile:
        configs = [(name, dataclasses.replace(perf, compile="off")) for name, perf in configs]
    return configs


def _ablations(add_one_in: bool, compile: bool, scopes: list[Scope] | None
               ) -> tuple[list[tuple[str, PerfConfig]], dict[str, str]]:
    """The ablation rows kept, and those left out with the reason."""
    base, opt = PerfConfig.preset("baseline"), PerfConfig.preset("optimized")
    if not compile:
        base, opt = dataclasses.replace(base, compile="off"), dataclasses.replace(opt, compile="off")
    # a process-wide switch (e.g. retain_host_memory) is on for every trainer once one turned it on: rows in one
    # process cannot compare its values (benchmarks/host_memory.py does, in separate processes); a check is not an
    # optimization; compile has no row where everything runs eagerly
    ablated = [f for f in PerfConfig.switches() if not f.metadata["process_wide"] and not f.metadata["check"]
               and (compile or f.name != "compile")]
    kept: list[tuple[str, PerfConfig]] = []
    skipped: dict[str, str] = {}
    before = PerfConfig.preset("seed_before")
    if not compile:
        before = dataclasses.replace(before, compile="off")
    seed_befores = [f.name for f in PerfConfig.switches() if f.metadata["seed_before"] != f.metadata["baseline"]]
    reasons = [before.inert_reason(name, scope) for name in seed_befores for scope in scopes or ()]
    if scopes and all(reasons):  # every switch whose seed's before differs is inert at every size
        skipped[SEEDS_BEFORE] = cast(str, reasons[-1])
    else:
        kept.append((SEEDS_BEFORE, before))

    def add(name: str, perf: PerfConfig, switch: str, beside: PerfConfig) -> None:
        reasons = [beside.inert_reason(switch, scope) for scope in scopes or ()]
        if scopes and all(reasons):
            skipped[name] = cast(str, reasons[-1])  # `all(reasons)`: every one is a reason, not None
        else:
            kept.append((name, perf))

    for f in ablated:
        changes = {f.name: f.metadata["baseline"]}
        needing = [g.name for g in PerfConfig.switches()  # switches that cannot run without this one
                   if g.metadata["requires"].get(f.name, f.metadata["baseline"]) != f.metadata["baseline"]]
        changes.update({name: PerfConfig.switches_by_name()[name].metadata["baseline"] for name in needing})
        also = f" (and {', '.join(needing)})" if needing else ""
        add(f"optimized - {f.name}{also}", dataclasses.replace(opt, **changes), f.name, opt)
    for f in ablated:
        for value in f.metadata["variants"]:
            variant = dataclasses.replace(opt, **{f.name: value})
            add(f"optimized, {f.name}={value}", variant, f.name, variant)  # whether this value changes anything
    for f in ablated if add_one_in else ():  # with the values it needs (e.g. compile)
        perf = dataclasses.replace(base, **{f.name: f.metadata["optimized"], **f.metadata["requires"]})
        add(f"baseline + {f.name}", perf, f.name, perf)
    return kept, skipped

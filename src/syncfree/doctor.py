"""`syncfree doctor`: where an env or a training loop reads the host, allocates and dispatches, per phase and per
source line.

A target runs for a few warm-up steps, then for a measured window under the counters of `syncfree.core.counters`
with every event attributed to the innermost line of Python outside torch that caused it (`file:line`). The report
gives, per phase and per line, host syncs by kind (`item`, `__bool__`, `cpu`, `tolist`, `nonzero`, boolean-mask
indexing, ...), new tensor storages (count and bytes) and dispatched aten ops, per env step (per minibatch for the
update phases, per iteration for advantages and logging).

Targets: an env alone (a built-in task, `gym:<id>`, or `module:factory` returning a syncfree `VecEnv` or an
rsl_rl / Isaac Lab `VecEnv`, which goes through `syncfree.envs.adapters.from_rsl_rl`), or a whole training
iteration of a task (`train`). The counters see eager code only: a compiled target is examined with its compiled
functions run eagerly (what `fullgraph=True` then checks in the graph).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from syncfree.algo import algorithm_named
from syncfree.config import TrainConfig
from syncfree.core import phases as phases_module
from syncfree.core.counters import Counts, caller_site, tensors_in
from syncfree.core.phases import ROLLOUT_PHASES, UPDATE_PHASES, PhaseCounter, Phases
from syncfree.core.switches import PerfConfig
from syncfree.envs.adapters.staging import HostStaging
from syncfree.envs.api import VecEnv
from syncfree.errors import UserError
from syncfree.tasks import factory, make_task_env, preset, validated
from syncfree.train.runner import Runner

ENV_PHASE = "env"
"""The phase of an env-only target: every `step` of the env."""

BUDGET_KEYS = ("syncs", "allocs", "ops", "repeats")
"""What `--budget` bounds: host syncs, new storages, dispatched ops and ops repeated on the same inputs, per env
step (the phases that run once per step)."""


class RepeatFinder:
    """Ops run again on the same inputs within one run of a phase (one env step): the same aten op, the same
    tensors (storage, offset, shape, strides, dtype, and no op has written to the storage since) and the same other
    arguments. In-place and `out=` ops, views, random ops and ops without tensor inputs are not counted themselves.
    Writes the dispatcher does not see (e.g. numpy writing into a tensor's shared memory) are missed, so such a
    tensor may look unchanged. The inputs' storages are held until the run ends, so an address is not reused for
    another tensor within it."""

    def __init__(self, skip: tuple[str, ...] = ()) -> None:
        self.skip = skip
        self.repeats: Counter = Counter()
        """`file:line` -> ops that repeated an earlier call of the same run."""
        self._seen: set = set()
        self._held: list = []
        self._writes: Counter = Counter()
        """Storage address -> how many dispatched ops wrote to it in this run."""

    def observe(self, func: Any, args: tuple, kwargs: dict, tensors: list[torch.Tensor]) -> None:
        """Called before each dispatched op with the tensors among its arguments (`count_syncs(on_op=...)`)."""
        kind = _op_kind(func)
        if kind is not None:  # the positions (and `out`) this op writes to
            for i, value in enumerate(args):
                if i in kind and isinstance(value, torch.Tensor):
                    self._writes[value.untyped_storage().data_ptr()] += 1
            out = kwargs.get("out")
            for value in tensors_in(out):
                self._writes[value.untyped_storage().data_ptr()] += 1
        elif func not in _SKIPPED_OPS and tensors:
            key = (func, self._key(args), self._key(kwargs))
            if key in self._seen:
                self.repeats[caller_site(self.skip)] += 1
            else:
                self._seen.add(key)
                self._held.extend(x.untyped_storage() for x in tensors)

    def _key(self, x: Any) -> Any:
        """A hashable identity of an argument: a tensor by its storage, view and the writes to it."""
        if isinstance(x, torch.Tensor):
            ptr = x.untyped_storage().data_ptr()
            return ptr, x.storage_offset(), tuple(x.shape), x.stride(), x.dtype, self._writes[ptr]
        if isinstance(x, (tuple, list)):
            return tuple(self._key(item) for item in x)
        if isinstance(x, dict):
            return tuple((k, self._key(v)) for k, v in x.items())
        return x if isinstance(x, (int, float, bool, str, type(None), torch.dtype, torch.device)) else repr(x)


_OP_KINDS: dict[object, frozenset[int] | None] = {}
_SKIPPED_OPS: set = set()
"""Views and random ops: never counted as repeats."""


def _op_kind(func: Any) -> frozenset[int] | None:
    """For an op that writes to its arguments, the positions it writes to; None for a pure op (worked out once per
    op; views and random ops also go to `_SKIPPED_OPS`)."""
    if func not in _OP_KINDS:
        schema = func._schema
        written = None
        if schema.is_mutable:
            written = frozenset(i for i, arg in enumerate(schema.arguments)
                                if arg.alias_info is not None and arg.alias_info.is_write)
        elif func.is_view or torch.Tag.nondeterministic_seeded in func.tags:
            _SKIPPED_OPS.add(func)
        _OP_KINDS[func] = written
    return _OP_KINDS[func]


class DoctorRecorder(PhaseCounter):
    """Per phase: the counts and sites of `PhaseCounter`, and the repeated ops of each run (`RepeatFinder`, one
    per run, inside the counter's own dispatch mode)."""

    def __init__(self) -> None:
        super().__init__(sites=True, skip=(__file__,))
        self.repeats: dict[str, Counter] = {}
        self._finders: list[RepeatFinder] = []
        """The finders of the runs in progress (a stack: a phase may run inside another)."""

    def on_op(self, name: str) -> Callable[[Any, tuple, dict, list], None]:
        self._finders.append(RepeatFinder(skip=(__file__, phases_module.__file__)))
        return self._finders[-1].observe

    def add(self, name: str, counts: Counts) -> None:
        super().add(name, counts)
        self.repeats.setdefault(name, Counter()).update(self._finders.pop().repeats)


@dataclass
class Report:
    """Counts of a measured window: per phase, per source line, and how many steps (minibatches, iterations)
    each phase covered."""

    target: str
    phases: dict[str, Counts]
    per: dict[str, int]
    """Phase -> the number of times it ran in the window (env steps, minibatches or iterations)."""
    unit: dict[str, str] = field(default_factory=dict)
    """Phase -> what it is counted per (`step`, `minibatch`, `iteration`)."""
    repeats: dict[str, Counter] = field(default_factory=dict)
    """Phase -> `file:line` -> ops that repeated an identical earlier call within the same run of the phase."""
    host_time_us: dict[str, float] = field(default_factory=dict)
    """An adapter of a host simulator (`HostProfile`): microseconds of host time per env step by part of its
    `step`, over a window of its own without the counters."""
    transfers: dict[str, float] = field(default_factory=dict)
    """An adapter of a host simulator: copies per env step to the device (`uploads`) and to the host
    (`downloads`); none on the CPU, where its buffers are the trainer's tensors."""
    compile: str = ""
    """An env target: what `perf.compile` does with its step (`compile_verdict`), in words."""

    def per_step(self) -> dict[str, float]:
        """Syncs, allocations, ops and repeated ops per env step over the phases that run once per step."""
        totals = dict.fromkeys(BUDGET_KEYS, 0.0)
        for name, counts in self.phases.items():
            if self.unit.get(name) != "step":
                continue
            totals["syncs"] += counts.syncs / self.per[name]
            totals["allocs"] += counts.allocations / self.per[name]
            totals["ops"] += counts.num_ops / self.per[name]
            totals["repeats"] += sum(self.repeats.get(name, Counter()).values()) / self.per[name]
        return totals

    def sites(self) -> list[dict[str, Any]]:
        """Every source line with what it caused per run of its phase, worst first (syncs, then repeated ops, then
        allocations, then ops)."""
        rows = []
        for phase, counts in self.phases.items():
            n = self.per[phase]
            repeats = self.repeats.get(phase, Counter())
            for where, site in (counts.sites or {}).items():
                rows.append({"site": _site(where), "phase": phase, "per": self.unit.get(phase, "step"),
                             "repeats": repeats[where] / n,
                             "syncs": sum(site.syncs.values()) / n,
                             "sync_kinds": {k: v / n for k, v in site.syncs.most_common()},
                             "allocs": site.allocations / n, "bytes": site.allocated_bytes / n,
                             "ops": sum(site.ops.values()) / n,
                             "top_ops": {k: v / n for k, v in site.ops.most_common(3)}})
        return sorted(rows, key=lambda r: (-r["syncs"], -r["repeats"], -r["allocs"], -r["ops"]))

    def to_json(self) -> dict[str, Any]:
        phases = {name: {"per": self.unit.get(name, "step"), "runs": self.per[name],
                         "syncs": c.syncs / self.per[name], "allocs": c.allocations / self.per[name],
                         "bytes": c.allocated_bytes / self.per[name], "ops": c.num_ops / self.per[name],
                         "sync_kinds": {k: v / self.per[name] for k, v in (c.host_reads + c.sync_ops).items()}}
                  for name, c in self.phases.items()}
        return {"target": self.target, "per_step": self.per_step(), "phases": phases, "sites": self.sites(),
                "host_time_us": self.host_time_us, "transfers": self.transfers, "compile": self.compile}


def _site(where: str) -> str:
    """A site as one full path and its line, whoever's file it is (yours, syncfree's, torch's): the same form for
    every row, which an editor or terminal opens at the line."""
    path, _, line = where.rpartition(":")
    return f"{os.path.abspath(path)}:{line}"


# ---------------------------------------------------------------------------------------------------- targets

def as_vec_env(env: Any) -> VecEnv:
    """A syncfree `VecEnv` as it is; an rsl_rl-style env through the adapter (`syncfree.tasks.factory`)."""
    return factory.as_vec_env(env, "doctor")


def task_env(task: str, num_envs: int, perf: PerfConfig, device: str = "cpu", seed: int = 0) -> VecEnv:
    """The env of a built-in task (or `gym:<id>`) with its preset's options and `perf`'s env-side switches."""
    cfg = preset(task)
    cfg.perf = perf
    return make_task_env(cfg, num_envs or cfg.env.num_envs, torch.device(device), seed)


def random_actions(env: VecEnv, steps: int, seed: int = 0) -> list[torch.Tensor]:
    """`steps` action batches drawn beforehand (uniform in [-1, 1], or uniform choices), so drawing them is not
    counted."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    spec, n = env.action_spec, env.num_envs
    if spec.kind == "discrete":
        draws = [torch.randint(spec.size, (n,), generator=gen) for _ in range(steps)]
    else:
        draws = [torch.rand(n, spec.size, generator=gen) * 2 - 1 for _ in range(steps)]
    return [a.to(env.device) for a in draws]


def compile_verdict(env: VecEnv) -> str:
    """What `perf.compile` does with `env`'s step, in words: nothing to compile, one graph, or the line that breaks
    its graph (`VecEnv.step_graph_break`), which `auto` then runs eagerly and `step` or `hot` refuse."""
    if type(env).compile_step is VecEnv.compile_step:
        return "the env compiles nothing: its step runs eagerly under every perf.compile"
    import torch._dynamo

    if torch._dynamo.config.disable:
        return "not checked: torch.compile is disabled in this process (TORCH_COMPILE_DISABLE)"
    found = env.step_graph_break()
    if found is None:
        return "the env's step compiles as one graph"
    return (f"the env's step does not compile as one graph: {found.with_code()}; perf.compile=auto runs it eagerly "
            "(the trainer compiled), step and hot refuse it")


def examine_env(env: VecEnv, steps: int = 32, warmup: int = 8, target: str = "env") -> Report:
    """`warmup` steps, then `steps` counted ones, every `env.step` in phase `env`; for an adapter of a host
    simulator (`HostStaging`), then `steps` more uncounted ones timed by part, and its copies per step. The report
    says too what `perf.compile` does with the env's step (`compile_verdict`)."""
    profiled = isinstance(env, HostStaging)
    actions = random_actions(env, warmup + steps * (2 if profiled else 1))
    env.reset()
    with torch.inference_mode():
        for a in actions[:warmup]:
            env.step(a)
        phases, counter = Phases(), DoctorRecorder()
        with phases.attached(counter):
            for a in actions[warmup:warmup + steps]:
                with phases(ENV_PHASE):
                    env.step(a)
        report = Report(target, counter.counts, {ENV_PHASE: steps}, {ENV_PHASE: "step"}, counter.repeats,
                        compile=compile_verdict(env))
        if isinstance(env, HostStaging):
            env.host_profile.reset()
            before = env.transfers()
            for a in actions[warmup + steps:]:
                env.step(a)
            report.host_time_us = {part: seconds / steps * 1e6 for part, seconds in env.host_profile.seconds.items()}
            report.transfers = {k: (v - before[k]) / steps for k, v in env.transfers().items()}
    return report


def examine_training(cfg: TrainConfig, warmup_iterations: int = 1, target: str = "train") -> Report:
    """`warmup_iterations` iterations of `cfg`, then one counted iteration with the runner's phases (act, store,
    env, normalizer, stats per step; the update's per minibatch; advantages and logging once)."""
    cfg.iterations = warmup_iterations
    cfg.log.progress = False
    runner = Runner(cfg)
    try:
        runner.learn()
        counter = DoctorRecorder()
        runner.cfg.iterations = runner.iteration + 1
        with runner.phases.attached(counter):
            runner.learn()
    finally:
        runner.close()
    algorithm = runner.algorithm
    per, unit = {}, {}
    for name in counter.counts:
        if name in ROLLOUT_PHASES:
            per[name], unit[name] = algorithm.steps_per_env, "step"
        elif name in UPDATE_PHASES:
            per[name], unit[name] = algorithm.minibatches_per_update, "minibatch"
        else:  # advantages, logging
            per[name], unit[name] = 1, "iteration"
    return Report(target, counter.counts, per, unit, counter.repeats)


def with_switches(perf: PerfConfig, settings: list[str]) -> PerfConfig:
    """`perf` with `NAME=VALUE` settings applied (values parsed as the switch's type)."""
    fields = PerfConfig.switches_by_name()
    changes: dict[str, Any] = {}
    for setting in settings:
        name, _, text = setting.partition("=")
        if name not in fields:
            raise UserError(f"doctor: --switch {setting!r}: no switch {name!r} (see `syncfree switches`)")
        default, seed_before = fields[name].default, fields[name].metadata["seed_before"]
        if isinstance(default, bool) and isinstance(seed_before, str) and text == seed_before:
            changes[name] = text
        elif isinstance(default, bool):
            allowed = "true or false" if isinstance(seed_before, bool) else f"true, false or {seed_before}"
            if text.lower() not in ("true", "false"):
                raise UserError(f"doctor: --switch {setting!r}: {name} is {allowed}")
            changes[name] = text.lower() == "true"
        elif isinstance(default, int):
            try:
                changes[name] = int(text)
            except ValueError:
                raise UserError(f"doctor: --switch {setting!r}: {name} is an integer") from None
        else:
            changes[name] = text
    return dataclasses.replace(perf, **changes)


# ------------------------------------------------------------------------------------------------------ output

def parse_budget(text: str) -> dict[str, float]:
    """`syncs=0,allocs=10` -> {"syncs": 0.0, "allocs": 10.0}."""
    budget = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        if key not in BUDGET_KEYS:
            raise UserError(f"doctor: --budget {part!r}: unknown key {key!r}; allowed: {', '.join(BUDGET_KEYS)}")
        try:
            budget[key] = float(value)
        except ValueError:
            raise UserError(f"doctor: --budget {part!r}: {value!r} is not a number") from None
    return budget


def over_budget(report: Report, budget: dict[str, float]) -> list[str]:
    """One line per bound the report exceeds."""
    measured = report.per_step()
    return [f"{key} per step {measured[key]:g} > budget {bound:g}" for key, bound in budget.items()
            if measured[key] > bound + 1e-9]


def table(report: Report, top: int = 15) -> str:
    """The report as text: phases, then the worst source lines."""
    lines = [f"syncfree doctor: {report.target}", "",
             f"{'phase':<18}{'per':>10}{'syncs':>9}{'allocs':>9}{'KiB':>10}{'ops':>9}  sync kinds"]
    for name, c in report.phases.items():
        n = report.per[name]
        kinds = Counter({k: v / n for k, v in (c.host_reads + c.sync_ops).items()})
        lines.append(f"{name:<18}{report.unit.get(name, 'step'):>10}{c.syncs / n:>9.2f}{c.allocations / n:>9.2f}"
                     f"{c.allocated_bytes / n / 1024:>10.1f}{c.num_ops / n:>9.1f}  "
                     + ", ".join(f"{k} {v:g}" for k, v in kinds.most_common()))
    total = report.per_step()
    lines += ["", f"per env step: {total['syncs']:g} host syncs, {total['allocs']:g} new storages, "
              f"{total['ops']:g} ops, {total['repeats']:g} repeated on the same inputs"]
    if report.compile:
        lines.append(f"compile: {report.compile}")
    if report.host_time_us:
        spent = max(sum(report.host_time_us.values()), 1e-9)
        parts = ", ".join(f"{part} {us:.1f} ({us / spent:.0%})" for part, us in report.host_time_us.items())
        copies = ", ".join(f"{v:g} {k}" for k, v in report.transfers.items())
        lines += [f"host time per env step (uncounted window): {spent:.1f} us: {parts}",
                  f"host<->device copies per env step: {copies}"]
    lines += ["", f"worst lines (of {len(report.sites())}; per run of their phase):", ""]
    for row in report.sites()[:top]:
        sync_kinds = ", ".join(f"{k} {v:g}" for k, v in row["sync_kinds"].items())
        ops = ", ".join(f"{k.removeprefix('aten::')} {v:g}" for k, v in row["top_ops"].items())
        repeats = f"  repeated {row['repeats']:g}" if row["repeats"] else ""
        sync_text = f" ({sync_kinds})" if sync_kinds else ""
        lines.append(f"{row['site']}  [{row['phase']}]  syncs {row['syncs']:g}{sync_text}"
                     f"  allocs {row['allocs']:g}  ops {row['ops']:g} ({ops}){repeats}")
    return "\n".join(lines)


def write_json(report: Report) -> str:
    return json.dumps(report.to_json(), indent=1)


def run(args: argparse.Namespace) -> int:
    """`syncfree doctor` with its parsed arguments: print the report; 1 when a count exceeds `--budget`."""
    budget = parse_budget(args.budget)
    perf = with_switches(PerfConfig.preset(args.perf), args.switch)
    if args.train:
        cfg = preset(args.task, algorithm=args.algorithm or None)
        cfg.perf, cfg.device = perf, args.device
        cfg.env.num_envs = args.num_envs or cfg.env.num_envs
        cfg.log.tensorboard = False
        needed, changed = cfg.learn_at_once()  # the counted iteration takes its update (SAC: no random actions)
        report = examine_training(validated(cfg), max(args.warmup or 1, needed),
                                  target=f"train {args.task} with {cfg.algorithm} ({args.perf} switches"
                                  f"{', ' + changed if changed else ''})")
    else:
        if args.task:
            env = task_env(args.task, args.num_envs, perf, args.device)
            name = f"{args.task} env ({args.perf} switches)"
        else:
            env, name = factory.as_vec_env(factory.load(args.env, f"doctor: --env {args.env!r}")(),
                                           f"doctor: --env {args.env!r}"), args.env
        report = examine_env(env, args.steps, 8 if args.warmup is None else args.warmup, target=name)
    print(write_json(report) if args.json else table(report, args.top))
    exceeded = over_budget(report, budget)
    for line in exceeded:
        print(f"syncfree doctor: over budget: {line}", file=sys.stderr)
    return 1 if exceeded else 0


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    """`syncfree doctor`'s arguments, checked (one line naming the culprit)."""
    parser = argparse.ArgumentParser(
        prog="syncfree doctor", description="Run an env (or, with `train`, a training iteration) for a few warm-up "
        "steps and a measured window, and report its host syncs, new tensor storages and dispatched ops per phase "
        "and per source line (file:line), worst first.")
    parser.add_argument("train", nargs="?", choices=["train"], help="examine the trainer's whole loop on --task")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--task", help="a task (see `syncfree tasks`)")
    target.add_argument("--env", help="module:factory returning a syncfree VecEnv or an rsl_rl VecEnv")
    parser.add_argument("--algorithm", default="", help="with train: the algorithm that trains --task (default: "
                        "its own; the task's preset for it where it has one)")
    parser.add_argument("--perf", choices=("optimized", "baseline", "seed_before"), default="optimized",
                        help="the switches' preset (the env-side switches act on manager-based envs, g1-track's)")
    parser.add_argument("--switch", action="append", default=[], metavar="NAME=VALUE",
                        help="set one switch after the preset (repeatable), e.g. --switch fast_history=false")
    parser.add_argument("--env.num_envs", "--num_envs", dest="num_envs", type=int, default=0, help="envs (default: the task preset's)")
    parser.add_argument("--steps", type=int, default=32, help="measured env steps (env targets)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="env steps (env targets, default 8) or iterations (train, default 1) run first")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--top", type=int, default=15, help="source lines to list")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--budget", default="", help="e.g. syncs=0,allocs=20: exit 1 when a per-step count "
                        "exceeds its bound")
    args = parser.parse_args(argv)
    if args.steps < 1 or (args.warmup or 0) < 0 or args.num_envs < 0:
        raise UserError("doctor: --steps must be >= 1, --warmup and --env.num_envs >= 0")
    if args.train and not args.task:
        raise UserError("doctor: train needs --task")
    if args.algorithm and not args.train:
        raise UserError("doctor: --algorithm needs train (an env alone is stepped with random actions)")
    if args.algorithm:
        algorithm_named(args.algorithm)  # one line naming the algorithms there are
    return args

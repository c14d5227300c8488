"""`torch.compile` of the hot functions (`PerfConfig.compile`), optionally replayed as CUDA graphs.

Every compiled function is a whole graph (`fullgraph=True`): a host read or an unsupported call inside it fails at
the first call instead of splitting the graph silently, which is how "no host read" is checked for compiled code
(the op counters of `syncfree.core.counters` see eager code only). Shapes are static (`dynamic=False`): after the first
iteration nothing compiles again.
"""

from __future__ import annotations

import functools
import linecache
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from syncfree.core.switches import PerfConfig
from syncfree.errors import UserError

F = TypeVar("F", bound=Callable[..., Any])


def use_cuda_graphs(perf: PerfConfig, device: torch.device) -> bool:
    """Whether compiled graphs are replayed as CUDA graphs; `cuda_graphs=on` off a CUDA device is an error."""
    if perf.cuda_graphs == "on" and device.type != "cuda":
        raise UserError(f"perf.cuda_graphs=on needs a CUDA device, but the run is on {device.type} "
                        "(use perf.cuda_graphs=auto or off)")
    return perf.compile != "off" and perf.cuda_graphs != "off" and device.type == "cuda"


def compile_cache_dir() -> Path:
    """Where torch keeps compiled kernels and graphs between runs: `TORCHINDUCTOR_CACHE_DIR` when the user set it,
    else `$XDG_CACHE_HOME/syncfree/torchinductor` (`~/.cache/syncfree/torchinductor`), which outlives a reboot,
    unlike torch's own default under the temporary folder (which torch writes into the variable when it first
    looks it up, so that value counts as unset). `hot` points torch there when it first compiles."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
        torch_default = os.path.abspath(default_cache_dir())
    except ImportError:  # another torch layout: then any value counts as the user's
        torch_default = None
    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if current and os.path.abspath(current) != torch_default:
        return Path(current)
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_home) / "syncfree" / "torchinductor"


def missing_compiler(device: torch.device) -> str | None:
    """The C++ compilers torch looked for, where compiled code on `device` needs one and none answers (torch's CPU
    kernels are C++ it builds at the first call: without a compiler that call fails); None where one answers, on
    another device, or where nothing compiles (dynamo disabled: `TORCH_COMPILE_DISABLE=1`)."""
    if device.type != "cpu" or torch._dynamo.config.disable:
        return None
    try:
        from torch._inductor import config as inductor_config
        from torch._inductor.cpp_builder import get_cpp_compiler
        from torch._inductor.exc import InvalidCxxCompiler
    except ImportError:  # another torch layout: assume it finds one, as before
        return None
    try:
        get_cpp_compiler()
    except InvalidCxxCompiler:
        cxx = inductor_config.cpp.cxx
        return ", ".join(str(c) for c in (cxx if isinstance(cxx, tuple | list) else (cxx,)) if c)
    return None


def hot(fn: F, perf: PerfConfig, device: torch.device, static: Iterable[torch.Tensor] = ()) -> F:
    """`fn` itself with compile off, else its compiled whole graph; `static`: the tensors it writes in place, which
    keep their addresses (`mark_static`).

    Under a dispatch mode (the op and sync counters of `syncfree.core.counters`) dynamo does not compile, so there the
    compiled form runs `fn` eagerly: counts of a compiled configuration are those of the same functions run
    eagerly, and the graph itself is checked by `fullgraph=True`. With dynamo disabled (`TORCH_COMPILE_DISABLE=1`)
    `fn` runs eagerly too."""
    if perf.compile == "off":
        return fn
    if perf.compile not in ("hot", "step"):
        raise ValueError(f"perf.compile={perf.compile} is chosen per run (syncfree.train.compile_choice); "
                         "code built outside a Runner takes off, hot or step")
    import torch._dynamo  # not imported by eager runs: it takes a second or two
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(compile_cache_dir())  # read by torch when it compiles
    _allow_graphs_per_function(RECOMPILE_LIMIT)
    mark_static(perf, device, *static)
    if use_cuda_graphs(perf, device):
        graph = torch.compile(fn, fullgraph=True, dynamic=False, mode="reduce-overhead")
    else:  # each call of a graph re-checks its inputs' sizes and strides, which dynamo's guards have just checked
        graph = torch.compile(fn, fullgraph=True, dynamic=False, options=GRAPH_OPTIONS)

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        if _get_current_dispatch_mode() is not None or torch._dynamo.config.disable:
            return fn(*args, **kwargs)
        return graph(*args, **kwargs)

    return run  # type: ignore[return-value]


def mark_static(perf: PerfConfig, device: torch.device, *tensors: torch.Tensor) -> None:
    """With CUDA graphs: tell the compiler these tensors keep their address (state a graph updates in place, e.g.
    optimizer moments, storage rows, env state), so replays update them directly; CUDA graph trees skip graphs that
    mutate other inputs (`tests/test_cuda_graph_replay.py` checks every hot graph)."""
    if use_cuda_graphs(perf, device):
        import torch._dynamo

        for tensor in tensors:
            torch._dynamo.mark_static_address(tensor)


def outputs_overwritten(perf: PerfConfig, device: torch.device) -> bool:
    """Whether compiled graphs' outputs live only until their next replay (CUDA graph trees overwrite them, or give
    their memory to other graphs' outputs): state carried from one call to the next (a recurrent state) is then
    copied into a tensor of its own, which the next call reads in place."""
    return use_cuda_graphs(perf, device)


CUDA_GRAPH_ALIGNMENT = 16
"""Bytes a static input's address must be a multiple of: CUDA graph trees take a tensor that is not as not static (it
is copied in at every replay, and a graph that writes it is run without its CUDA graph)."""


def unaligned_for_cuda_graphs(perf: PerfConfig, device: torch.device, tensors: Iterable[torch.Tensor]) -> bool:
    """Whether CUDA graphs would replay graphs writing `tensors` and some of them do not start at an aligned address
    (e.g. rows of a `[steps, envs]` buffer with an odd env count): such a graph must write aligned tensors of its
    own, copied to these outside it."""
    return use_cuda_graphs(perf, device) and any(t.data_ptr() % CUDA_GRAPH_ALIGNMENT for t in tensors)


GRAPH_OPTIONS: dict[str, str | int | bool | Callable[..., Any]] = {"size_asserts": False}
"""Inductor's settings for the graphs without CUDA graphs. `size_asserts` (on by default) makes a graph's every call
assert each input's sizes and strides, in Python, before its kernels run: a graph of the minibatch update takes
about 60 tensors, and the asserts cost about a tenth of its call on the CPU at small sizes. With static shapes
(`dynamic=False`) dynamo's guards have already matched every input's sizes and strides to the graph's."""

RECOMPILE_LIMIT = 64
"""Graphs kept per compiled function. One process may hold trainers of several sizes (static shapes: a graph each)
and settings that dynamo guards on (e.g. deterministic algorithms): `torch.compile`'s default of 8 would make a
whole-graph function fail at the ninth."""


def _allow_graphs_per_function(limit: int) -> None:
    import torch._dynamo

    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, limit)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, 4 * limit)


def compile_counts() -> dict[str, int]:
    """Graphs compiled so far in this process (dynamo's counters): steady state means these stop growing."""
    from torch._dynamo.utils import counters

    return {"unique_graphs": int(counters["stats"]["unique_graphs"]),
            "frames_ok": int(counters["frames"]["ok"])}


@dataclass(frozen=True)
class GraphBreak:
    """Where a function leaves the one graph `fullgraph=True` demands: the line (`file:line`), what dynamo could not
    put in a graph there, and the line's code, so that a user sees what to change without dynamo's traceback."""

    site: str
    why: str
    code: str = ""

    def __str__(self) -> str:
        return f"{self.site} ({self.why})"

    def with_code(self) -> str:
        """The line, the reason and the line's code."""
        return f"{self.site} ({self.why}: {self.code})" if self.code else str(self)


class _Traced(Exception):
    """Raised by the probe's backend: dynamo traced the whole function into one graph, and nothing is to run."""


def _refuse_to_run(graph: Any, example_inputs: Any) -> Any:
    raise _Traced


def graph_break(fn: Callable[..., Any], *args: Any) -> GraphBreak | None:
    """Where `fn(*args)` would leave one whole graph, or None: it traces as one. Dynamo traces it on fake tensors
    and the graph is handed to a backend that refuses it, so nothing runs (state `fn` updates in place is left as
    it was) and nothing is compiled: for a classic env's step, about a second the first time in a process and a
    tenth of one after, against the tens of seconds of a compile. Where nothing compiles (dynamo disabled, or under a dispatch mode, where `hot` runs eagerly) nothing
    can break either: None."""
    import torch._dynamo

    if torch._dynamo.config.disable or _get_current_dispatch_mode() is not None:
        return None
    traced = torch.compile(fn, fullgraph=True, dynamic=False, backend=_refuse_to_run)
    try:
        traced(*args)
    except torch._dynamo.exc.BackendCompilerFailed as e:
        if isinstance(e.inner_exception, _Traced):
            return None
        return _located(e)
    except torch._dynamo.exc.TorchDynamoException as e:
        return _located(e)
    raise RuntimeError(f"{getattr(fn, '__qualname__', fn)} ran while it was only to be traced")


def _located(error: Exception) -> GraphBreak:
    """The innermost traced line outside torch where dynamo stopped, and its reason in a few words."""
    torch_dir = os.path.dirname(torch.__file__) + os.sep
    frames = list(getattr(error, "real_stack", None) or [])
    outside = [f for f in frames if not f.filename.startswith(torch_dir)] or frames
    why = getattr(error, "gb_type", None) or _why(str(error))
    if not outside:
        return GraphBreak("an unknown line", why)
    frame = outside[-1]
    path = frame.filename
    shown = os.path.relpath(path) if path.startswith(os.getcwd() + os.sep) else path
    code = linecache.getline(path, frame.lineno or 0).strip()
    return GraphBreak(f"{shown}:{frame.lineno}", why, code)


def _why(text: str) -> str:
    """A dynamo error's reason in a few words, where it gives no graph-break type (a guard on a value computed on
    the device, or a torch that does not name the types)."""
    if "data-dependent" in text:  # a branch on a value the device computes, e.g. `if t.item() > 0:`
        return "data-dependent branching"
    return text.strip().splitlines()[0][:120] if text.strip() else "not traceable"

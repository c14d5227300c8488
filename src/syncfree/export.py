"""Export a checkpoint's deterministic actor, with its observation normalizers baked in, for deployment.

`export_checkpoint(path, out_dir)` writes ONNX graphs with a dynamic batch axis and a JSON sidecar:

- MLP policy: `<task>-actor.onnx`, `actor_obs [N, D] -> actions` — the Gaussian mean [N, A] (continuous), or the
  arg-max action [N] (int64) and the `logits` [N, A] (discrete);
- token policy: `<task>-encoder.onnx` (`actor_obs -> tokens [N, num_tokens, token_dim]`, quantized codes),
  `<task>-decoder.onnx` (`tokens, actor_obs -> actions`, the mean) and `<task>-actor.onnx`, both combined
  (`actor_obs -> actions`);
- recurrent policies: `<task>-actor.onnx`, `actor_obs` and the state (`h_in`, `c_in` for an LSTM; the recurrent
  token policy's previous action, `last_action_in`) -> `actions` (and `logits`, discrete) and the next state
  (`h_out`, ...): the caller carries it, zeros start an episode;
- `<task>-actor.json`: the files, their input and output names, shapes and types, the layout of the actor
  observation (names, offsets and widths), the recurrent state and the syncfree version.

Only the checkpoint is read: the policy is rebuilt from its config, its observation shapes and action spec, so
no environment is needed; the policy says what to write (`deployment`, `syncfree.policy.deploy`). Needs the
`export` extra (`pip install 'syncfree[export]'`: onnx and onnxscript).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import logging
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import torch
from torch import Tensor

import syncfree
from syncfree.errors import UserError
from syncfree.outputs import check_output_dir, task_file_name
from syncfree.policy.deploy import STATE_NOTE, Deployment, Graph
from syncfree.tasks import action_map_of
from syncfree.train.evaluate import LoadedPolicy, load_policy

T = TypeVar("T")

log = logging.getLogger("syncfree")

FORMATS = ("onnx",)
EXTRA_HINT = "pip install 'syncfree[export]'"
_EXAMPLE_ROWS = 4
"""Rows of the example batch traced by the exporter (not 0 or 1: those would fix the batch axis)."""


class Deployable(Protocol):
    """What export asks of a policy (every policy answers)."""

    def deployment(self, rows: int) -> Deployment: ...


def export_checkpoint(path: str | Path, out_dir: str | Path | None = None, format: str = "onnx") -> list[Path]:
    """Export the deterministic actor of the checkpoint at `path` into `out_dir` (default: the checkpoint's
    folder). Returns the written files, the JSON sidecar last. Bad input raises `UserError`."""
    if format not in FORMATS:
        raise UserError(f"export: format={format!r} is invalid; allowed: {', '.join(FORMATS)}")
    require_onnx()
    path = Path(path)
    if out_dir is not None:
        check_output_dir(out_dir, "export: --out")  # before the checkpoint is read
        if Path(out_dir).suffix in (".onnx", ".json") and not Path(out_dir).exists():
            raise UserError(f"export: --out {out_dir}: names the folder the graphs (<task>-actor.onnx) and their "
                            "JSON sidecar go into, not a file; give a folder (--out exported)")
    loaded = load_policy(path, autocast=False)  # the exported graphs compute in float32 (a runtime picks its own)
    deployment = cast(Deployable, loaded.policy).deployment(_EXAMPLE_ROWS)
    out = Path(out_dir) if out_dir is not None else path.parent
    stem = task_file_name(loaded.cfg.task)
    files = {graph.name: out / f"{stem}-{graph.name}.onnx" for graph in deployment.graphs}
    sidecar = out / f"{stem}-actor.json"
    for file in [*files.values(), sidecar]:  # before anything is written
        if file.is_dir():
            raise UserError(f"export: {file} is a folder; move it away or export elsewhere (--out)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"export: {out}: cannot create the folder ({type(e).__name__})") from None
    exporters = {graph.name: written(files[graph.name], functools.partial(export_onnx, graph, source=f"checkpoint {path}"))
                 for graph in deployment.graphs}
    meta = describe(loaded, deployment, {name: file.name for name, file in files.items()}, exporters)
    written(sidecar, lambda tmp: tmp.write_text(json.dumps(meta, indent=2) + "\n"))
    return [*files.values(), sidecar]


def written(file: Path, write: Callable[[Path], T]) -> T:
    """`write` to a temporary file beside `file`, then that file put in `file`'s place: a name that is a link is
    replaced, never written through (its target stays as it was), and a failed write leaves no part of a file."""
    tmp = file.with_name(f".{file.stem}.{os.getpid()}.tmp{file.suffix}")
    try:
        result = write(tmp)
        os.replace(tmp, file)
        return result
    except OSError as e:
        raise UserError(f"export: cannot write {file} ({e.strerror or type(e).__name__})") from None
    finally:
        tmp.unlink(missing_ok=True)


def require_onnx() -> None:
    """`torch.onnx.export` needs onnx, and onnxscript for its default (dynamo) exporter."""
    missing = [name for name in ("onnx", "onnxscript") if importlib.util.find_spec(name) is None]
    if missing:
        raise UserError(f"export: {' and '.join(missing)} not installed ({EXTRA_HINT})")


def export_onnx(graph: Graph, file: Path, source: str) -> str:
    """Write `graph` to `file` with its dynamic axes (the batch's, and any other it names); returns the exporter
    used ("dynamo" or "torchscript").

    The default (dynamo) exporter is tried first; if it fails, the TorchScript exporter (`dynamo=False`) is
    tried with a warning. Both failing is a `UserError` naming the graph and the reason.
    """
    names = list(graph.inputs)
    dims = {label: torch.export.Dim(label) for name in names for label in graph.dynamic_axes(name).values()}
    dynamic_shapes = {name: {axis: dims[label] for axis, label in graph.dynamic_axes(name).items()} for name in names}
    try:
        with torch.no_grad(), _quiet_exporter():
            torch.onnx.export(graph.module, (), str(file), kwargs=graph.inputs, input_names=names,
                              output_names=graph.outputs, dynamic_shapes=dynamic_shapes, external_data=False,
                              verbose=False)
        return "dynamo"
    except Exception as e:
        first_error = e
    # Fallback: the TorchScript exporter traces the same module; the sidecar records which exporter wrote each file.
    log.warning("export: the dynamo exporter failed on the %s graph (%s); retrying with dynamo=False", graph.name,
                _one_line(first_error))
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", torch.jit.TracerWarning)  # shape checks in Python: fixed widths
            torch.onnx.export(graph.module, (), str(file), kwargs=graph.inputs, input_names=names,
                              output_names=graph.outputs, dynamo=False,
                              dynamic_axes={name: graph.dynamic_axes(name) for name in names + graph.outputs})
        return "torchscript"
    except Exception as e:
        file.unlink(missing_ok=True)
        raise UserError(f"export: {source}: the {graph.name} graph cannot be exported to ONNX "
                        f"(dynamo: {_one_line(first_error)}; dynamo=False: {_one_line(e)})") from None


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """Hide the exporter's progress lines and its warnings about optional packages (torchvision ops) and
    torch-internal deprecations; errors still raise."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "onnxscript", "onnx_ir")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)  # the optimizer logs each pass at INFO
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\..*|copyreg")
            warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\..*|onnxscript\..*")
            # inputs sharing the batch axis: the exporter names it once
            warnings.filterwarnings("ignore", message=r".*axis name: batch will not be used", category=UserWarning)
            # torch.nn.LSTM / GRU (the recurrent actors): their flat weight list is rebuilt while traced, and the
            # traced code's size checks call a deprecated function
            warnings.filterwarnings("ignore", message=r"The tensor attributes self\.rnn\._flat_weights",
                                    category=UserWarning)
            warnings.filterwarnings("ignore", message=r"_check_is_size will be removed", category=FutureWarning)
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _one_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def describe(loaded: LoadedPolicy, deployment: Deployment, files: dict[str, str],
             exporters: dict[str, str]) -> dict[str, Any]:
    """The sidecar: what each file computes, its inputs and outputs, the actor observation's layout and the
    recurrent state."""
    kind, size = deployment.action_spec.kind, deployment.action_spec.size
    meta: dict[str, Any] = {
        "syncfree_version": syncfree.__version__,
        "format": "onnx",
        "task": loaded.cfg.task,
        "policy_kind": deployment.kind,
        "checkpoint_iteration": loaded.iteration,
        "action": {"kind": kind, "size": size,
                   "note": "deterministic action: the Gaussian mean, as the policy outputs it (not clipped)"
                   if kind == "continuous" else "deterministic action: the arg-max of the logits"},
        "observation": deployment.observation,
        "graphs": {},
    }
    with torch.no_grad():
        for graph in deployment.graphs:
            outs = graph.module(**graph.inputs)
            outs = outs if isinstance(outs, tuple) else (outs,)
            shapes = {**graph.inputs, **dict(zip(graph.outputs, outs, strict=True))}
            meta["graphs"][graph.name] = {
                "file": files[graph.name],
                "exporter": exporters[graph.name],
                "inputs": [_io(graph, name, shapes[name]) for name in graph.inputs],
                "outputs": [_io(graph, name, shapes[name]) for name in graph.outputs],
                **({"note": graph.note} if graph.note else {}),
            }
            if graph.state:
                meta["state"] = {
                    "graph": graph.name,
                    "carried": [{"input": i, "output": o, "shape": _shape(graph, i, shapes[i]),
                                 "dtype": _dtype(shapes[i])} for i, o in graph.state],
                    "note": STATE_NOTE}
    meta.update(deployment.sections)
    env_map = action_map_of(loaded.cfg.task)  # the registry's word on the task: nothing imported, no env built
    if kind == "continuous" and env_map:
        meta["action"] = {**meta["action"], "env_map": env_map}
    return meta


def _io(graph: Graph, name: str, tensor: Tensor) -> dict[str, Any]:
    return {"name": name, "shape": _shape(graph, name, tensor), "dtype": _dtype(tensor)}


def _shape(graph: Graph, name: str, tensor: Tensor) -> list[int | str]:
    """The tensor's shape, its dynamic axes named."""
    shape: list[int | str] = list(tensor.shape)
    for axis, label in graph.dynamic_axes(name).items():
        shape[axis] = label
    return shape


def _dtype(tensor: Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")

"""Export a checkpoint's deterministic actor, with its observation normalizers baked in, for deployment.

`export_checkpoint(path, out_dir)` writes ONNX graphs with a dynamic batch axis and a JSON sidecar:

- MLP policy: `<task>-actor.onnx`, `actor_obs [N, D] -> actions` — the Gaussian mean [N, A] (continuous), or the
  arg-max action [N] (int64) and the `logits` [N, A] (discrete);
- token policy: `<task>-encoder.onnx` (`actor_obs -> tokens [N, num_tokens, token_dim]`, quantized codes),
  `<task>-decoder.onnx` (`tokens, actor_obs -> actions`, the mean) and `<task>-actor.onnx`, both combined
  (`actor_obs -> actions`);
- `<task>-actor.json`: the files, their input and output names, shapes and types, the layout of the actor
  observation (names, offsets and widths) and the syncfree version.

Only the checkpoint is read: the policy is rebuilt from its config, its observation shapes and action spec, so
no environment is needed. Needs the `export` extra (`pip install 'syncfree[export]'`: onnx and onnxscript).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn

import syncfree
from syncfree.algo import algorithm_for
from syncfree.errors import UserError
from syncfree.outputs import check_output_dir
from syncfree.policy.actor_critic import PolicyBase
from syncfree.policy.token_encoder import TokenActorCritic
from syncfree.train.evaluate import LoadedPolicy, load_policy

log = logging.getLogger("syncfree")

FORMATS = ("onnx",)
EXTRA_HINT = "pip install 'syncfree[export]'"
_EXAMPLE_ROWS = 4
"""Rows of the example batch traced by the exporter (not 0 or 1: those would fix the batch axis)."""


@dataclasses.dataclass
class Graph:
    """One module to export: its forward's argument names are the ONNX input names."""

    name: str
    module: nn.Module
    inputs: dict[str, Tensor]
    """Input name -> example tensor (batch first)."""
    outputs: list[str]


class _MLPActor(nn.Module):
    """Continuous: the Gaussian mean. Discrete: the arg-max action (int64) and the logits."""

    def __init__(self, policy: PolicyBase) -> None:
        super().__init__()
        self.policy = policy
        self.discrete = policy.action_spec.kind == "discrete"

    def forward(self, actor_obs: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        if not self.discrete:
            return self.policy.act_deterministic(actor_obs)
        logits = self.policy.dist_params(actor_obs)
        return logits.argmax(-1), logits


class _TokenEncoder(nn.Module):
    def __init__(self, policy: TokenActorCritic) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, actor_obs: Tensor) -> Tensor:
        return self.policy.encode(actor_obs)


class _TokenDecoder(nn.Module):
    def __init__(self, policy: TokenActorCritic) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, tokens: Tensor, actor_obs: Tensor) -> Tensor:
        return self.policy.decode(tokens, actor_obs)


class _TokenActor(nn.Module):
    def __init__(self, policy: TokenActorCritic) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, actor_obs: Tensor) -> Tensor:
        return self.policy.act_deterministic(actor_obs)


def export_checkpoint(path: str | Path, out_dir: str | Path | None = None, format: str = "onnx") -> list[Path]:
    """Export the deterministic actor of the checkpoint at `path` into `out_dir` (default: the checkpoint's
    folder). Returns the written files, the JSON sidecar last. Bad input raises `UserError`."""
    if format not in FORMATS:
        raise UserError(f"export: format={format!r} is invalid; allowed: {', '.join(FORMATS)}")
    require_onnx()
    path = Path(path)
    if out_dir is not None:
        check_output_dir(out_dir, "export: --out")  # before the checkpoint is read
    loaded = load_policy(path, autocast=False)  # the exported graphs compute in float32 (a runtime picks its own)
    refusal = algorithm_for(loaded.cfg).export_refusal
    if refusal is not None or not isinstance(loaded.policy, PolicyBase):
        raise UserError(f"export: checkpoint {path}: {refusal or f'a {type(loaded.policy).__name__} cannot be exported'}")
    policy, task = loaded.policy, loaded.cfg.task
    for flag in ("cache_encoded_outputs", "cache_full_latent"):  # diagnostics: host copies, not graph ops
        if hasattr(policy, flag):
            setattr(policy, flag, False)
    graphs = actor_graphs(policy, _EXAMPLE_ROWS)
    out = Path(out_dir) if out_dir is not None else path.parent
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"export: {out}: cannot create the folder ({type(e).__name__})") from None
    written, exporters = [], {}
    for graph in graphs:
        file = out / f"{task.replace(':', '-')}-{graph.name}.onnx"
        exporters[graph.name] = export_onnx(graph, file, source=f"checkpoint {path}")
        written.append(file)
    sidecar = out / f"{task.replace(':', '-')}-actor.json"
    meta = describe(loaded, graphs, {g.name: f.name for g, f in zip(graphs, written, strict=True)}, exporters)
    try:
        sidecar.write_text(json.dumps(meta, indent=2) + "\n")
    except OSError as e:
        raise UserError(f"export: cannot write {sidecar} ({type(e).__name__})") from None
    written.append(sidecar)
    return written


def require_onnx() -> None:
    """`torch.onnx.export` needs onnx, and onnxscript for its default (dynamo) exporter."""
    missing = [name for name in ("onnx", "onnxscript") if importlib.util.find_spec(name) is None]
    if missing:
        raise UserError(f"export: {' and '.join(missing)} not installed ({EXTRA_HINT})")


def actor_graphs(policy: PolicyBase, rows: int = _EXAMPLE_ROWS) -> list[Graph]:
    """The graphs to export, with example inputs of `rows` rows (zeros, encoder index 0)."""
    obs = torch.zeros(rows, policy.actor_obs_dim)
    if not isinstance(policy, TokenActorCritic):
        outputs = ["actions", "logits"] if policy.action_spec.kind == "discrete" else ["actions"]
        return [Graph("actor", _MLPActor(policy).eval(), {"actor_obs": obs}, outputs)]
    with torch.no_grad():
        tokens = policy.encode(obs)
    return [Graph("encoder", _TokenEncoder(policy).eval(), {"actor_obs": obs}, ["tokens"]),
            Graph("decoder", _TokenDecoder(policy).eval(), {"tokens": tokens, "actor_obs": obs}, ["actions"]),
            Graph("actor", _TokenActor(policy).eval(), {"actor_obs": obs}, ["actions"])]


def export_onnx(graph: Graph, file: Path, source: str) -> str:
    """Write `graph` to `file` with a dynamic batch axis; returns the exporter used ("dynamo" or "torchscript").

    The default (dynamo) exporter is tried first; if it fails, the TorchScript exporter (`dynamo=False`) is
    tried with a warning. Both failing is a `UserError` naming the graph and the reason.
    """
    names, args = list(graph.inputs), tuple(graph.inputs.values())
    batch = torch.export.Dim("batch")
    try:
        with torch.no_grad(), _quiet_exporter():
            torch.onnx.export(graph.module, args, str(file), input_names=names, output_names=graph.outputs,
                              dynamic_shapes={name: {0: batch} for name in names}, external_data=False,
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
            torch.onnx.export(graph.module, args, str(file), input_names=names, output_names=graph.outputs,
                              dynamic_axes={name: {0: "batch"} for name in names + graph.outputs}, dynamo=False)
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
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _one_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def describe(loaded: LoadedPolicy, graphs: list[Graph], files: dict[str, str],
             exporters: dict[str, str]) -> dict[str, Any]:
    """The sidecar: what each file computes, its inputs and outputs, and the actor observation's layout."""
    policy = cast(PolicyBase, loaded.policy)  # `export_checkpoint` refused any other
    kind, size = policy.action_spec.kind, policy.action_spec.size
    layout = getattr(policy, "layout", None) or {getattr(policy, "actor_group", "policy"): policy.actor_obs_dim}
    parts, start = [], 0
    for name, width in layout.items():
        parts.append({"name": name, "start": start, "width": width})
        start += width
    meta: dict[str, Any] = {
        "syncfree_version": syncfree.__version__,
        "format": "onnx",
        "task": loaded.cfg.task,
        "policy_kind": "token" if "encoder" in files else "mlp",
        "checkpoint_iteration": loaded.iteration,
        "action": {"kind": kind, "size": size,
                   "note": "deterministic action: the Gaussian mean, as the policy outputs it (not clipped)"
                   if kind == "continuous" else "deterministic action: the arg-max of the logits"},
        "observation": {"input": "actor_obs", "width": policy.actor_obs_dim, "layout": parts,
                        "normalization": "running mean/std of the checkpoint, inside the graphs"
                        if _normalizes(policy) else "none"},
        "graphs": {},
    }
    with torch.no_grad():
        for graph in graphs:
            outs = graph.module(*graph.inputs.values())
            outs = outs if isinstance(outs, tuple) else (outs,)
            meta["graphs"][graph.name] = {
                "file": files[graph.name],
                "exporter": exporters[graph.name],
                "inputs": [_io(name, t) for name, t in graph.inputs.items()],
                "outputs": [_io(name, t) for name, t in zip(graph.outputs, outs, strict=True)],
            }
    if isinstance(policy, TokenActorCritic):  # its graphs: the encoder, the decoder and both combined
        meta["graphs"]["actor"]["note"] = "encoder and decoder combined"
        fsq = policy.fsq
        meta["tokens"] = {
            "num_tokens": policy.num_tokens, "token_dim": policy.token_dim, "fsq_levels": fsq.levels,
            "codebook_size": fsq.codebook_size,
            "encoders": policy.encoder_names,
            "note": "encoder k serves rows whose tokenizer/encoder_index is k (others: encoder 0); token values "
                    "are FSQ codes (k - levels // 2) / (levels // 2)",
        }
    return meta


def _normalizes(policy: nn.Module) -> bool:
    return bool(getattr(policy, "normalize_obs", False))


def _io(name: str, tensor: Tensor) -> dict[str, Any]:
    return {"name": name, "shape": ["batch", *tensor.shape[1:]], "dtype": str(tensor.dtype).removeprefix("torch.")}

"""Multi-process training over `torch.distributed`: one process per device, each with its own envs.

Launch with `torchrun --nproc_per_node=N -m syncfree train ...`. Every rank steps `cfg.env.num_envs` envs of
its own (seeded `seed + rank`), keeps its own rollout, and the ranks agree on everything that shapes the update:

- parameters and normalizer buffers: broadcast from rank 0 at start and after loading a checkpoint;
- gradients and the minibatch KL (which drives the adaptive learning rate): averaged every minibatch with
  one `all_reduce` of a preallocated flat buffer (`syncfree.algo.optim.GradientAllReduce`), before the global
  norm is clipped, so the clipped norm, the skip-on-non-finite decision and the learning rate are identical on
  every rank;
- advantage normalization: global mean and std from one `all_reduce` of (sum, sum of squares, count)
  (`syncfree.algo.advantages.global_mean_std`);
- observation normalizers: merged once per iteration with one `all_reduce` (`NormalizerSync`);
- env statistics that span envs (the g1-track adaptive sampler's visit and failure counts): summed through the
  `reduce` argument of `VecEnv.end_iteration`;
- the logged losses (averaged), the non-finite flag and the stop request: one `all_reduce` per iteration.

Collectives never read on the host, so the hot loop stays free of host syncs on every rank. With no process
group (a single process) none of this runs: no collective, no extra op.
"""

from __future__ import annotations

import contextlib
import datetime
import inspect
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from syncfree.config import TrainConfig, flatten, to_dict
from syncfree.core.device import resolve_device
from syncfree.envs.api import VecEnv
from syncfree.errors import DistributedError, UserError
from syncfree.policy.normalizer import RunningNorm


class Distributed:
    """This process's place in the process group, and the collectives the trainer uses."""

    def __init__(self, rank: int, world_size: int, local_rank: int, timeout: float | None = None) -> None:
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.timeout = timeout
        """Collective timeout in seconds when known (it names it in errors)."""

    @property
    def is_main(self) -> bool:
        """Rank 0 logs, shows progress and writes checkpoints."""
        return self.rank == 0

    @classmethod
    def current(cls, timeout: float | None = None) -> Distributed | None:
        """The initialized default process group if it spans more than one process, else None."""
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() <= 1:
            return None
        rank = dist.get_rank()
        return cls(rank, dist.get_world_size(), int(os.environ.get("LOCAL_RANK", rank)), timeout)

    def all_reduce(self, tensor: Tensor, what: str) -> Tensor:
        """Sum `tensor` over all ranks, in place; returns it."""
        try:
            dist.all_reduce(tensor)
        except RuntimeError as e:
            error = self.error(what, e)
        else:
            return tensor
        # raised outside the handler: the failed collective's frames (and its work object, which holds the process
        # group) are freed now rather than kept alive by the exception chain until interpreter shutdown
        raise error

    def check_agreement(self, facts: dict[str, Any]) -> None:
        """Every rank holds the same `facts` (the config, the policy's tensor shapes, the env's shapes), or every
        rank raises `UserError` naming the first that differs: a rank started with other settings would otherwise
        end in a collective of mismatched sizes (a C++ abort with no word from syncfree)."""
        gathered: list[Any] = [None] * self.world_size
        error = None
        try:
            dist.all_gather_object(gathered, facts)
        except RuntimeError as e:
            error = self.error("the start-up comparison of the ranks' configs", e)
        if error is not None:
            raise error
        for rank, other in enumerate(gathered):
            if rank == 0 or other == gathered[0]:
                continue
            key = next(k for k in sorted(set(other) | set(gathered[0]))
                       if other.get(k, "(absent)") != gathered[0].get(k, "(absent)"))
            raise UserError(f"ranks disagree: rank {rank} has {key}={other.get(key, '(absent)')!r}, rank 0 has "
                            f"{gathered[0].get(key, '(absent)')!r}; every rank must be started with the same "
                            "settings")

    def broadcast_module(self, module: nn.Module) -> None:
        """Copy rank 0's parameters and buffers to every rank: one broadcast per dtype."""
        tensors = [t for t in (*module.parameters(), *module.buffers()) if t.numel() > 0]
        for dtype in dict.fromkeys(t.dtype for t in tensors):
            group = [t for t in tensors if t.dtype == dtype]
            flat = torch.cat([t.detach().reshape(-1) for t in group])
            error = None
            try:
                dist.broadcast(flat, src=0)
            except RuntimeError as e:
                error = self.error("broadcast of the policy from rank 0", e)
            if error is not None:
                raise error
            with torch.no_grad():
                torch._foreach_copy_(group, [part.view_as(t) for part, t in
                                             zip(torch.split(flat, [t.numel() for t in group]), group, strict=True)])

    def error(self, what: str, cause: BaseException) -> DistributedError:
        """One line: which rank, which collective, and why it most likely failed."""
        limit = f"{self.timeout:g} s" if self.timeout is not None else "the process group's timeout"
        detail = re.sub(r"^\[[^\]]*\]\s*", "", str(cause).strip().splitlines()[0] if str(cause).strip() else "")
        detail = detail.split(". ")[0].rstrip(".")
        return DistributedError(f"rank {self.rank}/{self.world_size}: {what} failed: a peer process exited or did "
                                f"not answer within the collective timeout ({limit}) [{type(cause).__name__}: "
                                f"{detail}]")


def init_from_env(device: str, backend: str = "auto", timeout: float = 120.0) -> Distributed | None:
    """Join the process group described by torchrun's variables (`WORLD_SIZE`, `RANK`, `LOCAL_RANK`,
    `MASTER_ADDR`, `MASTER_PORT`); None when they describe a single process. NCCL when `device` is CUDA (each
    rank on `cuda:LOCAL_RANK`), gloo on CPU, unless `backend` says otherwise."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return None
    if not dist.is_available():
        raise UserError("distributed: WORLD_SIZE > 1 but this torch build has no torch.distributed")
    if "RANK" not in os.environ:
        raise UserError(f"distributed: WORLD_SIZE={world_size} but RANK is not set (launch with torchrun)")
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
    ctx = Distributed(rank, world_size, local_rank, timeout)
    on_cuda = resolve_device(device, local_rank).type == "cuda"
    if backend == "auto":
        backend = "nccl" if on_cuda else "gloo"
    if backend == "nccl" and not on_cuda:
        raise UserError(f"distributed.backend=nccl needs CUDA tensors but device={device!r} (use gloo on the CPU)")
    kwargs: dict[str, Any] = {}  # the keywords this call sets (torch's defaults otherwise)
    if on_cuda:
        torch.cuda.set_device(local_rank)
        if backend == "nccl":
            kwargs["device_id"] = torch.device("cuda", local_rank)
    try:
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout), **kwargs)
    except (RuntimeError, ValueError) as e:
        raise DistributedError(f"rank {rank}/{world_size}: joining the {backend} process group failed "
                               f"({type(e).__name__}: {str(e).strip().splitlines()[0]})") from e
    return ctx


def shutdown(wait_for_peers: bool = True) -> None:
    """Leave the process group. After a normal finish, first wait for every rank (rank 0 may still be writing
    its checkpoint): tearing a gloo group down while a peer is still connected can abort that peer. After a
    failure (`wait_for_peers` False) the group is left as it is: with a peer that hangs, its teardown can block
    or abort the process; `exit_now` ends the process instead."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    if wait_for_peers:
        with contextlib.suppress(RuntimeError):  # a peer is gone: nothing left to wait for
            dist.barrier()
        dist.destroy_process_group()


def exit_now(code: int) -> int:
    """With a process group that a failed collective left behind, end the process with `code` at once, output
    flushed and no destructor run (gloo's, with work still pending on a hung peer, can abort the process with
    SIGABRT at interpreter exit); without one, return `code`."""
    if not (dist.is_available() and dist.is_initialized()):
        return code
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class NormalizerSync:
    """Merge running observation normalizers over ranks once per iteration, with one `all_reduce`.

    After a merge every rank holds the same (count, mean, var). During the next rollout each rank adds its own
    samples; at the merge each rank contributes what it added since the last merge, as [n * mean, n * (var +
    mean^2), n] (float64, its local statistics minus the merged ones), and the sums are added to the merged
    statistics: the result is the count-weighted mean and variance of every sample seen by every rank, counted
    once."""

    def __init__(self, norms: Iterable[RunningNorm], ctx: Distributed) -> None:
        self.norms, self.ctx = list(norms), ctx
        self.base = [(n.count.clone(), n.mean.clone(), n.var.clone()) for n in self.norms]
        sizes = [2 * n.mean.numel() + 1 for n in self.norms]
        self.sizes = sizes
        device = self.norms[0].mean.device if self.norms else torch.device("cpu")
        self.flat = torch.zeros(sum(sizes), dtype=torch.float64, device=device)

    def snapshot(self) -> None:
        """Remember the current statistics as the merged ones (after a broadcast or a checkpoint load)."""
        for norm, (count, mean, var) in zip(self.norms, self.base, strict=True):
            count.copy_(norm.count)
            mean.copy_(norm.mean)
            var.copy_(norm.var)

    @torch.no_grad()
    def merge(self) -> None:
        if not self.norms:
            return
        parts = []
        for norm, (count0, mean0, var0) in zip(self.norms, self.base, strict=True):
            c, m, v = norm.count.double(), norm.mean.double(), norm.var.double()
            c0, m0, v0 = count0.double(), mean0.double(), var0.double()
            parts += [c * m - c0 * m0, c * (v + m * m) - c0 * (v0 + m0 * m0), (c - c0).view(1)]
        torch.cat(parts, out=self.flat)
        self.ctx.all_reduce(self.flat, "observation normalizer merge")
        for norm, (count0, mean0, var0), part in zip(self.norms, self.base, torch.split(self.flat, self.sizes),
                                                     strict=True):
            d = norm.mean.numel()
            c0, m0, v0 = count0.double(), mean0.double(), var0.double()
            count = c0 + part[2 * d]
            safe = count.clamp(min=1.0)
            mean = (c0 * m0 + part[:d]) / safe
            var = ((c0 * (v0 + m0 * m0) + part[d : 2 * d]) / safe - mean * mean).clamp(min=0.0)
            var = torch.where(count > 0, var, v0)  # no sample anywhere yet: keep the initial variance
            norm.count.copy_(count.round())
            norm.mean.copy_(mean)
            norm.var.copy_(var)
        self.snapshot()


def agreed_facts(cfg: TrainConfig, policy: nn.Module, env: VecEnv) -> dict[str, Any]:
    """What every rank must share: the config (flattened), the policy's tensor shapes and dtypes, the env's
    observation shapes, action spec and count."""
    facts: dict[str, Any] = {f"config.{k}": v for k, v in flatten(to_dict(cfg)).items()}
    facts.update({f"policy.{name}": (tuple(t.shape), str(t.dtype)) for name, t in policy.state_dict().items()})
    facts["env.obs_shapes"] = {k: tuple(v) for k, v in env.obs_shapes.items()}
    facts["env.action_spec"] = (env.action_spec.kind, env.action_spec.size)
    facts["env.num_envs"] = env.num_envs
    return facts


def env_statistics_reduce(env: VecEnv, group: Distributed | None) -> Callable[[Tensor], Tensor] | None:
    """With several processes, what `VecEnv.end_iteration(reduce=...)` is given (when it takes it): a sum over the
    ranks in place; None otherwise."""
    if group is None or "reduce" not in inspect.signature(env.end_iteration).parameters:
        return None
    return lambda tensor: group.all_reduce(tensor, "env statistics (VecEnv.end_iteration)")

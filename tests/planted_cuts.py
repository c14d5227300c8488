"""Check the switches' effect tests against planted cuts: for each switch, copy the package, cut its optimized path
(the optimized value takes the baseline path; for the switches in `WASTE_CUTS` also a second shape: the optimized
path does the baseline's work as well and throws it away; for those in `STEP_CUTS` a cut of the `compile=step`
path's own code; for those in `PATH_CUTS` the same shapes on a further path the switch acts on; for those in
`EXTRA_CUTS` a third shape, extra work on the optimized path, which the budget of a workload must see; and for
every file that reads a switch, that file's wiring dropped, which the wiring test must see), run the switch's
effect test (`test_switch_effects.EFFECT_TESTS`, or the budget or wiring test) on the cut copy, and report whether
it failed, as it must. The extensions' promises (`PROMISE_CUTS`: no host read in RND's, symmetry's and
distillation's rollout steps and minibatches, one copy each way in the adapters) are cut alike, named as a switch.

    python tests/planted_cuts.py [SWITCH | EXTENSION ...] [--shape "extra work" | "dropped wiring" | "host read" | ...]

Exits 1 when an effect test passes under its cut (it cannot see the switch)."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "syncfree"
"""Where the cuts' files are (their paths are relative to it)."""
sys.path.insert(0, str(ROOT / "tests"))

from switch_readers import readers, unwired  # noqa: E402
from test_switch_effects import EFFECT_TESTS  # noqa: E402

Edit = tuple[str, str, str]
"""(file under src/syncfree, text, replacement): every occurrence of the text replaced."""

CUTS: dict[str, list[Edit]] = {
    "deferred_episode_stats": [("train/monitors.py", "deferred=perf.deferred_episode_stats", "deferred=False")],
    "deferred_nonfinite_check": [("train/monitors.py", "deferred=perf.deferred_nonfinite_check", "deferred=False")],
    "grad_finite_from_norm": [("algo/optim.py", "if not self.perf.grad_finite_from_norm:", "if True:")],
    "device_loss_stats": [("algo/feedforward.py", "None if perf.device_loss_stats else", "None if False else")],
    # the optimizer as fused_adamw=False makes it: not fused, and no device-side skip (fused AdamW's alone)
    "fused_adamw": [("algo/optim.py", "fused=perf.fused_adamw or None", "fused=None"),
                    ("algo/optim.py", "perf.grad_finite_from_norm is True and perf.fused_adamw else None",
                     "False else None")],
    "device_adaptive_lr": [("algo/optim.py", "self.adaptive and perf.device_adaptive_lr", "False")],
    "validate_distributions": [("algo/feedforward.py", "validate_distributions=cfg.perf.validate_distributions",
                                "validate_distributions=False")],
    "zero_grad_set_to_none": [("algo/optim.py", "set_to_none=self.perf.zero_grad_set_to_none", "set_to_none=False")],
    "deterministic": [("train/runner.py", "set_deterministic(cfg.perf.deterministic)", "set_deterministic(False)")],
    "compile": [("core/compile.py", 'if perf.compile == "off":', "if True:")],
    "autocast": [("algo/feedforward.py", "set_autocast(policy, cfg.perf.autocast, device)",
                  'set_autocast(policy, "off", device)')],
    "retain_host_memory": [("train/runner.py", "if cfg.perf.retain_host_memory:", "if False:")],
    "cuda_graphs": [("core/compile.py", "if use_cuda_graphs(perf, device):\n        graph = torch.compile(",
                     "if False:\n        graph = torch.compile(")],
    "shared_obs_terms": [("envs/managers/env.py", "shared_terms=self.perf.shared_obs_terms", "shared_terms=False")],
    "critic_chunk_size": [("algo/feedforward.py", "critic_chunk_size=cfg.perf.critic_chunk_size)",
                           "critic_chunk_size=0)")],
    "log_env_actions": [("envs/managers/env.py", "if self.perf.log_env_actions:", "if True:")],
    "sampling_diagnostics": [("envs/builtin/g1_track/env.py", "if self.perf.sampling_diagnostics:", "if True:")],
    "reset_without_sync": [("envs/managers/env.py", "if self.perf.reset_without_sync:", "if False:")],
    "fast_history": [("envs/managers/env.py", "fast_history=self.perf.fast_history)", "fast_history=False)")],
    "batched_command_metrics": [("envs/managers/env.py", "batched=self.perf.batched_command_metrics",
                                 "batched=False")],
    "physics_partitions": [("envs/adapters/isaaclab.py", "physx.gpu_max_num_partitions = perf.physics_partitions",
                            "physx.gpu_max_num_partitions = 8")],
    "cache_encoded_outputs": [("policy/token_encoder.py", "if self.cache_encoded_outputs:", "if True:")],
    "cache_full_latent": [("policy/token_encoder.py", "if self.cache_full_latent:", "if True:")],
    # the half optimization: the table computed either way, only its emission gated
    "gate_full_log_probs": [("policy/recurrent.py",
                             "logits.log_softmax(-1) if self.emit_full_log_probs else None",
                             "(logits.log_softmax(-1), None)[1 - self.emit_full_log_probs]")],
    "cache_game_config": [("tasks/grid_arena.py", "cache_game_config=cfg.perf.cache_game_config",
                           "cache_game_config=False")],
    "preallocated_last_actions": [("algo/recurrent.py", "preallocated_last_actions=perf.preallocated_last_actions",
                                   "preallocated_last_actions=False")],
    "cpu_time_index": [("algo/recurrent.py", "cpu_time_index=perf.cpu_time_index", "cpu_time_index=False")],
    "cached_minibatch_indices": [("algo/recurrent.py", "cached_minibatch_indices=perf.cached_minibatch_indices",
                                  "cached_minibatch_indices=False")],
    "token_embedding_tables": [("algo/recurrent.py", "embedding_tables=cfg.perf.token_embedding_tables",
                                "embedding_tables=False")],
    "sparse_token_max": [("algo/recurrent.py", "sparse_max=cfg.perf.sparse_token_max", "sparse_max=False")],
    "host_env_worker": [("tasks/gym.py", "worker=cfg.perf.host_env_worker and worth_a_worker(num_envs)",
                         "worker=False")],
    "whole_chunk_distillation": [("algo/distillation.py", "        if self.perf.whole_chunk_distillation:\n",
                                  "        if False:\n")],
    "replay_on_device": [("algo/offpolicy.py", "replay_buffer(perf.replay_on_device,", "replay_buffer(False,")],
    "vectorized_n_step": [("algo/offpolicy.py", "device, perf.vectorized_n_step)", "device, False)")],
    "fused_target_update": [("algo/offpolicy.py", "self.cfg.tau, self.perf.fused_target_update)",
                             "self.cfg.tau, False)")],
}  # each a switch's first path (host_env_worker: Gymnasium's); `PATH_CUTS` has the others
"""Switch -> the cut of its optimized path: the optimized value takes the baseline path."""

WASTE_CUTS: dict[str, list[Edit]] = {
    # each step's forward and loss run as well, as rsl_rl's loop runs them, beside the chunk's (which is used)
    "whole_chunk_distillation": [("algo/distillation.py",
                                  "            obs, target = self.chunk_rows(self.student_obs, chunk), "
                                  "self.chunk_rows(self.teacher_actions, chunk)\n",
                                  "            obs, target = self.chunk_rows(self.student_obs, chunk), "
                                  "self.chunk_rows(self.teacher_actions, chunk)\n"
                                  "            [self.loss(self.student_obs[t], self.teacher_actions[t], 1.0) "
                                  "for t in self.steps_of(chunk)]\n")],
    # the worker's half stepped first and waited for, as one process steps them in turn; then this process's half
    "host_env_worker": [("envs/adapters/gymnasium.py", "        getattr(self.local, method)(*args)\n        worker.wait()\n",
                         "        worker.wait()\n        getattr(self.local, method)(*args)\n")],
    # the default kernels' host reads of the step counts, made beside the fused step
    "fused_adamw": [("algo/optim.py", "            self.optimizer.step()  # the fused kernel leaves",
                     "            [float(s['step']) for s in self.optimizer.state.values()]\n"
                     "            self.optimizer.step()  # the fused kernel leaves")],
    # the hidden layers run in float32 as well, that result dropped
    "autocast": [("policy/actor_critic.py", "        *hidden, output = self\n",
                  "        super().forward(x)\n        *hidden, output = self\n")],
    # the retained memory handed back to the system after every iteration, as the C library's defaults do
    "retain_host_memory": [("train/runner.py", "            self.iteration += 1\n",
                            "            self.iteration += 1\n            __import__('ctypes').CDLL('libc.so.6')"
                            ".malloc_trim(0)\n")],
    # the config converted again at every construction, the cached conversion handed out all the same
    "cache_game_config": [("envs/adapters/mettagrid_sims.py", "            return self._converted\n",
                           "            convert(mettagrid_config)\n            return self._converted\n")],
    # the finished episodes picked and copied to the host as the baseline does, and dropped
    "deferred_episode_stats": [("train/monitors.py",
                                '        record_row(episode_row, done, step.info["episode_return"], '
                                'step.info["episode_length"])\n',
                                '        record_row(episode_row, done, step.info["episode_return"], '
                                'step.info["episode_length"])\n'
                                '        step.info["episode_return"][done.nonzero().squeeze(-1)].cpu()\n')],
    # the baseline's host check of the rewards beside the deferred one, its answer dropped
    "deferred_nonfinite_check": [("train/monitors.py", "        nonfinite.check_row(step_value, step.obs, step.reward)\n",
                                  "        nonfinite.check_row(step_value, step.obs, step.reward)\n"
                                  "        bool(torch.isfinite(step.reward).all())\n")],
    # the flag read on the host although the fused kernel skips on the device
    "grad_finite_from_norm": [("algo/optim.py", "            self.optimizer.step()  # the fused kernel leaves",
                               "            bool(self.found_inf)\n            self.optimizer.step()  # the fused kernel leaves")],
    # rsl_rl's `.item()` of each logged loss beside the device sums, dropped
    "device_loss_stats": [("algo/feedforward.py",
                           "        if self.host_loss_sums is None:\n            super().add_statistics(parts, grad_norm)\n",
                           "        if self.host_loss_sums is None:\n            [part.item() for part in parts[:RSL_RL_LOGGED]]\n"
                           "            super().add_statistics(parts, grad_norm)\n")],
    # the KL compared on the host as well, the comparison dropped
    "device_adaptive_lr": [("algo/optim.py", "        self.lr.copy_(self.next_learning_rate(self.lr, kl_mean))\n",
                            "        self.lr.copy_(self.next_learning_rate(self.lr, kl_mean))\n"
                            "        bool(kl_mean > target * 2.0)\n")],
    # the gradients zero-filled before they are dropped
    "zero_grad_set_to_none": [("algo/optim.py",
                               "        self.optimizer.zero_grad(set_to_none=self.perf.zero_grad_set_to_none)",
                               "        self.optimizer.zero_grad(set_to_none=False)\n"
                               "        self.optimizer.zero_grad(set_to_none=self.perf.zero_grad_set_to_none)")],
    # the baseline's 1,024-row chunks evaluated beside the one call, dropped
    "critic_chunk_size": [("policy/actor_critic.py",
                           "        return chunked_value(self.critic, self.critic_norm, critic_obs, self.critic_chunk_size)",
                           "        chunked_value(self.critic, self.critic_norm, critic_obs, 1024)\n"
                           "        return chunked_value(self.critic, self.critic_norm, critic_obs, self.critic_chunk_size)")],
    # each shared term computed again for every group, the shared value still used
    "shared_obs_terms": [("envs/managers/observations.py", "        if spec.func not in self._shared:\n",
                          "        spec.func(self.env)\n        if spec.func not in self._shared:\n")],
    # g1-track's env switches: the baseline's host reads done beside the optimized path, their answers dropped
    "log_env_actions": [("envs/managers/env.py", "        self.action.process(actions)\n",
                         "        actions.detach().cpu()\n        self.action.process(actions)\n")],
    "sampling_diagnostics": [("envs/builtin/g1_track/env.py",
                              "        if self.perf.sampling_diagnostics:\n            self.log.add_host(self.command."
                              "sampler.diagnostics())\n",
                              "        diagnostics = self.command.sampler.diagnostics()\n        if self.perf."
                              "sampling_diagnostics:\n            self.log.add_host(diagnostics)\n")],
    "reset_without_sync": [("envs/managers/env.py", "            self.reset_envs(done)\n",
                            "            done.nonzero(as_tuple=False)\n            self.reset_envs(done)\n")],
    "fast_history": [("envs/managers/history.py", "        torch.where(first_push, data.unsqueeze(1), self._buffer, "
                      "out=self._buffer)\n",
                      "        torch.where(first_push, data.unsqueeze(1), self._buffer, out=self._buffer)\n"
                      "        bool(torch.any(self._num_pushes == 0))\n")],
    "batched_command_metrics": [("envs/managers/commands.py",
                                 "            log.add_device(self.log_names, means, count > 0 if is_mask(selection) "
                                 "else True)\n",
                                 "            log.add_device(self.log_names, means, count > 0 if is_mask(selection) "
                                 "else True)\n            [means[i].item() for i in range(len(self.log_names))]\n")],
    # the argument checks run on a distribution built beside the optimized sampling, and dropped
    "validate_distributions": [("policy/heads.py", "        actions = mean + std * torch.randn_like(mean)\n",
                                "        Normal(finite_rows(mean), std, validate_args=True)\n"
                                "        actions = mean + std * torch.randn_like(mean)\n")],
    # the token policy's diagnostics copies made on every call, only keeping them gated
    "cache_encoded_outputs": [("policy/token_encoder.py",
                               "        if self.cache_encoded_outputs:\n            self.encoded_outputs = {\"tokens\": "
                               "tokens.detach().cpu(), \"latents\": latent.detach().cpu()}\n",
                               "        copies = {\"tokens\": tokens.detach().cpu(), \"latents\": latent.detach().cpu()}\n"
                               "        if self.cache_encoded_outputs:\n            self.encoded_outputs = copies\n")],
    "cache_full_latent": [("policy/token_encoder.py",
                           "        if self.cache_full_latent:\n            self.full_latent = full_latent.detach().clone()\n",
                           "        kept = full_latent.detach().clone()\n        if self.cache_full_latent:\n"
                           "            self.full_latent = kept\n")],
    # the device's time index read beside the host mirror
    "cpu_time_index": [("algo/segments.py", "            return int(self.t_in_row_cpu[env.start])\n",
                        "            self.t_in_row[env.start].item()\n            return int(self.t_in_row_cpu[env.start])\n")],
    # the minibatch indices built again before the cache answers
    "cached_minibatch_indices": [("algo/segments.py", "            key = (mb_idx, count)\n",
                                  "            _sequential(self._all_segments, mb_idx, count)\n            key = (mb_idx, count)\n")],
    # a buffer of the grown size allocated beside the preallocated one, dropped
    "preallocated_last_actions": [("algo/segments.py", "        return self.last_actions[env]\n",
                                   "        torch.zeros(env.stop, *self.last_actions.shape[1:], dtype=self.last_actions.dtype, "
                                   "device=self.device)\n        return self.last_actions[env]\n")],
    # the embeddings and the first layer's product on every token computed beside the tables, and dropped
    "token_embedding_tables": [("policy/recurrent.py", "            return torch.relu_(table_sum(index, tables))",
                                "            first(self.coordinate(rows[..., 0].long()) + self.feature(rows[..., 1]"
                                ".long()) + self.value(rows[..., 2:].float() / 255.0))\n"
                                "            return torch.relu_(table_sum(index, tables))")],
    # cuDNN's deterministic kernels chosen as the baseline chooses them, beside deterministic algorithms off
    "deterministic": [("core/device.py", "    torch.backends.cudnn.deterministic = on\n",
                       "    torch.backends.cudnn.deterministic = True\n")],
    # the eager function run beside its compiled graph, its result dropped
    "compile": [("core/compile.py", "        return graph(*args, **kwargs)\n",
                 "        fn(*args, **kwargs)\n        return graph(*args, **kwargs)\n")],
    # a default-mode graph compiled beside the CUDA-graph one, and dropped
    "cuda_graphs": [("core/compile.py",
                     '        graph = torch.compile(fn, fullgraph=True, dynamic=False, mode="reduce-overhead")\n',
                     "        torch.compile(fn, fullgraph=True, dynamic=False, options=GRAPH_OPTIONS)\n"
                     '        graph = torch.compile(fn, fullgraph=True, dynamic=False, mode="reduce-overhead")\n')],
    # the partitions set on a copy of the config, which the caller does not build the env from
    "physics_partitions": [("envs/adapters/isaaclab.py",
                            "    physx.gpu_max_num_partitions = perf.physics_partitions\n    return env_cfg\n",
                            "    env_cfg = __import__('copy').deepcopy(env_cfg)\n"
                            "    env_cfg.sim.physx.gpu_max_num_partitions = perf.physics_partitions\n"
                            "    return env_cfg\n")],
    # each stored observation copied to the host as well, the copy dropped
    "replay_on_device": [("algo/replay.py", "        for g, stored in self.obs.items():\n            stored[slot].copy_(obs[g])\n",
                          "        for g, stored in self.obs.items():\n            stored[slot].copy_(obs[g])\n"
                          "            obs[g].cpu()\n")],
    # the loop's sums computed beside the vectorized ones, and dropped
    "vectorized_n_step": [("algo/replay.py",
                           "            returns, discounts, last = n_step_sums(rewards, done, terminated, self.gamma)\n",
                           "            returns, discounts, last = n_step_sums(rewards, done, terminated, self.gamma)\n"
                           "            n_step_sums_loop(rewards, done, terminated, self.gamma)\n")],
    # CleanRL's per-parameter blend computed beside the fused lerp, and dropped
    "fused_target_update": [("algo/offpolicy.py", "            torch._foreach_lerp_(targets, sources, tau)\n",
                             "            torch._foreach_lerp_(targets, sources, tau)\n"
                             "            [tau * s.data + (1 - tau) * t.data for t, s in zip(targets, sources)]\n")],
    # `max` with its indices taken beside `amax`, and dropped
    "sparse_token_max": [("policy/token_pool.py", "    return features, features.add_(padding).amax(1)\n",
                          "    features.add_(padding).max(1)\n    return features, features.amax(1)\n")],
}
"""Switch -> the second cut shape: the optimized path also does the baseline's work and throws it away."""

STEP_CUTS: dict[str, list[Edit]] = {
    # the whole-minibatch function of `compile=step` (a path of its own) reading each logged loss
    "device_loss_stats": [("algo/minibatch_step.py", "            state.stats.add_(torch.stack((*parts, grad_norm)))\n",
                           "            state.stats.add_(torch.stack((*parts, grad_norm)))\n"
                           "            [part.item() for part in parts[:3]]\n")],
    # ... reading whether the gradient was finite, although the step skips on the device
    "grad_finite_from_norm": [("algo/minibatch_step.py",
                               "            finite = torch.isfinite(grad_norm) if self.skip_nonfinite else None\n",
                               "            finite = torch.isfinite(grad_norm) if self.skip_nonfinite else None\n"
                               "            bool(finite) if finite is not None else None\n")],
    # ... and comparing the KL on the host beside its device schedule
    "device_adaptive_lr": [("algo/minibatch_step.py", "                lr.copy_(self.adapt(lr, kl_mean))\n",
                            "                lr.copy_(self.adapt(lr, kl_mean))\n                float(kl_mean)\n")],
}
"""Switch -> a cut of the default `compile=step` path only, where the update runs code of its own: caught by the
effect test's `compile=step` case (the compiled functions run eagerly under the counters)."""

ASSERTION = re.compile(r"^E\s+(AssertionError|assert )", re.MULTILINE)
"""How a failing effect test's output shows an assertion that failed (rather than an error the cut caused)."""


def optimizer_wiring(switch: str) -> list[tuple[str, list[Edit]]]:
    """Cuts of the policy optimizer's wiring in each algorithm that builds it (the first cut is in the optimizer,
    which all share): each builds it with `switch` at its baseline."""
    off = f"__import__('dataclasses').replace(perf, {switch}=False)"
    return [("baseline path, feed-forward algorithm",
             [("algo/feedforward.py", "PolicyOptimizer(self.params, cfg, perf, device, dist, clip_groups,",
               f"PolicyOptimizer(self.params, cfg, {off}, device, dist, clip_groups,")]),
            ("baseline path, recurrent algorithm",
             [("algo/recurrent.py", "if p.requires_grad], cfg, perf, device, dist,",
               f"if p.requires_grad], cfg, {off}, device, dist,")]),
            ("baseline path, distillation",
             [("algo/distillation.py", "PolicyOptimizer(self.params, optim_cfg, perf, device, dist,",
               f"PolicyOptimizer(self.params, optim_cfg, {off}, device, dist,")])]


GYMNASIUM_SYNC_ROWS = """\
        import numpy as np
        obs, reward, terminated, truncated, infos = self.env.step(self.actions)
        self.obs[...], self.reward[...], self.terminated[...], self.truncated[...] = obs, reward, terminated, truncated
        ended = infos.get("_final_obs")
        self.ended[...] = False if ended is None else ended
        if ended is not None and ended.any():
            rows = np.flatnonzero(ended)
            self.final_obs[rows] = np.stack(infos["final_obs"][rows])
        return
"""
"""A Gymnasium part's step through its sync vector env, which merges every env's info dict (the adapter drops them)."""

PATH_CUTS: dict[str, list[tuple[str, list[Edit]]]] = {
    # the chunk's rows gathered (copied) where its steps are consecutive and a view serves
    "whole_chunk_distillation": [
        ("baseline path, recurrent student", [("algo/distillation.py",
                                               "        if self.perf.whole_chunk_distillation:\n"
                                               "            target = self.chunk_rows(",
                                               "        if False:\n            target = self.chunk_rows(")]),
        ("work thrown away, recurrent student", [("algo/distillation.py",
                                                  "            return self.summed(self.loss(torch.cat(hidden), target, "
                                                  "float(chunk.steps)))\n",
                                                  "            [self.loss(h, self.teacher_actions[t], 1.0) for h, t in "
                                                  "zip(hidden, steps, strict=True)]\n"
                                                  "            return self.summed(self.loss(torch.cat(hidden), target, "
                                                  "float(chunk.steps)))\n")]),
        ("work thrown away, a copy", [("algo/distillation.py",
                                       "            return buffer[chunk.start:chunk.start + chunk.steps]\n",
                                       "            return buffer[torch.arange(chunk.start, chunk.start + chunk.steps, "
                                       "device=buffer.device)]\n")]),
    ],
    # each place that applies the process-wide setting, cut alone; the baseline's cuBLAS workspace kept
    "deterministic": [
        ("baseline path, the loop (every entry point's)", [
            ("train/runner.py", "        set_deterministic(self.cfg.perf.deterministic)  #", "        pass  #")]),
        ("work thrown away, cuBLAS workspace", [("core/device.py", "    if on:\n        os.environ.setdefault(",
                                                 "    if True:\n        os.environ.setdefault(")]),
    ],
    # each algorithm's own wiring, the env step's, and the `compile=step` whole-step graph
    "compile": [
        ("baseline path, recurrent", [("algo/recurrent.py",
                                       "self.policy_step: StepFn = hot(policy.step, perf, device, static=",
                                       "self.policy_step: StepFn = policy.step or hot(policy.step, perf, device, "
                                       "static=")]),
        ("baseline path, RND", [("algo/rnd.py", "self._update = hot(self.update_rows, perf, device)",
                                 "self._update = self.update_rows")]),
        ("baseline path, distillation", [("algo/distillation.py", "self.loss = hot(self.steps_loss, perf, device)",
                                          "self.loss = self.steps_loss")]),
        ("baseline path, env step", [("train/compile_choice.py", "env.compile_step(lambda fn, *static: hot(fn, perf, device, static))",
                                      "env.compile_step(lambda fn, *static: fn)")]),
        ("baseline path, compile=step", [("algo/feedforward.py", "self._whole_step = hot(self.whole_step, perf, device)",
                                          "self._whole_step = self.whole_step")]),
        # the off-policy learners' whole gradient step left eager
        ("baseline path, off-policy compile=step", [("algo/offpolicy.py",
                                                     "            return None\n        return self.compiled(fn)\n",
                                                     "            return None\n        return fn\n")]),
        # the critic's values of the episodes' last observations computed eagerly before the record step's graph
        ("baseline path, bootstrap values", [("algo/feedforward.py",
                                              "                    self._record_step(step, row, observed)\n",
                                              "                    with torch.no_grad():\n"
                                              "                        self.final_values(step)\n"
                                              "                    self._record_step(step, row, observed)\n")]),
        # the whole-step graph's gradient norms by the eager foreach kernel, as the eager clip computes them
        ("baseline path, gradient norms", [("algo/minibatch_step.py",
                                            "    if torch.compiler.is_compiling():\n",
                                            "    if False:\n")]),
        # every graph's inputs asserted again at each call, as torch.compile's defaults do
        ("baseline path, input asserts", [("core/compile.py", '= {"size_asserts": False}',
                                           '= {"size_asserts": True}')]),
    ],
    # the whole-step update's in-place state, or the rollout it reads, left unmarked: CUDA graph trees skip the graph
    # or copy the rollout in at every replay
    "cuda_graphs": [
        ("baseline path, state not static", [("algo/feedforward.py", "            mark_static(self.perf, self.device, *data",
                                              "            (lambda *tensors: None)(self.perf, self.device, *data")]),
        ("baseline path, rollout not static", [("algo/feedforward.py", "mark_static(self.perf, self.device, *data, ",
                                                "mark_static(self.perf, self.device, ")]),
        # the env's tensors, which its compiled step writes in place, left unmarked: inductor skips that graph
        ("baseline path, env state not static", [("envs/api.py", "wrap(self._transition, *held)",
                                                  "wrap(self._transition)")]),
        # the state the off-policy whole step updates in place left unmarked: CUDA graph trees skip the graph
        ("baseline path, off-policy step state not static", [("algo/offpolicy.py",
                                                              "        mark_static(self.perf, self.device, *(t for part",
                                                              "        (lambda *tensors: None)(self.perf, self.device, "
                                                              "*(t for part")]),
        # the batch the off-policy losses read left unmarked: CUDA graph trees copy it in at every replay
        ("baseline path, replay batch not static", [("algo/offpolicy.py",
                                                     "static=[] if self.buffer.on_host else static)", "static=[])")]),
        # the recurrent state carried as the step graph's output, as rsl_rl carries it: the next replay overwrites it
        ("baseline path, recurrent state fed back", [("algo/recurrent.py",
                                                      "self.state_in_place = outputs_overwritten(perf, device)",
                                                      "self.state_in_place = False")]),
    ],
    # the value ignored for a fixed one (the optimized preset's)
    "physics_partitions": [
        ("baseline path, a fixed value", [("envs/adapters/isaaclab.py",
                                           "physx.gpu_max_num_partitions = perf.physics_partitions",
                                           "physx.gpu_max_num_partitions = 1")]),
    ],
    # each further algorithm's wiring, cut alone: the recurrent policy's, the student's, the teacher's
    "autocast": [
        ("baseline path, recurrent algorithm", [("algo/recurrent.py", "set_autocast(policy, cfg.perf.autocast, device)",
                                                 'set_autocast(policy, "off", device)')]),
        ("baseline path, distillation student", [("algo/distillation.py",
                                                  "set_autocast(policy, cfg.perf.autocast, device)",
                                                  'set_autocast(policy, "off", device)')]),
        ("baseline path, distillation teacher", [("algo/distillation.py",
                                                  "set_autocast(teacher, cfg.perf.autocast, device)",
                                                  'set_autocast(teacher, "off", device)')]),
    ],
    # the policy optimizer's wiring in each further algorithm that builds it, cut there alone
    **{switch: optimizer_wiring(switch) for switch in ("fused_adamw", "zero_grad_set_to_none", "grad_finite_from_norm")},
    "device_adaptive_lr": optimizer_wiring("device_adaptive_lr")[:2],  # distillation steps at a fixed rate
    # the second adapter the switch acts in, each shape cut there alone
    # the off-policy learners' statistics: read at every gradient step, or read beside the device sums
    "device_loss_stats": [
        ("baseline path, off-policy learners", [("algo/offpolicy.py", "        if self.perf.device_loss_stats:\n"
                                                 "            self.stats.add_(", "        if False:\n"
                                                 "            self.stats.add_(")]),
        ("work thrown away, off-policy learners", [("algo/offpolicy.py",
                                                    "            self.stats.add_(torch.stack([v.detach() for v in values]))\n",
                                                    "            self.stats.add_(torch.stack([v.detach() for v in values]))\n"
                                                    "            [v.item() for v in values]\n")]),
    ],
    "host_env_worker": [
        ("baseline path, MettaGrid", [("tasks/grid_arena.py",
                                       "worker=cfg.perf.host_env_worker and worth_a_worker(num_envs)",
                                       "worker=False")]),
        ("work thrown away, MettaGrid", [("envs/adapters/mettagrid.py",
                                          "        self.local.step()\n        self.worker.wait()\n",
                                          "        self.worker.wait()\n        self.local.step()\n")]),
        # each part's rows stepped through Gymnasium's sync vector env, its info dicts merged and dropped
        ("conventional stepping of the rows, Gymnasium", [("envs/adapters/gymnasium_rows.py",
                                                           "        self.steps += 1\n",
                                                           "        self.steps += 1\n" + GYMNASIUM_SYNC_ROWS)]),
        # both sides of a worker call sleep on the socket, woken by the scheduler at every step
        ("baseline path, sleeping between calls", [("envs/adapters/host_worker.py", "SPIN_SECONDS = 0.002",
                                                    "SPIN_SECONDS = 0.0")]),
    ],
}
"""Switch -> (shape, cut) for the further paths a switch acts on, each planted on its own."""

EXTRA_CUTS: dict[str, tuple[str, list[Edit]]] = {
    # each: a copy, a temporary or a recomputation on the optimized path, no host read; the workload whose budget
    # (`test_optimized_budgets.BUDGETS`) sees it
    "deferred_episode_stats": ("ppo-mlp", [("train/monitors.py", '        record_row(episode_row, done, step.info["episode_return"], '
                                            'step.info["episode_length"])\n',
                                            '        record_row(episode_row, done, step.info["episode_return"], '
                                            'step.info["episode_length"])\n'
                                            '        step.info["episode_return"].clone()\n')]),
    "deferred_nonfinite_check": ("ppo-mlp", [("train/monitors.py",
                                              "        nonfinite.check_row(step_value, step.obs, step.reward)\n",
                                              "        nonfinite.check_row(step_value, step.obs, step.reward)\n"
                                              "        torch.isfinite(step.reward)\n")]),
    "grad_finite_from_norm": ("ppo-mlp", [("algo/optim.py", "            self.optimizer.step()  # the fused kernel leaves",
                                           "            torch.isfinite(self.found_inf)\n"
                                           "            self.optimizer.step()  # the fused kernel leaves")]),
    "fused_adamw": ("ppo-mlp", [("algo/optim.py", "            self.optimizer.step()  # the fused kernel leaves",
                                 "            [p.detach().clone() for p in self.params]\n"
                                 "            self.optimizer.step()  # the fused kernel leaves")]),
    "zero_grad_set_to_none": ("ppo-mlp", [("algo/optim.py",
                                           "        self.optimizer.zero_grad(set_to_none=self.perf.zero_grad_set_to_none)",
                                           "        [p.detach().clone() for p in self.params]\n"
                                           "        self.optimizer.zero_grad(set_to_none=self.perf.zero_grad_set_to_none)")]),
    "device_loss_stats": ("sac", [("algo/offpolicy.py",
                                   "            self.stats.add_(torch.stack([v.detach() for v in values]))\n",
                                   "            self.stats.add_(torch.stack([v.detach() for v in values]))\n"
                                   "            torch.stack([v.detach() for v in values])\n")]),
    "compile": ("ppo-mlp-compile-step", [("algo/minibatch_step.py",
                                          "            state.stats.add_(torch.stack((*parts, grad_norm)))\n",
                                          "            state.stats.add_(torch.stack((*parts, grad_norm)))\n"
                                          "            grad_norm.clone()\n")]),
    "validate_distributions": ("ppo-mlp", [("policy/heads.py", "        actions = mean + std * torch.randn_like(mean)\n",
                                            "        std = std.clone()\n"
                                            "        actions = mean + std * torch.randn_like(mean)\n")]),
    "critic_chunk_size": ("ppo-mlp-wide", [("policy/actor_critic.py",
                                            "        return chunked_value(self.critic, self.critic_norm, critic_obs, "
                                            "self.critic_chunk_size)",
                                            "        critic_obs = critic_obs.clone()\n"
                                            "        return chunked_value(self.critic, self.critic_norm, critic_obs, "
                                            "self.critic_chunk_size)")]),
    "shared_obs_terms": ("ppo-mlp-env-layer", [("envs/managers/observations.py",
                                                "        if spec.func not in self._shared:\n",
                                                "        torch.ones(1)\n        if spec.func not in self._shared:\n")]),
    "log_env_actions": ("ppo-mlp-env-layer", [("envs/managers/env.py", "        self.action.process(actions)\n",
                                               "        actions = actions.clone()\n"
                                               "        self.action.process(actions)\n")]),
    "reset_without_sync": ("ppo-mlp-env-layer", [("envs/managers/env.py", "            self.reset_envs(done)\n",
                                                  "            done = done.clone()\n            self.reset_envs(done)\n")]),
    "fast_history": ("ppo-mlp-env-layer", [("envs/managers/history.py",
                                            "        torch.where(first_push, data.unsqueeze(1), self._buffer, "
                                            "out=self._buffer)\n",
                                            "        torch.where(first_push, data.unsqueeze(1), self._buffer, "
                                            "out=self._buffer)\n        self._buffer.clone()\n")]),
    "batched_command_metrics": ("ppo-mlp-env-layer", [("envs/managers/commands.py",
                                                       "            log.add_device(self.log_names, means, count > 0 if "
                                                       "is_mask(selection) else True)\n",
                                                       "            log.add_device(self.log_names, means, count > 0 if "
                                                       "is_mask(selection) else True)\n            means.clone()\n")]),
    "cache_encoded_outputs": ("ppo-token-env-layer", [("policy/token_encoder.py",
                                                       "        if self.cache_encoded_outputs:\n",
                                                       "        tokens.detach().clone()\n"
                                                       "        if self.cache_encoded_outputs:\n")]),
    "cache_full_latent": ("ppo-token-env-layer", [("policy/token_encoder.py", "        if self.cache_full_latent:\n",
                                                   "        full_latent.detach().clone()\n"
                                                   "        if self.cache_full_latent:\n")]),
    "cpu_time_index": ("recurrent-mlp", [("algo/segments.py", "            return int(self.t_in_row_cpu[env.start])\n",
                                          "            self.t_in_row.clone()\n"
                                          "            return int(self.t_in_row_cpu[env.start])\n")]),
    "cached_minibatch_indices": ("recurrent-mlp", [("algo/segments.py", "            key = (mb_idx, count)\n",
                                                    "            torch.arange(count, device=self.device)\n"
                                                    "            key = (mb_idx, count)\n")]),
    "preallocated_last_actions": ("recurrent-mlp", [("algo/segments.py", "        return self.last_actions[env]\n",
                                                     "        return self.last_actions[env].clone()\n")]),
    "token_embedding_tables": ("recurrent-token-sets", [("policy/recurrent.py",
                                                         "            return torch.relu_(table_sum(index, tables))",
                                                         "            return torch.relu(table_sum(index, tables))")]),
    "sparse_token_max": ("recurrent-token-sets", [("policy/token_pool.py",
                                                   "    return features, features.add_(padding).amax(1)\n",
                                                   "    features.clone()\n"
                                                   "    return features, features.add_(padding).amax(1)\n")]),
    "whole_chunk_distillation": ("distillation", [("algo/distillation.py",
                                                   "            return buffer[chunk.start:chunk.start + chunk.steps]\n",
                                                   "            return buffer[chunk.start:chunk.start + chunk.steps]"
                                                   ".clone()\n")]),
    "replay_on_device": ("sac", [("algo/replay.py",
                                  "        for g, stored in self.obs.items():\n            stored[slot].copy_(obs[g])\n",
                                  "        for g, stored in self.obs.items():\n            stored[slot].copy_(obs[g])\n"
                                  "            obs[g].clone()\n")]),
    "vectorized_n_step": ("td3", [("algo/replay.py",
                                   "            returns, discounts, last = n_step_sums(rewards, done, terminated, "
                                   "self.gamma)\n",
                                   "            returns, discounts, last = n_step_sums(rewards, done, terminated, "
                                   "self.gamma)\n            returns.clone()\n")]),
    "fused_target_update": ("td3", [("algo/offpolicy.py", "            torch._foreach_lerp_(targets, sources, tau)\n",
                                     "            torch._foreach_lerp_(targets, sources, tau)\n"
                                     "            torch._foreach_mul(targets, 1.0)\n")]),
    # a copy of the logits made where the gate emits no table
    "gate_full_log_probs": ("recurrent-token-sets", [("policy/recurrent.py",
                                                      "logits.log_softmax(-1) if self.emit_full_log_probs else None",
                                                      "logits.log_softmax(-1) if self.emit_full_log_probs else "
                                                      "(logits.detach().clone(), None)[1]")]),
    # the device rate copied before the schedule reads it
    "device_adaptive_lr": ("ppo-mlp", [("algo/optim.py",
                                        "        self.lr.copy_(self.next_learning_rate(self.lr, kl_mean))\n",
                                        "        self.lr.copy_(self.next_learning_rate(self.lr.clone(), kl_mean))\n")]),
}
"""Switch -> (budgeted workload, the third cut shape: extra work on its optimized path). Not cut so: the switches
whose optimized path no counter sees here (`deterministic`, `retain_host_memory`, `cuda_graphs`,
`physics_partitions`, `host_env_worker`, `cache_game_config`: process settings, another process, host-side
MettaGrid code)."""


def budget_test(workload: str) -> str:
    return f"test_optimized_budgets.py::test_the_optimized_path_costs_exactly_its_budget[{workload}]"


def adapter_test(adapter: str) -> str:
    return f"test_optimized_budgets.py::test_an_adapter_step_costs_exactly_its_budget[{adapter}]"


PROMISE_CUTS: dict[str, list[tuple[str, str, list[Edit]]]] = {
    # no host read per rollout step or per minibatch, and no work beyond the budget's
    "rnd": [("host read, rollout step", "test_rnd.py::test_rnd_reads_the_host_only_once_per_iteration",
             [("algo/rnd.py", "        self.reward_sum.add_(reward.sum())\n",
               "        self.reward_sum.add_(reward.sum())\n        reward.sum().item()\n")]),
            # the minibatch's rows gathered again beside the predictor's step
            ("extra work, minibatch", budget_test("ppo-rnd"),
             [("algo/rnd.py", "        self._update(rollout_obs, idx, self.state)\n",
               "        rollout_obs[idx]\n        self._update(rollout_obs, idx, self.state)\n")])],
    "symmetry": [("host read, minibatch", budget_test("ppo-symmetry"),
                  [("algo/symmetry.py", "        loss = (on_mirrored - target).square().mean()\n",
                    "        loss = (on_mirrored - target).square().mean()\n        loss.item()\n")]),
                 # the reflected minibatch's returns copied once more
                 ("extra work, minibatch", budget_test("ppo-symmetry"),
                  [("algo/symmetry.py", "returns=mb.returns.repeat(2))", "returns=mb.returns.repeat(2).clone())")])],
    "distillation": [("host read, rollout step", budget_test("distillation"),
                      [("algo/distillation.py", "            row.teacher_actions.copy_(teacher_actions)\n",
                        "            row.teacher_actions.copy_(teacher_actions)\n"
                        "            bool(torch.isfinite(teacher_actions).all())\n")]),
                     ("host read, minibatch", budget_test("distillation"),
                      [("algo/distillation.py", "            self.backward_and_step(loss, (loss.detach(),), None)\n",
                        "            self.backward_and_step(loss, (loss.detach(),), None)\n"
                        "            bool(torch.isfinite(loss))\n")])],
    # one copy each way: the results up, the actions down (none on the CPU), into preallocated buffers
    "gymnasium-adapter": [("allocation, step", adapter_test("gymnasium-pendulum"),
                           [("envs/adapters/gymnasium.py",
                             "done = torch.logical_or(self._terminated, self._truncated, out=self._done)",
                             "done = torch.logical_or(self._terminated, self._truncated)")]),
                          # the results uploaded field by field rather than as one packed buffer
                          ("copies, step", adapter_test("gymnasium-pendulum-staged"),
                           [("envs/adapters/staging.py",
                             "            self.device_buffer.copy_(self.host_buffer, non_blocking=True)\n",
                             "            for name, dev in self.dev.items():\n"
                             "                dev.copy_(self.host[name], non_blocking=True)\n")])],
    # the groups passed on as the env returned them (they are new tensors at each step)
    "rsl_rl-env-adapter": [("copy, step", adapter_test("rsl_rl-env"),
                            [("envs/adapters/from_rsl_rl.py", "            return obs[groups[0]]\n",
                              "            return obs[groups[0]].clone()\n")])],
    # the rewards used before the next step: not copied as the observations are
    "rsl_rl-vec-env-adapter": [("copy, step", adapter_test("rsl_rl-vec-env"),
                                [("envs/adapters/rsl_rl.py", "return self.get_observations(), result.reward, dones,",
                                  "return self.get_observations(), result.reward.clone(), dones,")])],
}
"""Extension -> (shape, the test that pins its promise, the cut that breaks it): RND, symmetry and distillation read
nothing on the host in a rollout step or a minibatch; the adapters copy each way once and allocate nothing more."""


UNCUT_READERS = {
    ("compile", "core/compile.py"): "the default, auto, is no mode a graph can be compiled in: the cut breaks the code",
}
"""Readers whose wiring is not cut, and why."""


def wiring_cuts() -> list[tuple[str, str, list[Edit]]]:
    """For every file that reads a switch, its wiring dropped: each read there replaced by the default value (but
    `UNCUT_READERS`)."""
    return [(switch, f"dropped wiring, {file}", unwired(switch, file, PACKAGE))
            for switch, files in sorted(readers(PACKAGE).items()) for file in sorted(files)
            if (switch, file) not in UNCUT_READERS]


VALIDATION = "config/sections.py"
"""The config's validation, whose reads of a switch act only in refusing a bad value (`getattr` over every switch
reads each there as well, so the wiring test cannot see a dropped read): its cut is the refusal test's to see."""


def wiring_test(switch: str, file: str) -> str:
    if file == VALIDATION:
        return ("test_switch_wiring.py::test_the_validation_refuses_each_bad_value_of_a_switch_it_reads_in_one_line"
                f"[{switch}]")
    return f"test_switch_wiring.py::test_each_reader_reads_the_value_set[{switch}-{file.replace('/', '.')}]"


CUT_TESTS = {("compile", "baseline path, bootstrap values"):
             "test_compile.py::test_compiled_record_step_computes_the_bootstrap_values_inside_its_graph",
             ("compile", "baseline path, input asserts"):
             "test_compile.py::test_graphs_do_not_assert_their_inputs_again_at_every_call",
             ("cuda_graphs", "baseline path, env state not static"):
             "test_cuda_graph_replay.py::test_every_graph_of_the_whole_step_trainer_would_replay",
             ("compile", "baseline path, off-policy compile=step"):
             "test_offpolicy.py::test_compiled_whole_step_matches_eager_compiles_once_and_leaves_little_outside_its_graph",
             ("cuda_graphs", "baseline path, off-policy step state not static"):
             "test_cuda_graph_replay.py::test_off_policy_whole_steps_would_replay_updating_their_state_in_place",
             ("cuda_graphs", "baseline path, replay batch not static"):
             "test_cuda_graph_replay.py::test_off_policy_graphs_would_replay_reading_the_batch_in_place",
             ("cuda_graphs", "baseline path, recurrent state fed back"):
             "test_cuda_graph_replay.py::test_every_graph_of_the_recurrent_trainer_would_replay",
             ("host_env_worker", "baseline path, sleeping between calls"):
             "test_gymnasium_adapter.py::test_the_worker_polls_between_steps_rather_than_sleeping"}
"""(switch, shape) -> the effect test of a further path where it is not the switch's own (`EFFECT_TESTS`)."""


class BrokenCut(Exception):
    """A cut under which the test fails with an error rather than an assertion: it proves nothing (fix the cut)."""


class StaleCut(Exception):
    """A cut that no longer applies to the source: its text is not there, it changes nothing, or it breaks the
    syntax (the code it cut has moved or changed)."""


def cut_files(edits: list[Edit], package: Path = PACKAGE) -> dict[str, str]:
    """The files `edits` change, by their path under `package`, as the cut leaves them (edits of one file applied in
    turn); `StaleCut` names the first edit that no longer applies."""
    texts: dict[str, str] = {}
    for relative, old, new in edits:
        if relative not in texts:
            if not (package / relative).is_file():
                raise StaleCut(f"{relative} is not a file any more")
            texts[relative] = (package / relative).read_text()
        text = texts[relative]
        if old not in text:
            raise StaleCut(f"{old!r} is not in {relative} any more")
        texts[relative] = text.replace(old, new)
        if texts[relative] == text:
            raise StaleCut(f"replacing {old!r} changes nothing in {relative}")
    for relative, text in texts.items():
        try:
            ast.parse(text, relative)
        except SyntaxError as e:
            raise StaleCut(f"the cut leaves {relative} unparsable (line {e.lineno}: {e.msg})") from None
    return texts


def planted_cuts(switches: list[str]) -> list[tuple[str, str, list[Edit]]]:
    """Every cut of `switches` (and of the extensions among them, `PROMISE_CUTS`) as (switch, shape, edits): the
    baseline path's, then the other shapes'."""
    cuts = [(switch, shape, edits) for switch in switches for shape, _, edits in PROMISE_CUTS.get(switch, [])]
    cuts += [(switch, "baseline path", CUTS[switch]) for switch in switches if switch in CUTS]
    cuts += [(switch, "work thrown away", WASTE_CUTS[switch]) for switch in switches if switch in WASTE_CUTS]
    cuts += [(switch, "compile=step path", STEP_CUTS[switch]) for switch in switches if switch in STEP_CUTS]
    cuts += [(switch, shape, edits) for switch in switches for shape, edits in PATH_CUTS.get(switch, [])]
    cuts += [(switch, "extra work", EXTRA_CUTS[switch][1]) for switch in switches if switch in EXTRA_CUTS]
    return cuts + [cut for cut in wiring_cuts() if cut[0] in switches]


def cut_test(switch: str, shape: str) -> str:
    """The test a cut must fail: the switch's effect test, a further path's (`CUT_TESTS`), the budget of the workload
    an extra-work cut adds to, or the wiring test of the reader a dropped wiring cuts."""
    if switch in PROMISE_CUTS:
        return next(test for name, test, _ in PROMISE_CUTS[switch] if name == shape)
    if shape == "extra work":
        return f"test_optimized_budgets.py::test_the_optimized_path_costs_exactly_its_budget[{EXTRA_CUTS[switch][0]}]"
    if shape.startswith("dropped wiring, "):
        return wiring_test(switch, shape.removeprefix("dropped wiring, "))
    return CUT_TESTS.get((switch, shape), EFFECT_TESTS[switch])


def stale_cuts(cuts: list[tuple[str, str, list[Edit]]], package: Path = PACKAGE) -> list[str]:
    """Each of `cuts` that no longer applies to the source, and why: checked in a moment, without running anything
    (`tests/test_planted_cuts.py`), so a cut that code moved away from is found before this script runs."""
    stale = []
    for switch, shape, edits in cuts:
        try:
            cut_files(edits, package)
        except StaleCut as e:
            stale.append(f"{switch} ({shape}): {e}")
    return stale


def run_cut(switch: str, edits: list[Edit], work: Path, effect_test: str) -> tuple[bool, str]:
    """(whether the effect test failed under the cut `edits`, the test's last output line)."""
    cut = Path(tempfile.mkdtemp(prefix=f"{switch}-", dir=work))
    shutil.copytree(ROOT / "src", cut / "src")
    for relative, text in cut_files(edits, cut / "src" / "syncfree").items():
        (cut / "src" / "syncfree" / relative).write_text(text)
    test = f"tests/{effect_test}"
    env = {**os.environ, "PYTHONPATH": str(cut / "src")}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test], cwd=ROOT,
                         env=env, capture_output=True, text=True)
    last = (run.stdout.strip().splitlines() or [""])[-1]
    if run.returncode == 1 and not ASSERTION.search(run.stdout):  # the cut broke the code: it proves nothing
        raise BrokenCut(f"the cut makes {test} fail with an error, not an assertion: {last}")
    return run.returncode == 1, last


def main(argv: list[str]) -> int:
    if "-h" in argv or "--help" in argv:
        print(__doc__)
        return 0
    shape = ""
    if "--shape" in argv:  # only the cuts whose shape starts with this (`extra work`, `dropped wiring`, ...)
        at = argv.index("--shape")
        shape, argv = " ".join(argv[at + 1:at + 2]), argv[:at] + argv[at + 2:]
    switches = argv or [*CUTS, *PROMISE_CUTS]
    unknown = [name for name in switches if name not in CUTS and name not in PROMISE_CUTS]
    if unknown:
        raise SystemExit(f"planted_cuts: not a switch: {', '.join(unknown)} (`syncfree switches` lists them; the "
                         f"extensions: {', '.join(PROMISE_CUTS)})")
    missing = set(EFFECT_TESTS) - set(CUTS)
    if missing:
        raise SystemExit(f"planted_cuts: no cut for {', '.join(sorted(missing))}")
    cuts = [cut for cut in planted_cuts(switches) if cut[1].startswith(shape)]
    stale = stale_cuts(cuts)
    if stale:
        raise SystemExit("planted_cuts: update the cuts that no longer apply:\n" + "\n".join(stale))
    blind, broken, rows = [], [], []
    with tempfile.TemporaryDirectory() as work:
        for switch, shape, edits in tqdm(cuts, desc="planted cuts", unit="cut"):
            effect_test = cut_test(switch, shape)
            try:
                failed, last = run_cut(switch, edits, Path(work), effect_test)
            except BrokenCut as e:
                tqdm.write(f"{switch} ({shape}): BROKEN: {e}")
                rows.append(f"| `{switch}` | {shape} | BROKEN (an error, not an assertion) |")
                broken.append(f"{switch} ({shape})")
                continue
            verdict = "caught" if failed else "NOT CAUGHT"
            tqdm.write(f"{switch} ({shape}): {verdict} by {effect_test} ({last})")
            rows.append(f"| `{switch}` | {shape} | {verdict} by `{effect_test.split('::')[1]}` |")
            if not failed:
                blind.append(f"{switch} ({shape})")
    print("| switch | cut shape | effect test |\n|---|---|---|\n" + "\n".join(rows))
    caught = len(cuts) - len(blind) - len(broken)
    print(f"{caught} of {len(cuts)} cuts caught" + (f"; not caught: {', '.join(blind)}" if blind else "")
          + (f"; broken (fix the cut): {', '.join(broken)}" if broken else ""))
    return 1 if blind or broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

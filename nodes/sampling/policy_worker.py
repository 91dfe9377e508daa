"""Policy worker: batched inference over every env group that is waiting for an action.

Stateless (hidden states live in shared memory), so any number of policy workers can serve any
env. Each loop takes the pending requests, runs one forward pass, writes actions, log-probs,
values, the policy version and (at a slot's first step) the initial hidden state into the
trajectory buffers, and tells each rollout worker which of its groups may step.

On a GPU (`sampler.policy_device`, by default `train.device`) observations stay in CPU shared
memory and cross once per batch: the worker waits up to GPU_WAIT_S for a fuller batch, gathers
observations, measurements and hidden states into one pinned staging row per env, copies it to
the GPU in one transfer, and brings actions, log-probs, values and new hidden states back in one
(`Staging`). On the CPU it indexes the shared buffers directly, as it always has.
"""
from __future__ import annotations

import math
import queue
import time

import torch

from nodes import seeds
from nodes.models.actor_critic import ActorCritic
from nodes.models.numerics import autocast, casts_kept, deterministic_kernels
from nodes.models.packed import PackedWeights
from nodes.record.profile import POLICY, Clock, policy_row
from nodes.sampling.buffers import env_groups
from nodes.sampling.placement import use_device
from nodes.sampling.weights import WeightsReader

WAIT, WEIGHTS, FORWARD, WRITE, REPLY = (POLICY.index(p) for p in ("wait", "weights", "forward", "write", "reply"))

GPU_WAIT_S = 0.002  # longest wait for more requests before a GPU forward pass
# sampler.mode=deterministic on a CPU: envs per forward pass, env e always at row e % PASS_ROWS of
# pass e // PASS_ROWS (4: a group of the default layout, 2 workers x 8 envs, is one pass). Part of
# what a deterministic run's result depends on, so a constant, not a layout choice.
PASS_ROWS = 4


class Staging:
    """One env per row: [obs bytes | measurements, hidden state as float32 bytes] in, and
    [actions, log-prob, value, new hidden state] as float32 out (the buffers' actions are float32);
    both pinned on a GPU, so each direction is one asynchronous copy. Works on the CPU too (tests
    compare it with the direct path there)."""

    def __init__(self, buffers, device: torch.device, max_batch: int):
        self.buffers, self.device = buffers, device
        self.obs_shape = tuple(buffers.obs.shape[2:])
        self.obs_bytes = math.prod(self.obs_shape) * buffers.obs.element_size()
        self.obs_pad = -self.obs_bytes % 4  # float32 views need 4-byte alignment
        self.meas_size, self.h_size = buffers.meas.shape[-1], buffers.env_h.shape[-1]
        self.action_width = buffers.actions.shape[-1]
        row_in = self.obs_bytes + self.obs_pad + 4 * (self.meas_size + self.h_size)
        pin = device.type == "cuda"
        self.host_in = torch.empty(max_batch, row_in, dtype=torch.uint8, pin_memory=pin)
        self.host_out = torch.empty(max_batch, self.action_width + 2 + self.h_size, pin_memory=pin)
        steps = buffers.obs.shape[0] * buffers.obs.shape[1]
        self.flat_obs = buffers.obs.view(steps, *self.obs_shape)  # [S*(T+1), ...]
        self.flat_meas = buffers.meas.view(steps, self.meas_size)

    def _floats(self, rows: torch.Tensor) -> torch.Tensor:
        return rows[:, self.obs_bytes + self.obs_pad :].view(torch.float32)

    def inputs(self, flat_steps: torch.Tensor, env_ids: torch.Tensor):
        """(obs, meas, h) on the device for the given [slot * (T+1) + t] steps and envs."""
        n = len(env_ids)
        rows = self.host_in[:n]
        obs_dtype = self.buffers.obs.dtype
        obs_part = rows[:, : self.obs_bytes].view(obs_dtype).view(n, *self.obs_shape)
        torch.index_select(self.flat_obs, 0, flat_steps, out=obs_part)
        floats = self._floats(rows)
        torch.index_select(self.flat_meas, 0, flat_steps, out=floats[:, : self.meas_size])
        torch.index_select(self.buffers.env_h, 0, env_ids, out=floats[:, self.meas_size :])
        dev = rows.to(self.device, non_blocking=True)
        # contiguous copies on the device (cheap there): convolutions and matmuls want them
        obs = dev[:, : self.obs_bytes].view(obs_dtype).view(n, *self.obs_shape).contiguous()
        dev_floats = self._floats(dev)
        return obs, dev_floats[:, : self.meas_size].contiguous(), dev_floats[:, self.meas_size :].contiguous()

    def outputs(self, actions, logp, values, h_new) -> tuple[torch.Tensor, ...]:
        """The forward pass's results on the host: one transfer, then one wait for it."""
        n = len(actions)
        packed = torch.cat([actions.float(), logp[:, None], values[:, None], h_new], 1)
        out = self.host_out[:n]
        out.copy_(packed, non_blocking=True)
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        k = self.action_width
        return out[:, :k], out[:, k], out[:, k + 1], out[:, k + 2 :]


class Inference:
    """One batch of requests, from the shared buffers back into them (no queues: testable alone).

    With per_env (sampler.mode=deterministic on a CPU) an env's forward pass never depends on
    which envs happened to share its request: CPU kernels choose their blocking, and with it the
    order of their sums, by batch size and row position (on this machine a row differed in its
    last bits between batches of 2 and of 3), but a row of a pass of fixed size at a fixed row
    does not depend on the other rows. So env e always runs in pass e // PASS_ROWS at row
    e % PASS_ROWS, with whatever the pass's other envs hold (their results are dropped). Actions
    are drawn with the buffers' per-env uniforms when there are any."""

    def __init__(self, model: ActorCritic, buffers, device: torch.device, staged: bool, precision: str = "fp32",
                 per_env: bool = False, clock: Clock | None = None):
        self.model, self.b, self.device, self.per_env = model, buffers, device, per_env
        self.clock = clock or Clock()  # forward (gathering the inputs included) vs writing the results
        self.autocast = lambda: autocast(device, precision)
        self.T1 = buffers.obs.shape[1]
        # [slot * (T+1) + t] views: a pass gathers its rows with index_select (one copy per row)
        # where indexing [slots, ts] takes the element-by-element path, many times slower
        # (`python benchmarks/node_parts.py`; docs/benchmarks.md#figures-behind-the-codes-choices)
        steps = buffers.obs.shape[0] * self.T1
        self.flat_obs = buffers.obs.view(steps, *buffers.obs.shape[2:])
        self.flat_meas = buffers.meas.view(steps, buffers.meas.shape[-1])
        self.staging = Staging(buffers, device, len(buffers.env_slot)) if staged else None
        self.packed = PackedWeights.install(model, device, precision)  # None on a GPU, in fp32

    def weights_changed(self) -> None:
        """After the model's weights changed in place: drop autocast's kept casts of the old ones
        (casts_kept; the cache is the thread's, so a population's other members cast theirs again at
        their next pass) and repack what was packed from them (only this member's)."""
        torch.clear_autocast_cache()
        if self.packed is not None:
            self.packed.refresh()

    def _forward(self, obs, meas, h, uniforms):
        """(actions, log-probs, values, new states) of one batch."""
        with self.autocast():
            logits, values, h_new = self.model.step(obs, meas, h)
        actions = self.model.heads.sample(logits, uniforms)  # [B, heads + continuous dims] float32
        return actions, self.model.heads.log_prob(logits, actions), values, h_new

    def _rows(self, slots: torch.Tensor, ts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The observations and measurements at steps ts of slots (b.obs[slots, ts], b.meas[slots, ts])."""
        steps = slots * self.T1 + ts
        return self.flat_obs.index_select(0, steps), self.flat_meas.index_select(0, steps)

    def _fixed_passes(self, env_ids: torch.Tensor):
        """per_env: the requested envs' results, each from its own fixed pass and row."""
        b, n_envs = self.b, len(self.b.env_slot)
        rows = {}
        for k in sorted(set((env_ids // PASS_ROWS).tolist())):
            members = torch.arange(k * PASS_ROWS, (k + 1) * PASS_ROWS).clamp_(max=n_envs - 1)  # pad: any env
            slots, ts = b.env_slot[members], b.env_t[members]
            uniforms = b.uniforms[slots, ts] if b.uniforms.shape[-1] else None
            results = self._forward(*self._rows(slots, ts), b.env_h[members], uniforms)
            for j in range(PASS_ROWS):
                rows[k * PASS_ROWS + j] = [r[j] for r in results]
        return (torch.stack(parts) for parts in zip(*(rows[e] for e in env_ids.tolist())))

    @torch.no_grad()  # not inference_mode: autocast keeps its weight casts only under no_grad (casts_kept)
    def __call__(self, env_ids: torch.Tensor, version: int) -> None:
        b, model = self.b, self.model
        self.clock(FORWARD)
        slots, ts = b.env_slot[env_ids], b.env_t[env_ids]
        fixed_passes = self.staging is None and self.per_env
        uniforms = b.uniforms[slots, ts] if b.uniforms.shape[-1] and not fixed_passes else None
        if fixed_passes:
            actions, logp, values, h_new = self._fixed_passes(env_ids)  # takes each pass's uniforms
        elif self.staging is None:
            actions, logp, values, h_new = self._forward(*self._rows(slots, ts), b.env_h[env_ids], uniforms)
        else:
            obs, meas, h_dev = self.staging.inputs(slots * self.T1 + ts, env_ids)
            on_device = None if uniforms is None else uniforms.to(self.device, non_blocking=True)
            actions, logp, values, h_new = self.staging.outputs(*self._forward(obs, meas, h_dev, on_device))
        self.clock(WRITE)
        b.actions[slots, ts] = actions
        b.logp[slots, ts] = logp
        b.values[slots, ts] = values
        b.versions[slots, ts] = version
        first = ts == 0
        if bool(first.any()):  # a slot's first step: keep the state it starts from (env_h, not yet updated)
            b.h0[slots[first]] = b.env_h[env_ids[first]]
        if model.recurrent:
            b.env_h[env_ids] = h_new


def take_requests(requests_queue, wait_s: float, enough: int) -> list:
    """Pending (worker, group) requests; with wait_s > 0, keep collecting for up to wait_s until
    `enough` groups ask (a GPU forward pass costs about the same for 8 envs as for 64)."""
    requests = requests_queue.get_many(timeout=0.1)
    deadline = time.perf_counter() + wait_s
    while len(requests) < enough and (left := deadline - time.perf_counter()) > 0:
        try:
            requests += requests_queue.get_many(timeout=left)
        except queue.Empty:
            break
    return requests


def run_policy_worker(cfg, rank: int, index: int, spec, buffers, channels, control, shared_weights: list,
                      device: str = "cpu") -> None:
    """shared_weights: one SharedWeights per population member (one without a population)."""
    if cfg.sampler.mode == "deterministic":
        deterministic_kernels()
    use_device(device)  # the current CUDA device is per process (and per thread)
    dev = torch.device(device)
    torch.manual_seed(seeds.derive(cfg.seed, seeds.POLICY_SAMPLING, rank, index))
    clock = Clock(control.profile.numpy()[policy_row(index)])
    readers, infers = _members(cfg, spec, buffers, shared_weights, dev, clock)
    groups = [[torch.as_tensor(ids) for ids in worker] for worker in env_groups(cfg.sampler)]
    # with double buffering at most half the groups wait at once; split over the policy workers
    n_groups = sum(len(g) for g in groups)
    enough = max(1, n_groups // (2 * cfg.sampler.num_policy_workers))
    wait_s = GPU_WAIT_S if dev.type == "cuda" else 0.0
    # where the model really is (tests/test_gpu.py reads this from the log)
    channels.reports.put(("ready", f"policy worker {index}", str(next(infers[0].model.parameters()).device)))
    with casts_kept(dev, cfg.train.precision):  # each weight cast to bf16 once per version, not once per pass
        serve(channels, control, clock, readers, infers, groups, buffers, wait_s, enough)
    del readers, infers
    for shared in shared_weights:
        shared.release()


def serve(channels, control, clock: Clock, readers: list, infers: list, groups: list, buffers, wait_s: float,
          enough: int) -> None:
    """The worker's loop until the node stops it: take requests, bring the weights up to date, one
    forward pass (one per population member among the requests), reply."""
    while not control.stop[0]:
        clock(WAIT)
        try:
            requests = take_requests(channels.requests, wait_s, enough)
        except queue.Empty:
            continue
        clock(WEIGHTS)
        for weights, infer in zip(readers, infers):  # every member's reader runs
            if weights.maybe_update():
                infer.weights_changed()
        env_ids = torch.cat([groups[w][g] for w, g in requests])
        if len(infers) == 1:
            infers[0](env_ids, readers[0].version)
        else:  # a population: each member's envs in a forward pass of its own
            members = buffers.env_policy[env_ids]
            for p in members.unique().tolist():
                infers[p](env_ids[members == p], readers[p].version)
        clock(REPLY)
        for w, g in requests:
            channels.actions[w].put(g)


def _members(cfg, spec, buffers, shared_weights: list, dev: torch.device, clock: Clock):
    """A model, weights reader and Inference per population member, each with the learner's first
    weights (published before the workers start)."""
    models, readers = [], []
    for shared in shared_weights:
        models.append(ActorCritic(spec, cfg.model).to(dev).eval())
        readers.append(WeightsReader(shared, models[-1]))
    for weights in readers:
        while not weights.maybe_update():
            time.sleep(0.001)
    infers = [Inference(model, buffers, dev, staged=dev.type == "cuda", precision=cfg.train.precision,
                        per_env=cfg.sampler.mode == "deterministic", clock=clock) for model in models]
    return readers, infers

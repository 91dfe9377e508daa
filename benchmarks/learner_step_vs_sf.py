"""One learner step of ours and of Sample Factory 2.1.1 on the same batch and the same weights.

Two trainers that learn differently on one task (issue 52: defend_the_center) differ either in what
they do with a batch or in the batches they get. This isolates the first: it collects one batch
with our policy on our env (real trajectories, recurrent states and behaviour log-probs), computes
our loss and gradients on it, then, in Sample Factory's own venv, loads the same weights and
statistics into Sample Factory's model, builds its learner (`Learner._prepare_batch` and
`_calculate_losses`, its own code), and compares loss by loss and gradient by gradient.

    python benchmarks/learner_step_vs_sf.py collect RUN_DIR OUT.pt [--trajectories 32] [--init] [--set K=V]
    SF_PYTHON benchmarks/learner_step_vs_sf.py sf OUT.pt SF_RUN_DIR/config.json
    python benchmarks/learner_step_vs_sf.py features OUT.pt [--env doom_defend_the_center]
    SF_PYTHON benchmarks/learner_step_vs_sf.py sf-init SF_RUN_DIR/config.json

RUN_DIR: one of our runs of a VizDoom scenario (its config.yaml and latest checkpoint; --init: a
freshly initialised model of that config instead, seeded with the run's seed). Sample Factory's
side runs twice: "same stats" (its running normalisers frozen at ours' statistics, so any
difference is the loss arithmetic) and "as SF" (it folds the batch into its observation and
return normalisers before it normalises, as it trains). `features`: the feature scales each
model.init gives at the start, on the collected frames; `sf-init`: what Sample Factory's init leaves of
each layer of the model it builds (row norms: orthogonal rows have norm 1).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# our parameter name -> Sample Factory's (the simplified conv model and a GRU core)
NAMES = {"encoder.conv.0.weight": "encoder.basic_encoder.enc.conv_head.0.weight",
         "encoder.conv.0.bias": "encoder.basic_encoder.enc.conv_head.0.bias",
         "encoder.conv.2.weight": "encoder.basic_encoder.enc.conv_head.2.weight",
         "encoder.conv.2.bias": "encoder.basic_encoder.enc.conv_head.2.bias",
         "encoder.conv.4.weight": "encoder.basic_encoder.enc.conv_head.4.weight",
         "encoder.conv.4.bias": "encoder.basic_encoder.enc.conv_head.4.bias",
         "encoder.fc.0.weight": "encoder.basic_encoder.enc.mlp_layers.0.weight",
         "encoder.fc.0.bias": "encoder.basic_encoder.enc.mlp_layers.0.bias",
         "core.weight_ih": "core.core.weight_ih_l0", "core.weight_hh": "core.core.weight_hh_l0",
         "core.bias_ih": "core.core.bias_ih_l0", "core.bias_hh": "core.core.bias_hh_l0",
         "actor.weight": "action_parameterization.distribution_linear.weight",
         "actor.bias": "action_parameterization.distribution_linear.bias",
         "critic.weight": "critic_linear.weight", "critic.bias": "critic_linear.bias"}


def load_run(args):
    """(config, model, checkpoint state or None) of our run, the config in today's schema."""
    from omegaconf import OmegaConf

    import launch.cli.app  # noqa: F401 - registers the schema in Hydra's ConfigStore
    from launch.cli.overrides import compose_checked
    from nodes.envs import env_spec
    from nodes.models.actor_critic import ActorCritic
    from nodes.record import checkpoint as ckpt

    run_cfg = OmegaConf.load(os.path.join(args.run, "config.yaml"))
    # today's schema under the run's values (a run of an older commit lacks newer keys)
    cfg = OmegaConf.merge(compose_checked("config", [f"env={run_cfg.env.name}"]), run_cfg)
    for item in args.set:  # e.g. algo.value_loss_coeff=1.0: our loss with one setting changed
        key, value = item.split("=", 1)
        OmegaConf.update(cfg, key, yaml.safe_load(value))
    torch.manual_seed(cfg.seed)
    model = ActorCritic(env_spec(cfg.env), cfg.model)
    state = None if args.init else ckpt.load(ckpt.latest(args.run))
    if state is not None:
        model.load_state_dict(state["model"])
    return cfg, model, state


@torch.no_grad()
def rollouts(cfg, model, n_envs: int, trajectories: int) -> dict[str, torch.Tensor]:
    """Trajectories of sampler.rollout steps from our policy on our env, as the rollout workers
    record them: each step's observation and recurrent state before it (and the observation and
    state after the last step), action, log-prob, value, logits, reward, done."""
    from nodes.envs import make_env

    T = cfg.sampler.rollout
    envs = [make_env(cfg.env, cfg.seed * 1000 + i) for i in range(n_envs)]
    obs = [env.reset() for env in envs]
    h = torch.zeros(n_envs, model.state_size)
    cols = {k: [] for k in ("obs", "states", "actions", "logp", "values", "logits", "rewards", "dones", "h0")}
    for _ in range(-(-trajectories // n_envs)):
        steps = {k: [] for k in cols if k != "h0"}
        cols["h0"].append(h.clone())
        for t in range(T + 1):
            x = torch.as_tensor(np.stack([ob[0] for ob in obs]))
            params, value, h_next = model.step(x, torch.as_tensor(np.stack([ob[1] for ob in obs])), h)
            steps["obs"].append(x)
            steps["states"].append(h.clone())
            if t == T:  # the observation after the rollout (the bootstrap): the next rollout starts there
                break
            act = model.heads.sample(params).float()
            steps["actions"].append(act)
            steps["logp"].append(model.heads.log_prob(params, act))
            steps["values"].append(value)
            steps["logits"].append(params)
            outcomes = [env.step(a.numpy().astype(np.int64)) for env, a in zip(envs, act)]
            obs = [o if not done else env.reset() for env, (o, _, done, _) in zip(envs, outcomes)]
            steps["rewards"].append(torch.tensor([o[1] for o in outcomes], dtype=torch.float32))
            steps["dones"].append(torch.tensor([o[2] for o in outcomes]))
            h = h_next * (~steps["dones"][-1]).float()[:, None]  # a new episode starts from a zero state
        for k, v in steps.items():
            cols[k].append(torch.stack(v, 1))
    for env in envs:
        env.close()
    return {k: torch.cat(v, 0)[:trajectories] for k, v in cols.items()}


def collect(args) -> None:
    """Our side: a batch of real trajectories from our policy, and our loss and gradients on it."""
    from omegaconf import OmegaConf

    from nodes.learning.learner import Learner
    from nodes.sampling.buffers import SlotBatch

    cfg, model, state = load_run(args)
    model.eval()
    batch = rollouts(cfg, model, args.envs, args.trajectories)
    b, T = batch["rewards"].shape
    print(f"collected {b} trajectories x {T} steps: reward sum {float(batch['rewards'].sum()):.1f}, "
          f"{int(batch['dones'].sum())} episode ends")
    learner = Learner(model, cfg.algo, precision="fp32")
    if state is not None and learner.returns is not None and "returns" in state:
        learner.returns.load_state_dict(state["returns"])
    model.train()
    slot = SlotBatch(obs=batch["obs"], meas=torch.zeros(b, T + 1, 0), actions=batch["actions"],
                     logp=batch["logp"], values=batch["values"], rewards=batch["rewards"], dones=batch["dones"],
                     versions=torch.zeros(b, T, dtype=torch.int64), h0=batch["h0"])
    parts = learner.loss(slot)
    for p in model.parameters():
        p.grad = None
    parts["loss"].backward()
    grads = {k: p.grad.detach().clone() for k, p in model.named_parameters()}
    ours = {k: float(v.detach()) for k, v in parts.items()}
    print("ours: " + "  ".join(f"{k} {v:.6f}" for k, v in ours.items()))
    torch.save({"batch": batch, "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
                "returns": None if learner.returns is None else learner.returns.state_dict(),
                "ours": ours, "grads": grads, "algo": OmegaConf.to_container(cfg.algo),
                "heads": list(model.heads.sizes)}, args.out)
    print(f"wrote {args.out}")


def sf(args) -> None:
    """Sample Factory's side, in its venv: its learner on the same batch and weights."""
    import json
    import tempfile
    import threading
    from types import SimpleNamespace

    import gymnasium as gym
    from sample_factory.algo.learning.learner import Learner
    from sample_factory.algo.utils.tensor_dict import TensorDict
    from sample_factory.utils.attr_dict import AttrDict
    from sf_examples.vizdoom.train_vizdoom import register_vizdoom_components

    register_vizdoom_components()
    saved = torch.load(args.batch, weights_only=False)
    batch, ours = saved["batch"], saved["model"]
    B, T1 = batch["obs"].shape[:2]
    with open(args.config) as f:
        cfg = AttrDict(json.load(f))
    cfg.train_dir, cfg.experiment = tempfile.mkdtemp(), "learner_step"
    obs_space = gym.spaces.Dict({"obs": gym.spaces.Box(0, 255, tuple(batch["obs"].shape[2:]), np.uint8)})
    act_space = gym.spaces.Tuple(tuple(gym.spaces.Discrete(n) for n in saved["heads"]))
    env_info = SimpleNamespace(obs_space=obs_space, action_space=act_space, frameskip=4, num_agents=1)
    server = SimpleNamespace(init=lambda *a: None, policy_lock=threading.Lock())
    print("ours:    " + "  ".join(f"{k} {v:.6f}" for k, v in saved["ours"].items()))
    for mode in ("same stats", "as SF"):
        learner = Learner(cfg, env_info, torch.zeros(1, dtype=torch.int32), 0, server)
        learner.init()
        ac = learner.actor_critic
        with torch.no_grad():
            sd = ac.state_dict()
            for k, v in NAMES.items():
                sd[v].copy_(ours[k])
            # ours normalises raw 0-255 pixels with eps 1e-5; Sample Factory pixels / 255: the same numbers
            rms = ac.obs_normalizer.running_mean_std.running_mean_std["obs"]
            rms.running_mean.copy_(ours["obs_norm.mean"].double() / 255.0)
            rms.running_var.copy_(ours["obs_norm.var"].double() / 255.0**2)
            rms.count.fill_(max(float(ours["obs_norm.count"]), 1.0))
            if saved["returns"] is not None:
                ac.returns_normalizer.running_mean.fill_(float(saved["returns"]["mean"]))
                ac.returns_normalizer.running_var.fill_(float(saved["returns"]["var"]))
                ac.returns_normalizer.count.fill_(max(float(saved["returns"]["count"]), 1.0))
        if mode == "same stats":
            rms.eps = 1e-5 / 255.0**2
            # in eval mode a normaliser only normalises (the learner itself stays in train mode, so
            # _prepare_batch does not switch them back)
            rms.eval()
            ac.returns_normalizer.eval()
        values = torch.cat([batch["values"], torch.zeros(B, 1)], 1)
        buff = TensorDict(dict(
            obs=TensorDict(dict(obs=batch["obs"].clone())), rnn_states=batch["states"].clone(),
            actions=batch["actions"].long(), log_prob_actions=batch["logp"].clone(), values=values,
            rewards=batch["rewards"].clone(), dones=batch["dones"].float(), time_outs=torch.zeros(B, T1 - 1),
            valids=torch.ones(B, T1, dtype=torch.bool), policy_id=torch.zeros(B, T1 - 1, dtype=torch.int32),
            policy_version=torch.zeros(B, T1 - 1, dtype=torch.int32), action_logits=batch["logits"].clone()))
        prepared, size, invalid = learner._prepare_batch(buff)
        dist, policy_loss, exploration, _, kl_loss, value_loss, summ = learner._calculate_losses(
            AttrDict(prepared), invalid)
        loss = policy_loss + exploration + kl_loss + value_loss
        for p in ac.parameters():
            p.grad = None
        loss.backward()
        entropy = float(dist.entropy().mean())
        ratio_dev = float((summ["ratio"] - 1).abs().mean())
        print(f"SF ({mode}): loss {float(loss):.6f}  policy_loss {float(policy_loss):.6f}  value_loss "
              f"{float(value_loss):.6f} (= coeff x MSE; ours' value_loss is 0.5 x MSE, x coeff in loss)  "
              f"exploration {float(exploration):.6f}  entropy {entropy:.6f}  ratio_dev {ratio_dev:.2e}")
        named = dict(ac.named_parameters())
        print(f"  {'parameter':24s} {'|ours|':>10s} {'|SF|':>10s} {'SF/ours':>8s} {'cosine':>8s}")
        total_o = total_s = 0.0
        for k, v in NAMES.items():
            g_o, g_s = saved["grads"][k].flatten().double(), named[v].grad.flatten().double()
            total_o, total_s = total_o + float(g_o.pow(2).sum()), total_s + float(g_s.pow(2).sum())
            cos = float(torch.nn.functional.cosine_similarity(g_o, g_s, 0))
            print(f"  {k:24s} {g_o.norm():10.3e} {g_s.norm():10.3e} {g_s.norm() / g_o.norm():8.3f} {cos:8.4f}")
        print(f"  {'all':24s} {total_o ** 0.5:10.3e} {total_s ** 0.5:10.3e} {(total_s / total_o) ** 0.5:8.3f}")


@torch.no_grad()
def sf_init(args) -> None:
    """Sample Factory's side, in its venv: the model it builds from its config (3x72x128 pixels, the
    heads 3 and 2 of defend_the_center), each layer's weight row norms and largest |bias|: what its
    policy_initialization left of each (orthogonal rows have norm 1)."""
    import json

    import gymnasium as gym
    from sample_factory.model.actor_critic import create_actor_critic
    from sample_factory.utils.attr_dict import AttrDict
    from sf_examples.vizdoom.train_vizdoom import register_vizdoom_components

    register_vizdoom_components()
    with open(args.config) as f:
        cfg = AttrDict(json.load(f))
    torch.manual_seed(0)
    obs = gym.spaces.Dict({"obs": gym.spaces.Box(0, 255, (3, 72, 128), np.uint8)})
    model = create_actor_critic(cfg, obs, gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Discrete(2))))
    params = dict(model.named_parameters())
    for name, w in params.items():
        if name.endswith("weight") or "weight_" in name:
            rows = w.flatten(1).norm(dim=1)
            bias = params.get(name.replace("weight", "bias"))
            print(f"{name:52s} row norms {float(rows.min()):.3f}-{float(rows.max()):.3f}  "
                  f"max |bias| {float(bias.abs().max()) if bias is not None else float('nan'):.4f}")


@torch.no_grad()
def features(args) -> None:
    """How large each model.init makes the features at the start, on the collected frames (normalised
    with the run's pixel statistics): the encoder's output, the GRU's after 8 steps, the logits,
    and the policy's entropy."""
    import launch.cli.app  # noqa: F401 - registers the schema in Hydra's ConfigStore
    from launch.cli.overrides import compose_checked
    from nodes.envs import env_spec
    from nodes.models.actor_critic import ActorCritic

    saved = torch.load(args.batch, weights_only=False)
    obs = saved["batch"]["obs"][:, :8].reshape(-1, *saved["batch"]["obs"].shape[2:])
    stats = {k[len("obs_norm."):]: v for k, v in saved["model"].items() if k.startswith("obs_norm.")}
    for init in ("orthogonal", "orthogonal_heads", "torch_default"):
        cfg = compose_checked("config", [f"env={args.env}", f"model.init={init}"])
        torch.manual_seed(0)
        model = ActorCritic(env_spec(cfg.env), cfg.model)
        model.obs_norm.load_state_dict(stats)
        x = model.encoder(model.obs_norm(obs))
        h = torch.zeros(obs.shape[0], model.state_size)
        for _ in range(8):
            h = model.core(x, h)
        logits = model.actor(h)
        entropy = float(model.heads.log_prob_and_entropy(logits, torch.zeros(len(h), len(model.heads.sizes)))[1].mean())
        print(f"{init:17s} encoder output rms {x.pow(2).mean().sqrt():.3f}  GRU output rms "
              f"{h.pow(2).mean().sqrt():.3f}  logits std {logits.std():.3f}  entropy {entropy:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("run")
    c.add_argument("out")
    c.add_argument("--trajectories", type=int, default=32)
    c.add_argument("--envs", type=int, default=16)
    c.add_argument("--init", action="store_true")
    c.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    s = sub.add_parser("sf")
    s.add_argument("batch")
    s.add_argument("config")
    i = sub.add_parser("sf-init")
    i.add_argument("config")
    f = sub.add_parser("features")
    f.add_argument("batch")
    f.add_argument("--env", default="doom_defend_the_center")
    args = parser.parse_args()
    {"collect": collect, "sf": sf, "sf-init": sf_init, "features": features}[args.cmd](args)


if __name__ == "__main__":
    main()

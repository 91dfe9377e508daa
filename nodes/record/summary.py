"""The figures of an iteration over the population's members (`merge_trains`) and the run's
summary (`run_summary`: what summary.json holds, documented in docs/run-directory.md)."""
from __future__ import annotations

import time

from nodes.models.numerics import param_checksum
from nodes.record.allocator import allocator
from nodes.record.stats import merged_match, merged_reward

SUMMED = ("global_samples", "stop_voted", "sync_s", "step_s", "policy_lag_max")


def merge_trains(trains: list[dict]) -> dict:
    """One iteration's figures from each member's: samples, seconds summed, the largest lag, the stop
    vote (the same in every member's all-reduce: the first that has one), the other figures
    averaged over the members that stepped, weighted by their samples.
    One member: its own figures."""
    if len(trains) == 1:
        return dict(trains[0])
    total = sum(t["global_samples"] for t in trains)
    out = {k: sum(t[k] * t["global_samples"] for t in trains) / max(total, 1) for k in trains[0] if k not in SUMMED}
    out.update(global_samples=total, stop_voted=next((t["stop_voted"] for t in trains if t["stop_voted"]), 0),
               sync_s=sum(t["sync_s"] for t in trains), step_s=sum(t["step_s"] for t in trains),
               policy_lag_max=max(t["policy_lag_max"] for t in trains))
    return out


def checksums(node, collective: bool) -> list[list[str]]:
    """Each member's parameter checksum on every rank. After a failure a peer may be gone: no
    collective, only this rank's checksum; with several nodes the last agreed one (after an NCCL
    failure the GPU must not be touched)."""
    out = []
    for learner in node.members.learners:
        if collective:
            out.append(node.peers.check_agreement(learner.model, -1))
        elif node.world > 1:
            out.append([node.peers.last_checksum] if learner is node.members.learners[0] else [])
        else:
            out.append([param_checksum(learner.model)])
    return out


def run_summary(node, outcome: str, member_sums: list[list[str]]) -> dict:
    """summary.json, with each member's checksums (`checksums`). `seconds` and `fps` run from launch
    to exit (start-up and shutdown included, as a user's wall clock sees them); `train_seconds` and
    `train_fps` from the first iteration to the last."""
    st, totals = node.stats, node.totals
    seconds = time.time() - node.launched
    restarts = float(node.sampler.pool.restarts) if node.sampler.pool is not None else 0.0
    rows = node.ranks.rows or [st.row(partial=float(totals.partial), engine_restarts=restarts)]
    frames = st.env_frames - st.start_frames
    summary = dict(
        env_frames=st.env_frames, seconds=round(seconds, 3), fps=round(frames / max(seconds, 1e-9), 1),
        train_seconds=round(node.train_seconds, 3), train_fps=round(frames / max(node.train_seconds, 1e-9), 1),
        episodes=int(sum(row.episodes for row in rows)), mean_episode_reward=merged_reward(rows),
        mean_episode_true_objective=merged_reward(rows, "objective"),  # = the reward unless the env has its own
        mean_episode_length=merged_reward(rows, "length"),  # env frames
        match=merged_match(rows),  # VizDoom matches: recent frags, deaths, place, win/draw/loss; else None
        policy_version=node.members.learners[0].version, nodes=node.world, param_checksums=member_sums[0],
        outcome=outcome, resumed_from=node.resumed_from,
        policy_lag_mean=st.last_train.get("policy_lag_mean"),
        sync_share=round(totals.sync_s / max(node.train_seconds, 1e-9), 4),
        partial_batches=int(sum(row.partial for row in rows)),  # all ranks: batches cut short
        engine_restarts=int(sum(row.engine_restarts for row in rows)),  # all ranks: agent matches restarted
        samples_per_rank=[int(x) for x in node.ranks.samples],
        sync_share_per_rank=node.ranks.sync_shares(),
        allocator=allocator(),  # tcmalloc, preloaded by the entry point, or the user's own (nodes.record.allocator)
    )
    if node.evaluation.enabled:  # rounds, the last and the best (eval.jsonl has every round)
        summary.update(eval=node.evaluation.summary())
    if node.peers.elastic:  # each change of the world this rank saw (the writer's: from its start on)
        summary.update(membership=node.membership.changes, node=node.peers.node)
    m = node.members
    if m.tracked:  # each member: version, hyper-parameters, figures over all ranks, checksums
        summary.update(population=m.summary(member_sums), pbt_events=m.pbt.events, snapshots_taken=m.snapshots_taken)
    return summary

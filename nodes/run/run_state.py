"""RunState: everything of a run that every rank must hold alike, in one object.

The learners (parameters, optimizer state, policy versions, observation and return normalisers,
a population's hyper-parameters and PBT state, self-play snapshots: nodes.population.members.Members), the
env frames trained on, the learner iterations and the recent episodes. One object, so that the
three places that move it cannot drift apart:

- a checkpoint saves and restores it (`state_dict` / `load_state_dict`, the checkpoint format);
- the start of a run gives every rank rank 0's (a fixed world) or the furthest rank's (elastic,
  and after every change of the world) through `peers.share(progress, to_bytes)`;
- the periodic agreement check compares `fingerprint(p)` beside the parameters' checksum, so two
  ranks that agree on the parameters but not on a counter or a normaliser are caught.
(moolib's LearnerState is the model: one dataclass of the mutable state that saves and loads itself.)
"""
from __future__ import annotations

import io
import struct

import torch

from nodes.record.stats import RunStats


class RunState:
    def __init__(self, members, stats: RunStats | None = None):
        self.members = members
        self.stats = stats or RunStats()
        self.iterations = 0  # learner iterations over the run (each member learns in each)

    @property
    def learners(self):
        return self.members.learners

    @property
    def progress(self) -> int:
        """How far this rank went: its members' versions summed (the same on ranks in lockstep)."""
        return sum(learner.version for learner in self.learners)

    def on_episode(self, reward: float, length: int, objective: float, match: dict | None = None,
                   member: int = 0, opponents=()) -> None:
        """A rollout worker's finished episode: its game reward, length in env frames, true
        objective, match result (a self-play snapshot's seat: nobody's)."""
        if member < self.members.size:
            self.stats.add_episode(reward, length, objective, match)
            self.members.on_episode(reward, length, objective, match, member, opponents)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self, episodes: int | None = None) -> dict:
        """The checkpoint: the members' state with the run's counters and recent episodes.
        `episodes`: the count over all ranks (the writer's own count when not given)."""
        st = self.stats
        state = self.members.state_dict()
        state.update(env_frames=st.env_frames, iterations=self.iterations,
                     episodes=st.episodes if episodes is None else episodes,
                     recent_rewards=list(st.rewards), recent_objectives=list(st.objectives),
                     recent_lengths=list(st.lengths), recent_matches=[dict(m) for m in st.matches])
        return state

    def load_state_dict(self, state: dict, source: str, episodes_here: bool) -> None:
        """Take a checkpoint (CheckpointError when it does not fit this run). Frames and iterations
        are global (every rank counts all of them); episodes and recent rewards were merged over
        ranks when saved, so only one rank (`episodes_here`) takes them back."""
        self.members.load_state_dict(state, source)
        self.iterations = int(state.get("iterations", 0))  # older checkpoints did not keep them
        self.stats = RunStats(int(state["env_frames"]), int(state["episodes"]) if episodes_here else 0,
                              state["recent_rewards"] if episodes_here else (),
                              recent_matches=state.get("recent_matches", ()) if episodes_here else (),
                              recent_objectives=state.get("recent_objectives") if episodes_here else None,
                              recent_lengths=state.get("recent_lengths") if episodes_here else None)

    # ------------------------------------------------------------------ one rank's state to another
    def to_bytes(self) -> bytes:
        """What `peers.share` sends: the learners' state and the run's counters (not the episodes:
        each rank keeps its own, and the gathered rows merge them)."""
        buf = io.BytesIO()
        torch.save({"members": self.members.state_dict(), "env_frames": self.stats.env_frames,
                    "iterations": self.iterations}, buf)
        return buf.getvalue()

    def load_bytes(self, data: bytes, device: torch.device) -> None:
        state = torch.load(io.BytesIO(data), map_location=device, weights_only=True)
        self.members.load_state_dict(state["members"], "the state a peer sent")
        self.stats.env_frames = int(state["env_frames"])
        self.iterations = int(state["iterations"])

    # ------------------------------------------------------------------ agreement
    def fingerprint(self, p: int) -> bytes:
        """Member p's state beside its parameters, for the agreement check: its policy version, the
        run's frames and iterations, and the normalisers (observation statistics are model buffers,
        the return normaliser is the learner's)."""
        learner = self.learners[p]
        head = struct.pack("<qqq", learner.version, self.stats.env_frames, self.iterations)
        tensors = list(learner.model.buffers())
        if learner.returns is not None:
            tensors += list(learner.returns.buffers())
        return head + b"".join(t.detach().cpu().contiguous().numpy().tobytes() for t in tensors)

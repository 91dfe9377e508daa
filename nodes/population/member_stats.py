"""What each population member did: on this node (`MemberStats`), as the row a rank contributes to
the stats gather (`MemberRow`), and merged over ranks (`merge_members`), with who played whom (self-play)."""
from __future__ import annotations

import collections
import math
from dataclasses import astuple, dataclass, fields

from nodes.envs.doom_match import MATCH_KEYS
from nodes.record.stats import EpisodeFigures, merged_reward


@dataclass
class MemberRow(EpisodeFigures):
    """One member's figures on one rank, gathered with the rank's row (nodes.record.stats.RankRow): its
    episode figures, then per opponent q (every member, then every self-play snapshot) its recent
    matches against q, wins and frags summed (3 values each)."""

    @staticmethod
    def width(opponents: int) -> int:
        return len(fields(MemberRow)) + 3 * opponents

    def to_floats(self, vs: list[list[float]]) -> list[float]:
        return [float(x) for x in astuple(self)] + [float(x) for row in vs for x in row]

    @classmethod
    def from_floats(cls, values, opponents: int) -> tuple[MemberRow, list[list[float]]]:
        n = len(fields(cls))
        vs = [list(values[n + 3 * q : n + 3 * q + 3]) for q in range(opponents)]
        return cls(*values[:n]), vs


class MemberStats:
    """What one member did on this node: recent episode rewards and match results, and its recent
    matches against each member (who played whom: self-play's table)."""

    def __init__(self, opponents: int, window: int = 100):
        """opponents: the members and the self-play snapshot slots (who can sit in another seat)."""
        self.opponents = opponents
        self.episodes = 0
        self.rewards: collections.deque = collections.deque(maxlen=window)
        self.objectives: collections.deque = collections.deque(maxlen=window)
        self.matches: collections.deque = collections.deque(maxlen=window)
        self.against: collections.deque = collections.deque(maxlen=window)  # (opponent, win, frags)

    def add(self, reward: float, objective: float, match: dict | None, opponents=()) -> None:
        self.episodes += 1
        self.rewards.append(reward)
        self.objectives.append(objective)
        if match is not None:
            self.matches.append(match)
            for q in opponents:
                self.against.append((int(q), float(match["win"]), float(match["frags"])))

    def row(self) -> list[float]:
        r = sum(self.rewards) / len(self.rewards) if self.rewards else math.nan
        means = {k: sum(m[k] for m in self.matches) / len(self.matches) for k in MATCH_KEYS} if self.matches else {}
        vs = [[0.0, 0.0, 0.0] for _ in range(self.opponents)]
        for q, win, frags in self.against:
            vs[q][0] += 1
            vs[q][1] += win
            vs[q][2] += frags
        o = sum(self.objectives) / len(self.objectives) if self.objectives else math.nan
        return MemberRow(float(self.episodes), r, float(len(self.rewards)), float(len(self.matches)),
                         objective=o, **means).to_floats(vs)


def opponent_name(q: int, size: int) -> str:
    """A member's number, or snapshot<s> for self-play snapshot s (seat number size + s)."""
    return str(q) if q < size else f"snapshot{q - size}"


def merge_members(rows_by_rank: list[list[float]], size: int, opponents: int | None = None) -> list[dict]:
    """Every member's figures over all ranks (means weighted by their counts): episodes, reward,
    match figures, and per opponent (opponent_name) {matches, win, frags}."""
    opponents = opponents or size
    out = []
    for p in range(size):
        parts = [MemberRow.from_floats(r[p], opponents) for r in rows_by_rank]
        rows = [row for row, _ in parts]
        n = sum(row.reward_n for row in rows if row.reward_n)
        member = {"episodes": int(sum(row.episodes for row in rows)), "reward": merged_reward(rows),
                  "true_objective": merged_reward(rows, "objective"), "reward_n": int(n)}
        m = sum(row.match_n for row in rows)
        if m:
            member["match"] = {k: sum(getattr(row, k) * row.match_n for row in rows if row.match_n) / m
                               for k in MATCH_KEYS}
            member["match"]["matches"] = int(m)
            vs = {}
            for q in range(opponents):
                games = sum(v[q][0] for _, v in parts)
                if games:
                    vs[opponent_name(q, size)] = {"matches": int(games), "win": sum(v[q][1] for _, v in parts) / games,
                             "frags": sum(v[q][2] for _, v in parts) / games}
            member["against"] = vs
        out.append(member)
    return out

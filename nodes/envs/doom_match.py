"""VizDoom deathmatches: what a match needs beyond the single-player game (nodes/envs/doom.py).

- Which maps take how many players: a map's deathmatch starts (thing type 11) are read from its
  WAD (UDMF TEXTMAP or Doom-format THINGS); a map without any is a single-player map. Some maps
  place players from a script instead, so an env may declare env.max_players; the engine takes at
  most ENGINE_MAX_PLAYERS (measured: the 17th `addbot` is ignored). Not every multiplayer map is a
  deathmatch: multi.cfg's multi_deathmatch.wad is a first-kill duel (its script exits the level
  when player 0 or 1 dies), so the deathmatch envs use cig.cfg (cig.wad map01, 25 starts).
- Which bots join: bots.cfg (shipped with vizdoom) lists 15 scripted bots with aiming,
  perfection, reaction and isp scores; ranked by their mean, "easy" is the lower third, "medium"
  the middle, "hard" the upper third and "mixed" all of them, dealt round-robin. Bots leave at
  every new episode (measured), so each match adds them again.
- The host's arguments: a deathmatch of one human slot (the agent; bots are not players that
  must connect), forced respawn, no auto-aim, spawn protection, the farthest spawn, no crouch,
  and a time limit that ends the episode.
- A match's result from the server state: frags, deaths, the agent's place (1 + players with
  more frags), and win (first alone), draw (first, tied) or loss.
"""
from __future__ import annotations

import functools
import os
import re
import struct
from dataclasses import dataclass

import numpy as np

from nodes.errors import ConfigError

ENGINE_MAX_PLAYERS = 16
DEATHMATCH_START = 11  # Doom thing type
BOT_SKILLS = ("easy", "medium", "hard", "mixed")
AGENT_NAME = "agent"
MATCH_KEYS = ("frags", "deaths", "place", "win", "draw", "loss")  # what a finished match reports


def _lumps(data: bytes) -> list[tuple[str, int, int]]:
    """(name, offset, size) of every lump of a WAD, in order."""
    ident, count, table = struct.unpack_from("<4sii", data, 0)
    if ident not in (b"IWAD", b"PWAD"):
        raise ConfigError("not a WAD file")
    out = []
    for i in range(count):
        pos, size, name = struct.unpack_from("<ii8s", data, table + 16 * i)
        out.append((name.rstrip(b"\0").decode("ascii", "replace").upper(), pos, size))
    return out


@functools.lru_cache(maxsize=32)
def deathmatch_starts(wad_path: str, map_name: str) -> int | None:
    """The deathmatch starts of `map_name` in the WAD; None if the WAD has no such map."""
    with open(wad_path, "rb") as f:
        data = f.read()
    lumps = _lumps(data)
    names = [n for n, _, _ in lumps]
    if map_name.upper() not in names:
        return None
    i = names.index(map_name.upper()) + 1
    while i < len(lumps) and lumps[i][0] in ("TEXTMAP", "THINGS", "LINEDEFS", "SIDEDEFS", "VERTEXES", "SEGS",
                                             "SSECTORS", "NODES", "SECTORS", "REJECT", "BLOCKMAP", "BEHAVIOR",
                                             "SCRIPTS", "ZNODES", "DIALOGUE", "ENDMAP"):
        name, pos, size = lumps[i]
        if name == "TEXTMAP":  # UDMF: thing { ...; type = 11; ... }
            text = data[pos : pos + size].decode("ascii", "replace")
            blocks = re.findall(r"\bthing\b[^{]*\{([^}]*)\}", text, re.IGNORECASE)
            return sum(1 for b in blocks if re.search(rf"\btype\s*=\s*{DEATHMATCH_START}\s*;", b))
        if name == "THINGS":  # Doom format: 10 bytes per thing, type the 4th short
            things = struct.iter_unpack("<hhhhh", data[pos : pos + size - size % 10])
            return sum(1 for t in things if t[3] == DEATHMATCH_START)
        i += 1
    return 0


@functools.lru_cache(maxsize=1)
def bot_profiles(bots_cfg: str) -> tuple[tuple[str, float], ...]:
    """(name, mean of aiming, perfection, reaction, isp) of every bot in bots.cfg, weakest first."""
    with open(bots_cfg) as f:
        text = f.read()
    out = []
    for block in re.findall(r"\{([^}]*)\}", text):
        fields = dict(re.findall(r"^\s*(\w+)\s+(\S+)", block, re.MULTILINE))
        scores = [float(fields[k]) for k in ("aiming", "perfection", "reaction", "isp") if k in fields]
        if "name" in fields and scores:
            out.append((fields["name"], sum(scores) / len(scores)))
    return tuple(sorted(out, key=lambda x: (x[1], x[0])))


def roster(profiles, skill: str, count: int, seed: int) -> list[str]:
    """The names of `count` bots of that skill (round-robin over the group, starting at a place
    drawn from `seed`, so envs of one run meet different bots)."""
    third = len(profiles) // 3
    group = {"easy": profiles[:third], "medium": profiles[third : len(profiles) - third],
             "hard": profiles[len(profiles) - third :], "mixed": profiles}[skill]
    start = int(np.random.default_rng(seed).integers(len(group)))
    return [group[(start + i) % len(group)][0] for i in range(count)]


@dataclass(frozen=True)
class Seat:
    """A player's place in a match between agents: player `index` of `agents`, the host (index 0)
    listening on `port` of this machine."""

    index: int
    agents: int
    port: int


def _rules(env_cfg) -> str:
    return (f"-deathmatch +timelimit {env_cfg.match_minutes:g} +sv_forcerespawn 1 +sv_noautoaim 1 "
            "+sv_respawnprotect 1 +sv_spawnfarthest 1 +sv_nocrouch 1 +viz_respawn_delay 0 +viz_nocheat 1")


def host_args(env_cfg) -> str:
    """A match of one agent (and bots): the env hosts it alone."""
    return f"-host 1 {_rules(env_cfg)} +name {AGENT_NAME} +colorset 0"


def seat_args(env_cfg, seat: Seat) -> str:
    """A match between agents over local UDP: player 0 hosts it (and its rules) and waits for the
    others to join; forced respawn means no player needs a tic of its own to respawn."""
    timeout = max(1, round(env_cfg.match_timeout_s))
    name = f"+name {AGENT_NAME}{seat.index} +colorset {seat.index % 8} +viz_connect_timeout {timeout}"
    if seat.index == 0:
        return f"-host {seat.agents} -port {seat.port} -netmode 0 {_rules(env_cfg)} {name}"
    return f"-join 127.0.0.1:{seat.port} {name}"


def check(env_cfg, wad_path: str, map_name: str) -> None:
    """Refuse, in one line, a match the map or the engine cannot host (starts no engine)."""
    if env_cfg.bots < 0:
        raise ConfigError(f"env.bots must be >= 0, got {env_cfg.bots}")
    if env_cfg.bot_skill not in BOT_SKILLS:
        raise ConfigError(f"env.bot_skill must be one of {', '.join(BOT_SKILLS)}, got '{env_cfg.bot_skill}'")
    if env_cfg.max_players < 0:
        raise ConfigError(f"env.max_players must be >= 0 (0: the map's deathmatch starts), got {env_cfg.max_players}")
    if env_cfg.bots == 0 and env_cfg.agents == 1:
        return
    if env_cfg.match_minutes <= 0:
        raise ConfigError(f"env.match_minutes must be > 0 for a match, got {env_cfg.match_minutes:g}")
    if env_cfg.agents > 1 and env_cfg.match_timeout_s <= 0:
        raise ConfigError(f"env.match_timeout_s must be > 0, got {env_cfg.match_timeout_s:g}")
    starts = deathmatch_starts(wad_path, map_name)
    where = f"map {map_name} of {os.path.basename(wad_path)}"
    if starts is None:
        raise ConfigError(f"env.doom_map: {where} does not exist")
    limit = min(env_cfg.max_players or starts, ENGINE_MAX_PLAYERS)
    asked = ", ".join(f"env.{k}={getattr(env_cfg, k)}" for k in ("agents", "bots") if getattr(env_cfg, k) > 1
                      or (k == "bots" and env_cfg.bots > 0))
    if limit < 2:
        raise ConfigError(f"{asked} on a single-player map: {where} has no deathmatch starts "
                          "(pick a multiplayer scenario, e.g. env=doom_duel_bots, or set env.max_players)")
    players = env_cfg.agents + env_cfg.bots
    if players > limit:
        said = f"takes at most {limit} players" + (" (the engine's limit)" if limit == ENGINE_MAX_PLAYERS else "")
        raise ConfigError(f"{asked}: {where} {said}, asked for {players} "
                          f"({env_cfg.agents} agent{'s' if env_cfg.agents > 1 else ''} + {env_cfg.bots} bots)")


def result(server_state, me: int, frags: float, deaths: float) -> dict[str, float]:
    """The finished match, as MATCH_KEYS (frags and deaths: the match's own); the place is 1 + the
    players with more frags in the server's table."""
    mine = float(server_state.players_frags[me])
    others = [f for i, f in enumerate(server_state.players_frags)
              if i != me and server_state.players_in_game[i]]
    place = 1 + sum(float(f) > mine for f in others)
    tied = any(float(f) == mine for f in others)
    win, draw = float(place == 1 and not tied), float(place == 1 and tied)
    return dict(frags=frags, deaths=deaths, place=float(place), win=win, draw=draw, loss=1.0 - win - draw)

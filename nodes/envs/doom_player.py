"""One player of a VizDoom match between agents: a plain subprocess owning one engine.

Started by nodes/envs/doom_agents.py as `python doom_player.py FD` (a plain process, not a
multiprocessing child: rollout workers are daemonic, and two DoomGames initialised from two
threads of one process hang in init()). FD is its end of a socket pair; the messages:

    -> (env_cfg, seed, seat)            <- ("ready", first observation) | ("error", traceback)
    -> ("tic", action | None, last)     <- None, or after the step's last tic
                                           (obs, reward, done, info, next first observation | None,
                                            the engine's tic in the match)
    -> ("render",)                      <- the last full frame
    -> ("close",)                       the engine closes, the process exits

A finished match starts the next one here (every player at once, so no player's new_episode()
waits for another's message). The process exits when its socket closes (its match or rollout
worker is gone); its engine is in the node's process group, so the janitor kills what is left.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import traceback
from multiprocessing.connection import Connection

if __package__ in (None, ""):  # run by path: the project root on the path, as for `-m`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from nodes.envs.doom import DoomEnv  # noqa: E402


def serve(conn: Connection) -> None:
    env = None
    try:
        env_cfg, seed, seat = conn.recv()
        env = DoomEnv(env_cfg, seed, seat)
        conn.send(("ready", env.first_obs()))
        while True:
            msg = conn.recv()
            if msg[0] == "tic":
                _, action, last = msg
                if action is not None:
                    env.act(action)
                env.tic(last)
                if not last:
                    conn.send(None)
                    continue
                obs, reward, done, info = env.outcome()
                tic = env.game.get_episode_time()
                conn.send((obs, reward, done, info, env.reset() if done else None, tic))
            elif msg[0] == "render":
                conn.send(env.render())
            else:
                break
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # the match is gone
    except Exception:  # the engine died, or anything else: the match restarts with fresh players
        with contextlib.suppress(OSError):
            conn.send(("error", traceback.format_exc()))
    finally:
        if env is not None:
            env.close()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the node stops the match
    serve(Connection(int(sys.argv[1])))


if __name__ == "__main__":
    main()

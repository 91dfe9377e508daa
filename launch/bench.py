"""`python -m launch.bench [overrides]`: throughput of one layout, three phases in one run.

1. simulate: the rollout workers step their envs with random actions (no inference, no learning);
2. sample:   the full sampler with policy workers, finished trajectories discarded (no learning);
3. train:    the full node, learning.
Each phase runs `bench.warmup_s` then is measured for `bench.seconds`. Frames are env frames
(agent steps x frameskip). The last line printed is one JSON object.
"""
from __future__ import annotations

import json
import logging
import shutil
import sys

import hydra

from launch.app import hydra_run_dir, precheck_argv, refuse, resolve

log = logging.getLogger("launch.bench")


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg) -> None:
    obj = resolve(cfg, hydra_run_dir())
    if obj.nodes > 1:
        refuse(f"nodes={obj.nodes}: multi-node benchmark (sync/) is not available yet; use nodes=1")
    from nodes.node import Node
    s = obj.sampler
    print(f"bench: env={obj.env.name} workers={s.num_workers} envs_per_worker={s.envs_per_worker} "
          f"double_buffered={s.double_buffered} policy_workers={s.num_policy_workers} "
          f"batch={s.batch_size} rollout={s.rollout} seconds/phase={obj.bench.seconds}", flush=True)
    fps = {}
    for phase in ("simulate", "sample", "train"):
        fps[phase] = Node(obj, is_writer=False).measure(phase, obj.bench.seconds, obj.bench.warmup_s)
        print(f"{phase:>9}: {fps[phase]:10.1f} env frames/s", flush=True)
    shutil.rmtree(obj.run_dir, ignore_errors=True)  # a benchmark leaves no run behind
    result = dict(pure_sim_fps=round(fps["simulate"], 1), sampler_fps=round(fps["sample"], 1),
                  train_fps=round(fps["train"], 1),
                  sampler_ratio=round(fps["sample"] / fps["simulate"], 3),
                  train_ratio=round(fps["train"] / fps["simulate"], 3))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    precheck_argv(sys.argv[1:])
    main()

"""The learner's step alone and the page faults it takes, under whichever allocator this process has:

    DISTRL_MALLOC=system python benchmarks/learner_step_faults.py          # glibc's malloc
    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 python benchmarks/learner_step_faults.py
    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 python benchmarks/learner_step_faults.py

(this script is not an entry point: it never preloads tcmalloc itself). Learner.train_step on a
synthetic doom_basic batch of 32 x 32 samples, bf16, 1 thread (the node's learner on 2 cores);
prints the median step of 5 after 2 warm-ups and the median minor page faults a step
(docs/benchmarks.md, "tcmalloc under the node"). Run from the checkout to measure."""
from __future__ import annotations

import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())


def main() -> None:
    import torch

    import launch.cli.app  # noqa: F401 - registers the schema in Hydra's ConfigStore
    from launch.cli.overrides import compose_checked
    from launch.tools.scaling_harness import synthetic_batch
    from nodes.envs import env_spec
    from nodes.learning.learner import Learner
    from nodes.models.actor_critic import ActorCritic

    cfg = compose_checked("config", ["env=doom_basic"])
    spec = env_spec(cfg.env)
    torch.set_num_threads(1)
    model = ActorCritic(spec, cfg.model)
    learner = Learner(model, cfg.algo, precision="bf16")
    batch = synthetic_batch(spec, model.state_size, 32, 32, 0)
    for _ in range(2):
        learner.train_step(batch)
    steps, faults = [], []
    for _ in range(5):
        f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
        learner.train_step(batch)
        steps.append(time.perf_counter() - t0)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    print(f"LD_PRELOAD={os.environ.get('LD_PRELOAD', '')}: learner step {statistics.median(steps) * 1e3:.0f} ms "
          f"(1 thread, bf16), minor page faults a step {statistics.median(faults):.0f}")


if __name__ == "__main__":
    main()

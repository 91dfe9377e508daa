"""`python -m sync.store_keeper SIZE TIMEOUT_S RUN_DIR`: host one elastic generation's TCPStore
(RUN_DIR only names the run in `ps`).

Started by the generation's lowest node (sync.rendezvous); prints the port it listens on, then
serves until its stdin closes, which happens when the node that started it exits or is killed
(not PR_SET_PDEATHSIG: that fires when the *thread* that started the child ends). A child
process, not a thread of the trainer: a trainer frozen by SIGSTOP would freeze a store in its
own process, and store calls to a frozen TCPStore block with no timeout.
"""
import os
import signal
import sys
from datetime import timedelta

import torch.distributed as dist


def main(size: int, timeout_s: float) -> None:
    # Ctrl-C, scancel's SIGTERM and Slurm's preemption signal reach every process of a step: they
    # are for the trainer, which stops after an iteration that still needs this store
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    store = dist.TCPStore("0.0.0.0", 0, size, is_master=True, timeout=timedelta(seconds=timeout_s),
                          wait_for_workers=False)
    print(store.port, flush=True)
    sys.stdin.read()  # EOF: the node is gone
    # at once, without the store's destructor: a server tearing down still accepts connections and
    # answers none, which made a survivor's heartbeat look block for 10+ s before it saw the loss
    os._exit(0)


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]))  # argv[3]: the run directory, for `ps` only

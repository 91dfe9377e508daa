"""Everything that crosses machines: which world this process is in (sync.world), DistPeers
(sync.dist_peers), the multi-node implementation of nodes.run.peers.Peers over torch.distributed, and the
elastic run's membership (sync.rendezvous, which launch a process belongs to: sync.launches,
sync.store_keeper), and stores that listen only where their peers reach them (sync.listen).

The only package that imports torch.distributed. With one node nothing here is used: the node
runs with nodes.run.peers.Solo and creates no process group.
"""

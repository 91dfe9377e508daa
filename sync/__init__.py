"""Everything that crosses machines: which world this process is in (sync.world), DistPeers
(sync.peers), the multi-node implementation of nodes.peers.Peers over torch.distributed, and the
elastic run's membership (sync.rendezvous, sync.store_keeper).

The only package that imports torch.distributed. With one node nothing here is used: the node
runs with nodes.peers.Solo and creates no process group.
"""

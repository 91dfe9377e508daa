"""Starting ranks on this machine: the local spawner, emulated hosts, one rank's driver."""

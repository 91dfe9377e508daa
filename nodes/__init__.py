"""One machine's trainer (a Sample Factory node). Knows nothing of other machines."""

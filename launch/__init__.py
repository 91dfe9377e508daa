"""Entry points: `python -m launch.train`, `python -m launch.bench`."""

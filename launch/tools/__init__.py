"""The parts of the measuring entry points (bench, scaling, chaos, curves, enjoy)."""

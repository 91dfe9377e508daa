"""Stands in for a machine without MuJoCo: a directory put first on PYTHONPATH by
tests/test_continuous_runs.py, so `import mujoco` fails as it does where the package is missing."""
raise ImportError("No module named 'mujoco' (hidden by tests/no_mujoco)")

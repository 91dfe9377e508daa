"""The configuration: the structured config's dataclasses (every default), what the sampler's layout derives
from a config, and the checks on a composed config."""

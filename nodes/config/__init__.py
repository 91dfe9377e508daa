"""The configuration: the schema (every default) and the checks on a composed config."""

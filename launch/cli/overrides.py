"""Command-line overrides, checked with Hydra's own grammar before any process starts.

`check_command(argv)` (launch.train, launch.bench) parses the overrides with Hydra's override
parser, so every form Hydra documents works: `a,b`, `choice()`, `range()`, `interval()`, `glob()`,
`tag()`, quoted strings, lists, dicts, `+key=`, `++key=`, `~key`. It expands a sweep into the
points Hydra's basic sweeper will run, composes conf/ for each point the way Hydra will, and runs
the semantic checks on each (nodes.config.validate.validate, then the env check). `compose_checked` is
the one place that turns Hydra's and OmegaConf's errors into our one-line messages;
launch.enjoy composes its own options through it too. The first bad value ends the command
with one line on stderr and exit code 2 (launch.process.exits.refuse).

A sweep of more than MAX_POINTS points (or one run by a sweeper plugin, e.g. Optuna, whose
points are not known in advance) is checked value by value instead: each value of each swept
key with the first value of the others, and both ends of an `interval()`.
"""
from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, Override
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import AnyNode, DictConfig, IntegerNode, OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    ConfigTypeError,
    OmegaConfBaseException,
    ValidationError,
)

from launch.process.exits import refuse
from nodes.errors import ConfigError, did_you_mean, one_line

CONF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "conf")
MAX_POINTS = 64  # a bigger sweep is checked value by value (each composition takes ~0.1 s)


_SCHEMAS: dict[str, Any] = {}


def register(name: str, node: type) -> None:
    """Register a structured config in Hydra's ConfigStore (the `schema` entry of conf/config.yaml)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name=name, node=node)
    _SCHEMAS[name] = OmegaConf.structured(node)


def _schema(config_name: str) -> Any | None:
    return _SCHEMAS.get("schema" if config_name == "config" else config_name)


# ----------------------------------------------------------------------------- parsing
def split_argv(argv: Sequence[str]):
    """argv as Hydra's own argument parser reads it (.overrides, .multirun, ...); None when
    argparse refuses it (Hydra then prints its usage message itself)."""
    from hydra._internal.utils import get_args_parser

    try:
        args = get_args_parser().parse_args(list(argv))
    except SystemExit:
        return None
    return args


def parse(lines: Sequence[str], loader=None) -> list[Override]:
    try:
        return OverridesParser.create(config_loader=loader).parse_overrides(list(lines))
    except OverrideParseException as exc:
        reason = [ln.strip() for ln in str(exc.message).splitlines()[1:] if ln.strip() and "hydra.cc" not in ln]
        raise ConfigError(f"cannot parse override '{exc.override}': {reason[0] if reason else one_line(exc)}") from None


def _value_strings(o: Override, loader) -> list[str]:
    """The values a sweep (or a plain override) takes, as override value strings."""
    if o.is_delete() and o.value_type is None:
        return [""]
    if not o.is_sweep_override():
        return [o.get_value_element_as_str()]
    if o.is_discrete_sweep():
        o.config_loader = loader  # glob() lists the group's options through it
        return list(o.sweep_string_iterator())
    sweep = o.value()  # interval(): only its ends can be checked
    return [str(sweep.start), str(sweep.end)]


def _line(o: Override, value: str) -> str:
    key = o.get_key_element()
    return key if o.is_delete() and value == "" else f"{key}={value}"


# ----------------------------------------------------------------------------- whole numbers
def _int_key(schema: Any, key: str) -> bool:
    """`key` holds an integer in the schema: an int field, or an Any field whose default is one
    (sampler.num_workers: an integer or auto)."""
    node = schema
    for part in key.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            return False
        node = node._get_node(part)
    return isinstance(node, IntegerNode) or (isinstance(node, AnyNode) and type(node._value()) is int)


def _whole(value: Any, key: str) -> Any:
    if not isinstance(value, float):
        return value
    if not value.is_integer():
        raise ConfigError(f"bad value for {key}: {value:g} is not a whole number")
    return int(value)


def _text(value: Any) -> str | None:
    """An override's value as Hydra's grammar writes it; None for one this rewrite leaves alone."""
    if value is None:
        return "null"
    if isinstance(value, int) or (isinstance(value, str) and value.isidentifier()):
        return str(value)
    return None


def _whole_line(line: str, o: Override, schema: Any) -> str:
    """One override line with its integral floats as integers (see whole_numbers)."""
    if o.package is not None or o.value_type is None or o.is_hydra_override() or not _int_key(schema, o.key_or_group):
        return line
    sweep = o.value() if o.is_sweep_override() else None
    if sweep is not None and (not isinstance(sweep, ChoiceSweep) or sweep.shuffle):
        return line  # range() and interval() are the sweeper's, as written
    values = sweep.list if sweep is not None else [o.value()]
    if not any(isinstance(v, float) for v in values):
        return line
    texts = [_text(_whole(v, o.key_or_group)) for v in values]
    if None in texts:
        return line
    body = ",".join(texts)
    if sweep is not None and not sweep.simple_form:
        body = f"choice({body})"
    if sweep is not None and sweep.tags:
        body = f"tag({','.join(sorted(sweep.tags))},{body})"
    return f"{o.get_key_element()}={body}"


def whole_numbers(lines: Sequence[str], schema: Any) -> list[str]:
    """`lines` with each integral float given to an integer key of `schema` written as that integer
    (train.max_env_frames=1e6 -> train.max_env_frames=1000000, a sweep's values too): users write
    1e6, Hydra's grammar reads it as a float and OmegaConf takes no float for an int. A fraction
    for an integer key is refused (ConfigError, one line naming the key)."""
    if schema is None:
        return list(lines)
    return [_whole_line(line, o, schema) for line, o in zip(lines, parse(lines))]


# ----------------------------------------------------------------------------- composing
def _unknown_keys(cfg: Any, schema: Any, prefix: str = "") -> list[str]:
    """Keys of a composed config that its schema does not have (a `+key=` Hydra let through).
    Free-form fields (dicts such as env.shaping) take any key."""
    if not isinstance(cfg, DictConfig) or not isinstance(schema, DictConfig):
        return []
    if OmegaConf.get_type(schema) in (dict, None):
        return []
    out = []
    for key in cfg:
        if key not in schema:
            out.append(f"{prefix}{key}")
        else:
            out += _unknown_keys(cfg._get_node(key), schema._get_node(key), f"{prefix}{key}.")
    return out


def _all_keys(schema: Any, prefix: str = "") -> list[str]:
    """Every key of the schema, dotted (train, train.max_env_frames, ...): what an unknown key is
    compared with for a suggestion."""
    if not isinstance(schema, DictConfig) or OmegaConf.get_type(schema) in (dict, None):
        return []
    out = []
    for key in schema:
        out += [f"{prefix}{key}", *_all_keys(schema._get_node(key), f"{prefix}{key}.")]
    return out


def unknown_key(key: str, schema: Any) -> str:
    return f"unknown config key '{key}'{did_you_mean(key, _all_keys(schema))}"


def _free_form(schema: Any, key: str) -> bool:
    """The key is inside a free-form dict of the schema (such as env.shaping)."""
    parent = key.rpartition(".")[0]
    node = OmegaConf.select(schema, parent, default=None) if schema is not None and parent else None
    return isinstance(node, DictConfig) and OmegaConf.get_type(node) is dict


def _composition_error(exc: BaseException, lines: Sequence[str], groups: dict[str, list[str]], schema: Any) -> str:
    cause = exc.__cause__ or exc.__context__
    key = getattr(cause, "full_key", None)
    if isinstance(exc, MissingConfigException):
        for line in lines:
            group, _, value = line.lstrip("+~").partition("=")
            if group in groups and value not in groups[group]:
                return unknown_option(group, value, groups[group])
        return one_line(exc)
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and key:
        if _free_form(schema, key):
            parent, _, name = key.rpartition(".")
            return (f"{parent} has no key '{name}': add one with +{key}=<value>, remove one with "
                    f"~{parent}.<key> (Hydra merges a dict value into what is there)")
        return unknown_key(key, schema)
    if isinstance(cause, ValidationError) and key:
        return f"bad value for {key}: {one_line(cause)}"
    if isinstance(cause, ConfigTypeError) and key and "deletion" in str(cause):
        return f"~{key}: {key} is a key of the schema and cannot be removed; set it instead ({key}=...)"
    if isinstance(cause, OmegaConfBaseException):
        return f"{one_line(exc)}: {one_line(cause)}"
    return one_line(exc)


def unknown_option(group: str, value: str, options: list[str]) -> str:
    if group == "env" and value.startswith("atari_"):
        games = [o for o in options if o.startswith("atari_")]
        return (f"unknown env '{value}'{did_you_mean(value, games)} (Atari confs: {', '.join(games)}; any other "
                "game: env=atari env.id=ALE/<Game>-v5)")
    return f"unknown {group} '{value}'{did_you_mean(value, options)} (available: {', '.join(options)})"


def _groups(loader, names) -> dict[str, list[str]]:
    """{group: its options} of the config groups among `names` (a dotted key names none: Hydra's
    groups nest with '/', and asking for each key's options would read conf/ again)."""
    out = {}
    for name in names:
        if name and "." not in name and not name.startswith("hydra"):
            options = loader.get_group_options(name)
            if options:
                out[name] = options
    return out


def compose_checked(config_name: str, lines: Sequence[str], schema: Any = None) -> Any:
    """Compose `config_name` from conf/ with override lines; the typed object, or ConfigError
    with one line. Integral floats for integer keys are integers (whole_numbers). Hydra's global
    state is left as it was found (hydra.main initialises it)."""
    schema = schema if schema is not None else _schema(config_name)
    lines = whole_numbers(lines, schema)
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        groups = _groups(loader, [ln.lstrip("+~").partition("=")[0] for ln in lines])
        for line in lines:
            key, _, value = line.lstrip("+").partition("=")
            if key in groups and value not in groups[key]:  # (~group removes it: no value)
                raise ConfigError(unknown_option(key, value, groups[key]))
        try:
            cfg = compose(config_name=config_name, overrides=list(lines))
        except (HydraException, OmegaConfBaseException) as exc:
            raise ConfigError(_composition_error(exc, lines, groups, schema)) from None
    unknown = _unknown_keys(cfg, schema if schema is not None else cfg)
    if unknown:
        raise ConfigError(unknown_key(unknown[0], schema if schema is not None else cfg))
    try:
        return OmegaConf.to_object(cfg)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"bad config: {one_line(exc)}") from None


def compose_tool(name: str, lines: Sequence[str], command: str, what: str, options: str) -> Any:
    """A tool's own options (launch.enjoy, launch.export, launch.import_sf: the schema registered as
    `name`) composed from override lines; ConfigError (one line) for a sweep (`command` does `what`:
    "plays one policy") or a bad key, an unknown key's line naming the tool's `options`."""
    for o in parse(lines):
        if o.is_sweep_override():
            raise ConfigError(f"{o.input_line}: {command} {what}, it takes no sweep")
    try:
        return compose_checked(name, lines)
    except ConfigError as exc:
        if str(exc).startswith("unknown config key"):
            raise ConfigError(f"{exc} (options: {options})") from None
        raise


# ----------------------------------------------------------------------------- sweeps
def sweep_points(overrides: list[Override], loader, all_points: bool) -> list[list[str]]:
    """Override lines of the points to check: every point of the sweep (what the basic sweeper
    runs), or, when all_points is false, each value of each key with the first of the others."""
    keys = [o for o in overrides if not o.is_hydra_override()]
    values = [_value_strings(o, loader) for o in keys]
    if all_points:
        return [[_line(o, v) for o, v in zip(keys, combo)] for combo in itertools.product(*values)]
    points = [[_line(o, vs[0]) for o, vs in zip(keys, values)]]
    for i, vs in enumerate(values):
        for v in vs[1:]:
            point = list(points[0])
            point[i] = _line(keys[i], v)
            points.append(point)
    return points


def check_command(argv: Sequence[str], check: Callable[[Any], None], config_name: str = "config") -> list[str]:
    """Refuse (one line, exit 2) the first bad override or sweep point of a Hydra app's argv.
    `check(cfg)` runs the semantic checks on each composed point (raises ConfigError). Returns the
    argv for Hydra to run (the entry point puts it in sys.argv, which Hydra's app reads): the same,
    with integral floats for integer keys written as integers (whole_numbers: 1e6 -> 1000000)."""
    args = split_argv(argv)
    if args is None or args.help or args.hydra_help or args.info or args.shell_completion:
        return list(argv)
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            loader = GlobalHydra.instance().config_loader()
            overrides = parse(args.overrides, loader)
            plugin_sweeper = any(o.key_or_group == "hydra/sweeper" and o.value() != "basic" for o in overrides)
            if any(o.is_interval_sweep() for o in overrides) and not plugin_sweeper:
                bad = next(o for o in overrides if o.is_interval_sweep())
                raise ConfigError(f"{bad.input_line}: interval() is sampled by a sweeper plugin, not by Hydra's "
                                  "basic sweeper (e.g. -m hydra/sweeper=optuna, see docs/sweeps.md)")
            swept = [o for o in overrides if o.is_sweep_override() and not o.is_hydra_override()]
            if swept and not args.multirun:
                raise ConfigError(f"{swept[0].input_line} is a sweep: add -m (--multirun) to run one job per value")
            size = 1
            for o in swept:
                size *= len(_value_strings(o, loader))
            points = sweep_points(overrides, loader, all_points=not plugin_sweeper and size <= MAX_POINTS)
        for point in points:
            try:
                check(compose_checked(config_name, point, _schema(config_name)))
            except ConfigError as exc:
                where = [ln for ln, o in zip(point, (o for o in overrides if not o.is_hydra_override()))
                         if o.is_sweep_override()]
                raise ConfigError(f"{exc} (sweep point {' '.join(where)})" if where and len(points) > 1
                                  else str(exc)) from None
        whole = dict(zip(args.overrides, whole_numbers(args.overrides, _schema(config_name))))
    except ConfigError as exc:
        refuse(str(exc))
    return [whole.get(a, a) for a in argv]

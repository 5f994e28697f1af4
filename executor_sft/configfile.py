"""The one way to read a YAML config: file checks, `--set` overrides, one-line errors.

Every recipe config (collect, evaluate, sweep, build the evaluation set) goes through
`load_config(cls, path, overrides, sets)`, so a typo gets the same one-line error everywhere:
`<file>[:<line>]: ... field 'a.b': <problem>`.

String values may name environment variables, `${NAME}` or `${NAME:-default}` (the shell's
spelling), so one config finds data that lives in different places on different machines:
`${EXECUTOR_SFT_SHARED:-../shared}/minibench/corpus.jsonl`. Every YAML config, the TRL
recipes' included, is read by `read_yaml` and so expanded the same way.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import logging
import os
import re
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

import yaml
from pydantic import BaseModel, ValidationError

from executor_sft.errors import ConfigError, first_local_process

ConfigT = TypeVar("ConfigT", bound=BaseModel)

CHECKOUT = Path(__file__).resolve().parents[1]
"""The folder holding the package (the repository root in a checkout)."""
FROM_FILE = "from_file"
"""Set in the validation context of a config `load_config` reads: a file cannot hand objects over
as code can (a collection config read from one must name its models)."""


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping that names a key twice: YAML would keep the last silently."""


class UniqueKeyLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses a key repeated in one mapping, at any depth.

    Keys merged in with `<<: *anchor` may be overridden, as YAML intends; two written keys may not.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class reports it
                break
            seen[key] = line
            if first is not None:
                raise DuplicateKeyError(
                    problem=f"duplicate key '{key}' (first at line {first}): keep one",
                    problem_mark=key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str) -> Any:
    """Parse YAML text as `yaml.safe_load` does, refusing duplicate keys (`DuplicateKeyError`)."""
    return yaml.load(text, Loader=UniqueKeyLoader)


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"{path}: config file not found; check the path (recipes run from the repository root)"
        )
    try:
        data = parse_yaml(path.read_text(encoding="utf-8"))
    except DuplicateKeyError as exc:
        raise ConfigError(f"{path}:{exc.problem_mark.line + 1}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{line}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return expand_env(data, path)


_ENV_REFERENCE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


def expand_env(value: Any, path: str | Path, where: str = "") -> Any:
    """`${NAME}` / `${NAME:-default}` in every string value, replaced from the environment.

    An empty variable counts as unset, as in the shell's `:-`. A variable that is unset and has
    no default is an error naming the file and field, not an empty path.
    """
    if isinstance(value, dict):
        return {k: expand_env(v, path, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, path, f"{where}.{i}") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(m: re.Match[str]) -> str:
        found = os.environ.get(m["name"])
        if found:
            return found
        if m["default"] is not None:
            return m["default"]
        raise ConfigError(
            f"{path}: field '{where}': ${{{m['name']}}} is not set; export it, "
            f"or give a default as ${{{m['name']}:-DEFAULT}}"
        )

    return _ENV_REFERENCE.sub(substitute, value)


def validation_message(path: str | Path, exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    """One line naming the file and each problem's dotted field; with `model`, an unknown field
    also gets the nearest declared one ("did you mean ...?")."""
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "<root>"
        message = f"field '{where}': {err['msg']}"
        if err["type"] == "extra_forbidden" and model is not None:
            names = _field_names_at(model, err["loc"][:-1])
            close = difflib.get_close_matches(str(err["loc"][-1]), names, n=1)
            if close:
                message += f"; did you mean '{close[0]}'?"
        problems.append(message)
    return f"{path}: invalid config: " + "; ".join(problems)


def _field_names_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """The field names of the sub-model that `loc` (a validation error's location) leads to."""
    node: Any = model
    for part in loc:
        if isinstance(part, int) or not (isinstance(node, type) and issubclass(node, BaseModel)):
            continue
        field = node.model_fields.get(str(part))
        if field is None:
            return []
        node = _model_in(field.annotation)
    return sorted(node.model_fields) if isinstance(node, type) and issubclass(node, BaseModel) else []


def _model_in(annotation: Any) -> Any:
    """The BaseModel an annotation holds (itself, or inside Optional/list/dict), else the annotation."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in reversed(typing.get_args(annotation)):
        found = _model_in(arg)
        if isinstance(found, type) and issubclass(found, BaseModel):
            return found
    return annotation


def apply_overrides(data: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """Apply `dotted.key=value` overrides (values parsed as YAML) to a config mapping.

    A number indexes a list (`questions.0.limit=2`). A string met on the way (a sweep's
    `base: file.yaml`) is read as the YAML file it names, so `base.samples=1` reaches into it.
    """
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. samples=4")
        parts = key.split(".")
        node: Any = data
        for depth, part in enumerate(parts, start=1):
            if not isinstance(node, (dict, list)):
                raise ConfigError(f"--set {key}: cannot descend into '{part}' (not a mapping or list)")
            if isinstance(node, list) and not (part.isdigit() and int(part) < len(node)):
                raise ConfigError(f"--set {key}: '{part}' is not an index of a {len(node)}-item list")
            index: Any = int(part) if isinstance(node, list) else part
            if depth == len(parts):
                node[index] = _parse_set_value(key, raw)
                break
            child = node[index] if isinstance(node, list) else node.get(part)
            if isinstance(child, str):
                child = _included_yaml(key, parts[:depth], child)
            elif child is None:
                child = {}
            node[index] = child
            node = child
    return data


def _included_yaml(key: str, parts: list[str], value: str) -> dict[str, Any]:
    """The YAML file a string field names (a sweep's `base`), for `--set` to reach into."""
    field = ".".join(parts)
    if Path(value).suffix.lower() not in (".yaml", ".yml"):
        raise ConfigError(
            f"--set {key}: '{field}' is a value ({value!r}), not a mapping or a YAML file; "
            f"set it whole: --set {field}=VALUE"
        )
    if not Path(value).is_file():
        raise ConfigError(f"--set {key}: '{field}' names {value}, which is not a file; check the path")
    return read_yaml(value)


def _parse_set_value(key: str, raw: str) -> Any:
    try:
        return parse_yaml(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {key}: invalid YAML value ({getattr(exc, 'problem', exc)})") from None


def add_option(parser: argparse.ArgumentParser, name: str, **kwargs: Any) -> argparse.Action:
    """Add `--name` spelled with underscores, as TRL and HfArgumentParser spell every flag."""
    return parser.add_argument(f"--{name}", **kwargs)


def relative_paths(text: str) -> str:
    """`text` with absolute paths inside the working directory or the checkout written relative,
    so help and records show `data/sft.jsonl`, not one machine's folders."""
    for root in dict.fromkeys((str(Path.cwd()), str(CHECKOUT))):
        if root != os.sep:
            text = text.replace(root + os.sep, "")
    return text


class RecipeArgumentParser(argparse.ArgumentParser):
    """argparse with the project's one-line errors: `error: command line: ...`, exit 2, an
    unknown option named with the nearest known one, and no abbreviations (`--output_d` is not
    silently `--output_dir`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> typing.NoReturn:
        unknown = message.removeprefix("unrecognized arguments: ")
        if unknown != message:
            flag = next((a for a in unknown.split() if a.startswith("-")), unknown.split()[0])
            message = (
                unknown_flag(flag.split("=", 1)[0], self)
                if flag.startswith("-")
                else (f"unexpected argument {flag!r}; see --help")
            )
        print(f"error: command line: {message}".replace("\n", " "), file=sys.stderr)
        raise SystemExit(2)


class RecipeHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The recipe's docstring as written (examples keep their lines), paths shown relative."""

    def _expand_help(self, action: argparse.Action) -> str:
        return relative_paths(super()._expand_help(action))


class RecipeDefaultsHelpFormatter(RecipeHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """`RecipeHelpFormatter` that also shows each option's default (as HfArgumentParser does)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.required or action.default is None:
            return action.help or ""
        return super()._get_help_string(action)


def config_recipe_parser(
    description: str | None, config_help: str, preflight: bool = False
) -> argparse.ArgumentParser:
    """The command line every YAML-config recipe shares: --config, --output_dir, --set, --no_progress,
    -v, and --preflight_only for a recipe that checks its endpoints, keys and indexes first."""
    parser = RecipeArgumentParser(description=description, formatter_class=RecipeHelpFormatter)
    parser.add_argument("--config", required=True, help=config_help)
    add_option(parser, "output_dir", help="override output_dir")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field (YAML value)"
    )
    add_option(parser, "no_progress", action="store_true")
    if preflight:
        add_option(
            parser,
            "preflight_only",
            action="store_true",
            help="check the config's endpoints, API keys, weights and indexes, print what is missing, and stop",
        )
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser


def parse_config_recipe_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse, and set the log level `-v` asks for."""
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    return args


def run_config_recipe(
    doc: str | None,
    config_help: str,
    load: Callable[..., Any],
    run: Callable[[Any, bool], str],
    argv: list[str] | None,
    preflight: Callable[[Any, str], str] | None = None,
) -> int:
    """The whole `main` of a YAML-config recipe that runs one config and prints what it made.

    Parses the shared command line, loads the config with `load(path, sets=...)`, applies
    --output_dir, runs `preflight(config, path)` (`executor_sft.preflight.check_config`: raises
    listing what is missing, else returns its line), prints `run(config, progress)`. Errors are
    the recipe's `run_recipe`'s to report.
    """
    parser = config_recipe_parser(doc, config_help, preflight=preflight is not None)
    args = parse_config_recipe_args(parser, argv)
    config = load(args.config, sets=args.set)
    if args.output_dir:
        config.output_dir = args.output_dir
    if preflight is not None:
        passed = preflight(config, str(args.config))
        if args.preflight_only:
            print(passed)
            return 0
    print(run(config, not args.no_progress))
    return 0


def load_config(
    cls: type[ConfigT],
    path: str | Path,
    overrides: dict[str, Any] | None = None,
    sets: list[str] | None = None,
) -> ConfigT:
    """Read `path`, apply `--set` items then top-level overrides (None = not given), validate as `cls`.

    Raises `ConfigError` whose message is the one line a recipe prints.
    """
    data = apply_overrides(read_yaml(path), sets)
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        config = cls.model_validate(data, context={FROM_FILE: True})
    except ValidationError as exc:
        raise ConfigError(validation_message(path, exc, cls)) from None
    where = _coerced_bool(data, config)
    if where is not None:
        raise ConfigError(f"{path}: invalid config: field '{where}': true/false is not a number; write one")
    return config


def _coerced_bool(raw: Any, value: Any, where: str = "") -> str | None:
    """The dotted field where a written true/false became a number (pydantic reads `true` as 1
    for an int field), or None."""
    if isinstance(raw, bool):
        return where if not isinstance(value, bool) and isinstance(value, int | float) else None
    if isinstance(raw, dict):
        for key, item in raw.items():
            if isinstance(value, BaseModel):
                name = next((n for n, f in type(value).model_fields.items() if key in (n, f.alias)), None)
                if name is None:
                    continue
                sub = getattr(value, name)
            elif isinstance(value, dict) and key in value:
                sub = value[key]
            else:
                continue
            found = _coerced_bool(item, sub, f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
    if isinstance(raw, list) and isinstance(value, list | tuple) and len(raw) == len(value):
        for i, (item, sub) in enumerate(zip(raw, value, strict=True)):
            found = _coerced_bool(item, sub, f"{where}.{i}")
            if found is not None:
                return found
    return None


def _key_lines(path: Path) -> dict[str, int]:
    """1-based line of each top-level key of a YAML mapping file."""
    node = yaml.compose(path.read_text(encoding="utf-8"))
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {k.value: k.start_mark.line + 1 for k, _ in node.value if isinstance(k, yaml.ScalarNode)}


def _library_title(dtype: type) -> str | None:
    """The help heading of a dataclass that TRL or transformers declares (None: the project's own)."""
    library = dtype.__module__.split(".")[0]
    names = {"trl": "TRL", "transformers": "transformers"}
    return f"{names[library]} {dtype.__name__} options" if library in names else None


def trl_recipe_parser(types: tuple[type, ...], description: str | None, config_help: str):
    """A TrlParser whose help starts with the recipe's docstring, lists `--config`, and shows the
    project's options first, then each TRL dataclass under its own heading, with a short usage line."""
    from trl import TrlParser

    class RecipeParser(TrlParser):
        def _add_dataclass_arguments(self, dtype: type) -> None:
            if "--config" not in self._option_string_actions:
                # TrlParser reads --config itself before parsing; listed here so --help shows it.
                self.add_argument("--config", default=argparse.SUPPRESS, metavar="FILE", help=config_help)
            title = _library_title(dtype)
            if title is None:
                return super()._add_dataclass_arguments(dtype)
            group = self.add_argument_group(title)
            hints = get_type_hints(dtype)
            for f in dataclasses.fields(dtype):
                if f.init:
                    f.type = hints[f.name]
                    self._parse_dataclass_field(group, f)

    # No abbreviations: `--max_step 2` is not silently `--max_steps 2` (unknown_flag says what is meant).
    parser = RecipeParser(
        types, description=description, formatter_class=RecipeDefaultsHelpFormatter, allow_abbrev=False
    )
    if any(_library_title(t) for t in types):
        usage = parser._get_formatter()
        usage.add_usage(None, parser._optionals._group_actions, [], prefix="usage: ")
        text = usage.format_help().strip().removeprefix("usage: ")
        parser.usage = text.replace("%", "%%") + " [TRL options]"
    return parser


def unknown_flag(flag: str, parser: argparse.ArgumentParser) -> str:
    """'unknown option --x: did you mean --y?' against the parser's own options."""
    close = difflib.get_close_matches(flag, sorted(parser._option_string_actions), n=1)
    hint = f"did you mean '{close[0]}'?" if close else "see --help"
    return f"unknown option '{flag}': {hint}"


def parse_trl_args(
    types: tuple[type, ...],
    argv: list[str] | None,
    default_config: Path | None = None,
    description: str | None = None,
):
    """TrlParser over dataclass configs (`--config file.yaml` and flags) with one-line errors.

    A missing or malformed `--config` file, a key no dataclass declares, and a value a
    dataclass refuses end like argparse's own errors: one line, `error: <file>[:<line>]: ...`,
    exit status 2, before anything loads. `default_config` is used when no `--config` is given.
    `description` (the recipe's docstring) opens `--help`.
    """
    args: list[str] = []
    for item in argv if argv is not None else sys.argv[1:]:
        args.extend(item.split("=", 1) if item.startswith("--config=") else [item])
    if "--config" not in args and default_config is not None:
        args = ["--config", str(default_config), *args]
    config_help = "YAML file setting any option below by name; flags given after it override it"
    if default_config is not None:
        config_help += f" (default: {relative_paths(str(default_config))})"
    parser = trl_recipe_parser(types, description, config_help)
    config = args[args.index("--config") + 1] if "--config" in args[:-1] else None

    def fail(message: str):
        if first_local_process():  # every process of a launch meets it: one line says it
            print(f"error: {message}".replace("\n", " "), file=sys.stderr)
        raise SystemExit(2)

    for flag in (a.split("=", 1)[0] for a in args if a.startswith("--")):
        if flag not in parser._option_string_actions:
            fail(f"command line: {unknown_flag(flag, parser)}")
    if config is not None:
        try:
            data = read_yaml(config)
        except ConfigError as exc:
            fail(str(exc))
        known = ({a.dest for a in parser._actions} - {"config"}) | {"env"}
        lines = _key_lines(Path(config))
        for key in data:
            if key not in known:
                close = difflib.get_close_matches(str(key), sorted(known), n=1)
                hint = f"did you mean '{close[0]}'?" if close else "remove it or check the spelling"
                where = f"{config}:{lines[key]}" if key in lines else str(config)
                fail(f"{where}: unknown key '{key}': {hint}")
    try:
        if config is None:
            return parser.parse_args_into_dataclasses(args=args)
        return _parse_with_config(parser, args, data)
    except (ValueError, TypeError) as exc:  # a value a dataclass's own checks refuse
        fail(f"{_blamed(str(exc), args, config)}: {exc}")


def _blamed(message: str, args: list[str], config: str | None) -> str:
    """Where a refused value came from: the command line when the message names one of its
    flags (it overrides the config), else the config file (or the command line without one)."""
    flags = {a[2:].split("=", 1)[0] for a in args if a.startswith("--") and a != "--config"}
    if config is None or any(re.search(rf"\b{re.escape(flag)}\b", message) for flag in flags):
        return "command line"
    return config


def _parse_with_config(parser, args: list[str], data: dict[str, Any]):
    """TrlParser's `--config` handling, from the mapping `read_yaml` expanded rather than the raw file."""
    at = args.index("--config")
    args = args[:at] + args[at + 2 :]
    env = data.pop("env", None) or {}
    if not isinstance(env, dict):
        raise ValueError("`env` must be a mapping of environment variables")
    os.environ.update({str(k): str(v) for k, v in env.items()})
    parser.set_defaults_with_config(**data)
    return parser.parse_args_into_dataclasses(args=args)

"""The one way to read a YAML config: file checks, `--set` overrides, one-line errors.

Every recipe config (collect, evaluate, sweep, build the evaluation set) goes through
`load_config(cls, path, overrides, sets)`, so a typo gets the same one-line error everywhere:
`<file>[:<line>]: ... field 'a.b': <problem>`.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

ConfigT = TypeVar("ConfigT", bound=BaseModel)


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: config file not found; check the path (recipes run from the repository root)"
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ValueError(f"{path}{line}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return data


def validation_message(path: str | Path, exc: ValidationError) -> str:
    """One line naming the file and each problem's dotted field."""
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "<root>"
        problems.append(f"field '{where}': {err['msg']}")
    return f"{path}: invalid config: " + "; ".join(problems)


def apply_overrides(data: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """Apply `dotted.key=value` overrides (values parsed as YAML) to a config mapping.

    A number indexes a list (`questions.0.limit=2`). A string met on the way (a sweep's
    `base: file.yaml`) is read as the YAML file it names, so `base.samples=1` reaches into it.
    """
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE, e.g. samples=4")
        parts = key.split(".")
        node: Any = data
        for depth, part in enumerate(parts, start=1):
            if not isinstance(node, (dict, list)):
                raise ValueError(f"--set {key}: cannot descend into '{part}' (not a mapping or list)")
            if isinstance(node, list) and not (part.isdigit() and int(part) < len(node)):
                raise ValueError(f"--set {key}: '{part}' is not an index of a {len(node)}-item list")
            index: Any = int(part) if isinstance(node, list) else part
            if depth == len(parts):
                node[index] = yaml.safe_load(raw)
                break
            child = node[index] if isinstance(node, list) else node.get(part)
            if isinstance(child, str):
                child = read_yaml(child)
            elif child is None:
                child = {}
            node[index] = child
            node = child
    return data


def add_option(parser: argparse.ArgumentParser, name: str, **kwargs: Any) -> argparse.Action:
    """Add `--name` spelled with underscores, as TRL and HfArgumentParser spell every flag.

    The dashed spelling (`--output-dir` for `output_dir`) is added as a hidden alias, so commands
    written before the flags were renamed keep working; `--help` shows the underscore form.
    """
    action = parser.add_argument(f"--{name}", **kwargs)
    dashed = name.replace("_", "-")
    if dashed != name:
        alias = {k: v for k, v in kwargs.items() if k in ("action", "type", "nargs", "const", "choices")}
        parser.add_argument(f"--{dashed}", dest=action.dest, help=argparse.SUPPRESS, **alias)
    return action


def config_recipe_parser(description: str | None, config_help: str) -> argparse.ArgumentParser:
    """The command line every YAML-config recipe shares: --config, --output_dir, --set, --no_progress, -v."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", required=True, help=config_help)
    add_option(parser, "output_dir", help="override output_dir")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field (YAML value)"
    )
    add_option(parser, "no_progress", action="store_true")
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser


def parse_config_recipe_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse, and set the log level `-v` asks for."""
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    return args


def load_config(
    cls: type[ConfigT],
    path: str | Path,
    overrides: dict[str, Any] | None = None,
    sets: list[str] | None = None,
) -> ConfigT:
    """Read `path`, apply `--set` items then top-level overrides (None = not given), validate as `cls`.

    Raises `ValueError` / `FileNotFoundError` whose message is the one line a recipe prints.
    """
    data = apply_overrides(read_yaml(path), sets)
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise ValueError(validation_message(path, exc)) from None

"""MkDocs hooks: the reference pages' generated parts, built from the code at build time.

A page asks for a part with a marker on a line of its own; the hook replaces it:

- ``<!-- gen:api -->``: one mkdocstrings entry per name in ``ors_gym.__all__``;
- ``<!-- gen:modules -->``: the same for the public names of ``SUBMODULES``;
- ``<!-- gen:options -->``: every field of ``ors_gym.EnvSettings``, with its type,
  default and the docstring's words about it, then every ``HttpOptions`` field
  with its type, default and its own words (``metadata["doc"]``);
- ``<!-- gen:errors -->``: the error classes of ``ors_gym.errors`` as a tree;
- ``<!-- gen:cli -->``: the ``--help`` of ``ors-gym`` and of each subcommand;
- ``<!-- gen:bench -->``: the summary table of the last ``python -m benchmarks`` run.

Generating these keeps them from drifting from the code; a field or name with no
words in the docstrings is logged as a warning, which ``mkdocs build --strict`` turns
into a failed build.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
from typing import Any

log = logging.getLogger("mkdocs.plugins.ors_gym_docs")

_MARKER = re.compile(r"^<!-- gen:(\w+) -->$", re.MULTILINE)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace each ``<!-- gen:NAME -->`` marker with the part it names."""
    return _MARKER.sub(lambda m: _GENERATORS[m.group(1)](), markdown)


def api_markdown() -> str:
    """An mkdocstrings entry for each public name of ``ors_gym``, in ``__all__``'s order."""
    import ors_gym

    out = []
    for name in ors_gym.__all__:
        if name == "__version__":
            out.append(f"### `__version__`\n\nThe installed version: `{ors_gym.__version__}`.\n")
            continue
        out.append(f"::: ors_gym.{name}\n")
    return "\n".join(out)


#: The submodules whose public names the reference lists, besides the top level.
SUBMODULES = (
    "ors_gym.errors",
    "ors_gym.actions",
    "ors_gym.observations",
    "ors_gym.catalog",
    "ors_gym.backends.base",
    "ors_gym.backends.http",
    "ors_gym.formats",
    "ors_gym.vector",
    "ors_gym.wrappers",
    "ors_gym.trajectories",
    "ors_gym.scripted",
    "ors_gym.scoring",
    "ors_gym.eval",
    "ors_gym.viewer",
    "ors_gym.serving",
    "ors_gym.train",
    "ors_gym.ray",
    "ors_gym.trl",
    "ors_gym.skyrl",
    "ors_gym.tokens",
    "ors_gym.gateway",
    "ors_gym.mcp",
    "ors_gym.harness",
    "ors_gym.platform",
)


def modules_markdown() -> str:
    """A section per module of ``SUBMODULES``: an mkdocstrings entry per name of its ``__all__``.

    A module this checkout does not have yet is left out.
    """
    import importlib
    import importlib.util

    out = []
    for name in SUBMODULES:
        if importlib.util.find_spec(name) is None:
            continue
        module = importlib.import_module(name)
        summary = (module.__doc__ or "").strip().split("\n\n")[0]
        summary = re.sub(r"``([^`]+)``", r"`\1`", summary)
        out.append(f"## `{name}`\n\n{summary}\n")
        out += [f"::: {name}.{member}\n" for member in module.__all__]
    return "\n".join(out)


def _settings_fields() -> list[tuple[str, str, str]]:
    """``(name, type, default)`` of each ``EnvSettings`` field (dataclass or pydantic)."""
    from ors_gym import EnvSettings

    rows = []
    if dataclasses.is_dataclass(EnvSettings):
        for f in dataclasses.fields(EnvSettings):
            if f.default is not dataclasses.MISSING:
                default = repr(f.default)
            elif f.default_factory is not dataclasses.MISSING:
                default = repr(f.default_factory())
            else:
                default = "required"
            rows.append((f.name, str(f.type), default))
    else:  # a pydantic model
        for name, info in EnvSettings.model_fields.items():
            default = info.get_default(call_default_factory=True)
            rows.append((name, str(info.annotation), repr(default)))
    return rows


def _docstring_items(doc: str) -> list[str]:
    """The bullet items of a docstring, each joined into one line."""
    items: list[str] = []
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped.startswith("- "):
            items.append(stripped[2:])
        elif items and stripped and line.startswith("  "):
            items[-1] += " " + stripped
        elif not stripped and items:
            items.append("")
    return [i for i in items if i]


def options_markdown() -> str:
    """One section per env option: the ``EnvSettings`` fields (but ``http``), then the
    ``HttpOptions`` fields, each option once."""
    from ors_gym import EnvSettings
    from ors_gym.backends.http import HttpOptions

    items = _docstring_items(EnvSettings.__doc__ or "")
    out = []
    for name, type_, default in _settings_fields():
        if name == "http":
            continue
        about = next((i for i in items if f"``{name}``" in i), None)
        if about is None:
            log.warning("EnvSettings.%s is not described in EnvSettings' docstring", name)
            about = ""
        about = re.sub(r"``([^`]+)``", r"`\1`", about).rstrip(";.") + "."
        out.append(
            f"### `{name}`\n\n"
            f"Type `{type_}`, default `{default}`.\n\n"
            f"From the docstring: {about}\n"
        )
    out.append("## HTTP options\n\nThe fields of `ors_gym.backends.http.HttpOptions`: env "
               "options by their own names, and keyword arguments of `HttpBackend` and "
               "`AsyncHttpBackend` (or one `options=HttpOptions(...)`).\n")
    for f in dataclasses.fields(HttpOptions):
        default = (repr(f.default) if f.default is not dataclasses.MISSING
                   else repr(f.default_factory()))  # type: ignore[misc]
        about = f.metadata.get("doc")
        if not about:
            log.warning("HttpOptions.%s has no metadata['doc']", f.name)
        out.append(f"### `{f.name}`\n\nType `{f.type}`, default `{default}`.\n\n{about}\n")
    return "\n".join(out)


def errors_markdown() -> str:
    """The error classes of ``ors_gym.errors``, as a tree from ``OrsError``."""
    from ors_gym import errors

    classes = [
        getattr(errors, n) for n in errors.__all__
        if isinstance(getattr(errors, n), type) and issubclass(getattr(errors, n), errors.OrsError)
    ]

    def lines(cls: type, depth: int) -> list[str]:
        first = (cls.__doc__ or "").strip().splitlines()[0]
        first = re.sub(r"``([^`]+)``", r"`\1`", first)
        extra = [b.__name__ for b in cls.__bases__
                 if b is not Exception and not issubclass(b, errors.OrsError)]
        also = f" (also a `{'`, `'.join(extra)}`)" if extra else ""
        link = f"[`{cls.__name__}`][ors_gym.errors.{cls.__name__}]"
        out = [f"{'    ' * depth}- {link}{also}: {first}"]
        for child in classes:
            if cls in child.__bases__:
                out += lines(child, depth + 1)
        return out

    return "\n".join(lines(errors.OrsError, 0)) + "\n"


def cli_markdown() -> str:
    """The ``--help`` text of ``ors-gym`` and each subcommand, from the parser itself."""
    from ors_gym.cli import SUBCOMMANDS, build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal's width
    out = ["## `ors-gym`\n", "```text", build_parser().format_help().rstrip(), "```\n"]
    # The same subcommands on a bare parser, whose add_subparsers() hands back their table.
    subparsers = argparse.ArgumentParser(prog="ors-gym").add_subparsers()
    for add in SUBCOMMANDS:
        add(subparsers)
    for name, sub in subparsers.choices.items():
        out += [f"## `ors-gym {name}`\n", "```text", sub.format_help().rstrip(), "```\n"]
    return "\n".join(out)


def bench_markdown() -> str:
    """The summary table of ``benchmarks/results/latest.json``, and which run made it."""
    import datetime
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "latest.json"
    run = json.loads(path.read_text(encoding="utf-8"))
    started = datetime.datetime.fromtimestamp(run["started_unix"], datetime.UTC)
    out = [
        f"From `{run['command']}` ({run['mode']} mode), started {started:%Y-%m-%d %H:%M} UTC, "
        f"{run['seconds']} s, Python {run['python']} on {run['machine']}: "
        "`benchmarks/results/latest.json`.\n",
        "| benchmark | case | ors_gym | baseline | ratio | unit | baseline case |",
        "|---|---|--:|--:|--:|---|---|",
    ]
    for row in run["summary"]:
        out.append(
            f"| {row['benchmark']} | {row['case']} | {row['ors_gym']} | {row['baseline']} "
            f"| {row['ratio']:.3f} | {row['unit']} | {row['baseline_name']} |"
        )
    return "\n".join(out) + "\n"


_GENERATORS = {
    "modules": modules_markdown,
    "bench": bench_markdown,
    "api": api_markdown,
    "options": options_markdown,
    "errors": errors_markdown,
    "cli": cli_markdown,
}

"""What a `sinkscope` subcommand's options look like to a user: flags, default, type, choices and rendered help.

Used to dump `data/cli_options.json` from the code before the shared parent parsers, and by
`test_cli_options.py` to compare the parsers of today against it.
"""

from __future__ import annotations

import argparse
from typing import Any


def _name(value: Any) -> Any:
    return None if value is None else getattr(value, "__name__", repr(value))


def option_records(parser: argparse.ArgumentParser) -> dict[str, dict[str, dict[str, Any]]]:
    """{subcommand: {"--flag[, --alias]": record}} of every option but -h, as `--help` shows and parses it."""
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    records: dict[str, dict[str, dict[str, Any]]] = {}
    for command, sub in subparsers.choices.items():
        sub.format_help()  # as --help: options a command adds on first use are there
        formatter = sub._get_formatter()
        records[command] = {
            ", ".join(action.option_strings) or action.dest: {
                "dest": action.dest,
                "default": repr(sub.get_default(action.dest)),
                "type": _name(action.type),
                "choices": None if action.choices is None else [repr(c) for c in action.choices],
                "required": action.required,
                "nargs": repr(action.nargs),
                "const": repr(action.const),
                "metavar": repr(action.metavar),
                "action": type(action).__name__,
                "help": None if action.help is None else formatter._expand_help(action),
            }
            for action in sub._actions
            if not isinstance(action, argparse._HelpAction)
        }
    return records

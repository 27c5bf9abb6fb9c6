"""`sinkscope` command line: a thin layer over the Python API, one module per subcommand.

Each subcommand module defines `add_parser(subparsers)` and keeps heavy imports (torch, transformers)
inside its run function, so `sinkscope --help` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from sinkscope.errors import SinkscopeError

# Module names under sinkscope.cli, in the order `--help` lists them.
SUBCOMMANDS = ("models", "analyze", "sweep", "report", "export", "view", "ablate", "cost", "train_bb", "reproduce")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sinkscope",
        description="Measure attention sinks, diagonal patterns, switches and oversmoothing in transformers.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"sinkscope.cli.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    if not argv:  # bare `sinkscope`: the help with the list of commands, not an error
        parser.print_help()
        return 0
    args = parser.parse_args(argv)
    args.argv = argv  # so a command can print the line that resumes it
    try:
        return int(args.func(args) or 0)
    except SinkscopeError as err:
        print(f"sinkscope {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        print(f"sinkscope {args.command}: interrupted" + (f"; {err}" if str(err) else ""), file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

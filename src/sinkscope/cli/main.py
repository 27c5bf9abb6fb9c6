"""`sinkscope` command line: a thin layer over the Python API, one module per subcommand.

Each subcommand module defines `add_parser(subparsers)` and keeps heavy imports (torch, transformers)
inside its run function, so `sinkscope --help` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading

from sinkscope.cli.options import apply_threads, check_finite_options, too_long_name
from sinkscope.errors import SinkscopeError
from sinkscope.threads import choose_threads, limit_blas_threads, pin

# Module names under sinkscope.cli, in the order `--help` lists them.
SUBCOMMANDS = ("models", "analyze", "sweep", "report", "export", "view", "ablate", "cost", "train_bb", "reproduce",
               "evict", "dense", "prevalence",
               "switch_assumptions", "attribute", "cost_regimes", "kv_plan", "trajectory")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sinkscope",
        description="Measure attention sinks, diagonal patterns, switches and oversmoothing in transformers.",
    )
    parser.add_argument("--version", action="version", version=f"sinkscope {_version()}")
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
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the subcommand's usage, not the top level's: that is where the right flag is listed
        _subcommand_parser(parser, args.command).error(_unrecognized(parser, args.command, unknown))
    args.argv = argv  # so a command can print the line that resumes it
    terminated = []
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: _interrupt(terminated))
    try:
        check_finite_options(_subcommand_parser(parser, args.command), args)
        if hasattr(args, "threads"):  # --threads N or auto, before the command starts torch's thread pool
            args.thread_choice = choose_threads(args.threads)
            limit_blas_threads(args.thread_choice.threads)  # numpy is not imported yet: its BLAS reads this
            apply_threads(args.thread_choice.threads)
            pin(args.thread_choice)  # the API calls the command makes keep this choice
        return int(args.func(args) or 0)
    except SinkscopeError as err:
        print(f"sinkscope {args.command}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a path no file system can name is the user's input, not a bug: one line, not a traceback
        if (line := too_long_name(err, args)) is None:
            raise
        print(f"sinkscope {args.command}: error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        how = " by SIGTERM" if terminated else ""
        print(f"sinkscope {args.command}: interrupted{how}" + (f"; {err}" if str(err) else ""), file=sys.stderr)
        return 128 + (signal.SIGTERM if terminated else signal.SIGINT)
    finally:
        pin(None)  # main() called again in this process (tests, notebooks) chooses afresh
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)


def _version() -> str:
    """The installed distribution's version, without importing the package's heavy modules."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sinkscope")
    except PackageNotFoundError:
        return "(not installed: run from a source tree)"


def _subcommand_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return subparsers.choices[command]


def _unrecognized(parser: argparse.ArgumentParser, command: str, unknown: list[str]) -> str:
    """'unrecognized arguments: --diag 0.3 (did you mean --diag-threshold?)', the suggestion by closest spelling."""
    import difflib

    flags = [f for a in _subcommand_parser(parser, command)._actions for f in a.option_strings if f.startswith("--")]
    hints = [match[0] for arg in unknown if arg.startswith("-")
             for match in [difflib.get_close_matches(arg.split("=")[0], flags, n=1, cutoff=0.6)] if match]  # fmt: skip
    hint = f" (did you mean {', '.join(dict.fromkeys(hints))}?)" if hints else ""
    return f"unrecognized arguments: {' '.join(unknown)}{hint}"


def _interrupt(terminated: list) -> None:
    """SIGTERM (a scheduler, `kill`, torchrun stopping its workers) is handled like Ctrl-C: the same clean-up,
    message and resume command. A second SIGTERM during that clean-up ends the process at once."""
    terminated.append(True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())

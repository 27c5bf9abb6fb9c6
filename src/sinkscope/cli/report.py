"""`sinkscope report`: (re)build report.html from one or more run directories, compared side by side."""

from __future__ import annotations

import argparse

from sinkscope.cli.options import output_options

EXAMPLE = """examples:
  sinkscope report runs/x                      # rebuilds runs/x/report.html
  sinkscope report runs/x runs/y --out cmp.html  # compares two runs on one page"""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "report",
        help="(re)build report.html from run directories",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[
            output_options("HTML file (default: report.html in the first run; comparison.html there for several)",
                           required=False),
        ],
    )
    parser.add_argument("runs", nargs="+", help="run directories written by `sinkscope analyze`")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sinkscope.errors import SinkscopeError
    from sinkscope.pipelines.run import Run
    from sinkscope.report.html import write_report
    from sinkscope.staging import check_file_target

    first = Path(args.runs[0])
    default = "report.html" if len(args.runs) == 1 else "comparison.html"  # a comparison never replaces A's own page
    out = Path(args.out) if args.out else first / default
    check_file_target(out)  # before the figures are drawn
    runs = [Run.load(path) for path in args.runs]
    for run, path in zip(runs, args.runs):
        run.meta["directory"] = path.rstrip("/")  # how the report labels the run (not saved)
    try:
        write_report(runs, out, figures_dir=first / "figures" if len(runs) == 1 else None)
    except (KeyError, ValueError, TypeError, IndexError) as err:  # a damage `Run.load` does not know of yet
        raise SinkscopeError(
            f"cannot draw the report of {', '.join(args.runs)}: a run is damaged or was written by another sinkscope "
            f"version ({type(err).__name__}: {str(err)[:160]}); rerun `sinkscope analyze` on it"
        ) from None
    print(f"wrote {out}")
    return 0

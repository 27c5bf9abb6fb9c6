"""`sinkscope export`: a run's (or sweep's) tables as CSV or JSON files."""

from __future__ import annotations

import argparse

from sinkscope.cli.options import output_options

EXAMPLE = """examples:
  sinkscope export runs/x --format csv               # runs/x/csv/heads.csv, layers.csv, tokens.csv, ...
  sinkscope export runs/x --format json --out /tmp/x # one JSON array of row objects per table
  sinkscope export sweeps/gu --format json           # a sweep directory's sweep.parquet too"""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "export",
        help="write every table of a run as CSV or JSON",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[
            output_options("directory for the files (default: RUN/<format>/)", required=False),
        ],
    )
    parser.add_argument("run", help="run directory written by `sinkscope analyze` (or a sweep directory)")
    parser.add_argument("--format", required=True, choices=["csv", "json"], help="file format")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sinkscope.pipelines.export import export_tables

    written = export_tables(args.run, args.format, args.out)
    noun = "table" if len(written) == 1 else "tables"
    print(f"wrote {len(written)} {noun} to {written[0].parent}: {', '.join(p.name for p in written)}")
    cells = Path(args.run) / "cells"
    if cells.is_dir():  # a sweep: its table has one row per cell; each cell is a run directory of its own
        print(f"each sweep cell's own tables: sinkscope export {cells}/NAME --format {args.format} "
              f"(cells: {', '.join(sorted(p.name for p in cells.iterdir() if p.is_dir())) or 'none'})")
    return 0

"""`sinkscope trajectory`: the default statistics of every checkpoint of a training run, on the same probe windows."""

from __future__ import annotations

import argparse
import sys

from sinkscope.cli.options import corpus_options, model_options, output_options

EXAMPLE = """examples:
  sinkscope trajectory --checkpoints runs/tiny-llama --corpus builtin:code --out traj/tiny
      (runs/tiny-llama: a Trainer output_dir with checkpoint-<step>/ folders)
  sinkscope trajectory --paths ckpt/step100,ckpt/step400,ckpt/step900 --out traj/mine
  sinkscope trajectory --model EleutherAI/pythia-70m --revisions step1000,step8000,step64000 --out traj/pythia
      (revisions are read from the local Hugging Face cache only: this tool never downloads)
  sinkscope trajectory --from-log runs/tiny-llama/sinkscope      # the folder a SinkscopeCallback wrote
  sinkscope trajectory --train-bb runs/bb --out traj/bb          # a `sinkscope train-bb` run's evaluations
  sinkscope trajectory --checkpoints runs/tiny-llama ... --out traj/tiny   # again: finished checkpoints reused
writes DIR/trajectory.parquet (one row per step × layer × head, a column per statistic), DIR/emergence.csv,
DIR/figures/*.png, DIR/report.html and DIR/cells/checkpoint-<step>/ (a run directory each); docs/trajectory.md"""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "trajectory",
        help="statistics through training: every checkpoint on the same probe windows (resumable)",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[
            model_options(model=False),
            corpus_options(corpus="probe corpus (default builtin:prose)",
                           max_windows=(32, "probe windows (default 32)")),  # fmt: skip
            output_options("trajectory folder (created, or continued if it exists; with --from-log default: that "
                           "folder)", required=False, quiet="no progress bars (the per-checkpoint lines remain)"),
        ],
    )  # fmt: skip
    series = parser.add_argument_group("the checkpoints (exactly one of)")
    series.add_argument("--checkpoints", metavar="DIR", help="a Trainer output_dir holding checkpoint-<step>/ folders")
    series.add_argument("--paths", help="comma-separated checkpoint folders, each name ending in its step")
    series.add_argument("--revisions", help="comma-separated revisions of --model in the local hub cache")
    series.add_argument("--from-log", metavar="DIR", help="draw the page of a folder a SinkscopeCallback wrote")
    series.add_argument("--train-bb", metavar="DIR", help="a `sinkscope train-bb` run: its heads at every evaluation")
    parser.add_argument("--model", help="the hub id whose --revisions are read")
    parser.add_argument("--epsilon", type=float, default=0.3, help="sink threshold ε (default 0.3)")
    parser.add_argument("--diag-threshold", type=float, default=0.5, help="diagonal-head threshold (default 0.5)")
    parser.add_argument("--seed", type=int, default=0, help="seed for random probe corpora")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import shlex

    from sinkscope.errors import SinkscopeError

    given = [flag for flag, value in (("--checkpoints", args.checkpoints), ("--paths", args.paths),
                                      ("--revisions", args.revisions), ("--from-log", args.from_log),
                                      ("--train-bb", args.train_bb)) if value]  # fmt: skip
    if len(given) != 1:
        raise SinkscopeError(f"give exactly one of --checkpoints, --paths, --revisions, --from-log, --train-bb (got "
                             f"{', '.join(given) or 'none'})")  # fmt: skip
    if args.revisions and not args.model:
        raise SinkscopeError("--revisions needs --model, the hub id they are revisions of")
    if args.out is None and not args.from_log:
        raise SinkscopeError("--out is required (the trajectory folder)")
    if args.from_log:
        return _from_log(args)
    if args.train_bb:
        return _train_bb(args)
    from sinkscope.corpus.sources import check_source
    from sinkscope.pipelines.trajectory import TrajectoryConfig, trajectory
    from sinkscope.pipelines.trajectory_series import folder_series, path_series, revision_series

    config = TrajectoryConfig(
        corpus=args.corpus, seq_len=args.seq_len, max_windows=args.max_windows, batch_size=args.batch_size,
        seed=args.seed, bos_id=args.bos_id, epsilon=args.epsilon, diagonal=args.diag_threshold, device=args.device,
        dtype=args.dtype,
    )  # fmt: skip
    check_source(config.corpus)
    if args.checkpoints:
        series = folder_series(args.checkpoints)
    elif args.paths:
        series = path_series([p.strip() for p in args.paths.split(",") if p.strip()])
    else:
        series = revision_series(args.model, [r.strip() for r in args.revisions.split(",") if r.strip()])
    echo = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    echo(f"{len(series)} checkpoints, steps {series[0].step} to {series[-1].step}")
    command = " ".join(["sinkscope", *map(shlex.quote, args.argv)]) if getattr(args, "argv", None) else ""
    try:
        table = trajectory(series, config, args.out, progress=not args.quiet, echo=echo, command=command)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f"finished checkpoints are kept in {args.out}/cells/; run the same command again to "
                                "continue") from None  # fmt: skip
    print(f"{table['step'].nunique()} steps in {args.out}/trajectory.parquet (emergence.csv, figures and "
          "report.html beside it)")  # fmt: skip
    return 0


def _from_log(args: argparse.Namespace) -> int:
    """Draw the page of a callback's folder into --out (default: that folder)."""
    from pathlib import Path

    from sinkscope.pipelines.trajectory import read_trajectory, write_trajectory

    table, meta = read_trajectory(args.from_log)
    out = Path(args.out or args.from_log)
    dated = write_trajectory(table, meta, out)
    print(f"{table['step'].nunique()} steps, {len(dated)} emerged patterns: {out}/report.html")
    return 0


def _train_bb(args: argparse.Namespace) -> int:
    """The trajectory of a train-bb run from its own evaluations (`trajectory_lab`), into --out."""
    import shlex

    from sinkscope.pipelines.trajectory_lab import lab_trajectory
    from sinkscope.synthetic.evaluation import evaluation_probe

    command = " ".join(["sinkscope", *map(shlex.quote, args.argv)]) if getattr(args, "argv", None) else ""
    table, dated = lab_trajectory(args.train_bb, args.out, evaluation_probe, args.epsilon, args.diag_threshold,
                                  command=command)
    print(f"{table['step'].nunique()} steps, {len(dated)} emerged patterns: {args.out}/report.html")
    for row in dated.itertuples(index=False):
        print(f"  layer {row.layer} head {row.head}: {row.pattern} from step {row.emergence_step} "
              f"(score {row.final_score:.3f} at the last step)")
    return 0

"""`sinkscope reproduce`: every claim of the paper checked on real models in one command, with verdicts."""

from __future__ import annotations

import argparse

from sinkscope.cli.options import corpus_options, model_options, output_options
from sinkscope.reproduction.claim_texts import CLAIMS

EPILOG = """examples:
  sinkscope reproduce --out runs/repro                                  # both embedded models, prose and code
  sinkscope reproduce --models smollm2-135m --corpora builtin:prose --quick --out runs/repro-quick
  sinkscope reproduce --models ./my/hf/model --corpora data.jsonl --out runs/repro-mine
  sinkscope reproduce --models gemma3-270m --claims sink_ablation,dormant_heads --out runs/repro-ablations

Rerunning with the same --out reuses every finished section whose settings match (a changed setting recomputes
that section only). Writes OUT/report.html, OUT/report.md, OUT/verdicts.json ({claim, model, corpus, verdict,
evidence, thresholds} per claim), OUT/tables/*.csv and one directory per model and section.
The claims, measurements and thresholds are explained in docs/reproduction.md."""


def _names(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    return names


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "reproduce",
        help="check every claim of the paper on real models, with evidence and verdicts",
        description="Run the analyses behind each claim (geometry, oversmoothing, switch, cost, weights, "
        "anchors), reuse the finished ones, and judge each claim: supported, partly, not supported, or not "
        "measurable here.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[
            model_options(model=False),  # many models: --models
            corpus_options(seq_len="window length T (default 64, as Gu et al.)", batch_size=False, bos_id=False),
            output_options("output directory (reused across runs)"),
        ],
    )
    parser.add_argument("--models", type=_names, default=("smollm2-135m", "gemma3-270m"),
                        help="comma-separated models: embedded names, model dirs, .gguf files or hub ids "
                        "(default smollm2-135m,gemma3-270m)")  # fmt: skip
    parser.add_argument("--corpora", type=_names, default=("builtin:prose", "builtin:code"),
                        help="comma-separated main corpora (default builtin:prose,builtin:code); the first one also "
                        "drives the ablations and costs")  # fmt: skip
    parser.add_argument("--quick", action="store_true",
                        help="few windows and a small geometry sample: every section, on less data (minutes)")
    parser.add_argument("--windows", type=int, default=None, help="windows per main corpus (default 32; quick 8)")
    parser.add_argument("--random-draws", type=int, default=None,
                        help="random draws per ablation control (default 20, the fewest a verdict takes; quick 2)")
    parser.add_argument("--ablation-windows", type=int, default=None,
                        help="windows of the ablations (default 16; quick 2)")
    parser.add_argument("--claims", type=_names, default=None, metavar="NAME[,NAME]",
                        help="judge only these claims, computing only the sections they read, at full size (or the "
                        "sizes given); writes claims-verdicts.json and claims-summary.json, not the report. Claims: "
                        + ", ".join(CLAIMS))  # fmt: skip
    parser.add_argument("--regimes-from", default=None, metavar="DIR",
                        help="read the bigram-backcopy regime map from DIR (the --out of `sinkscope train-bb "
                        "--grid regimes`) instead of training it")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seed of samples, random corpora and random heads")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sinkscope.reproduction.config import ReproduceConfig
    from sinkscope.reproduction.run import check_claims, reproduce
    from sinkscope.staging import claimed_workspace

    overrides = dict(models=args.models, corpora=args.corpora, seq_len=args.seq_len, seed=args.seed,
                     device=args.device, dtype=args.dtype, regimes_from=args.regimes_from)  # fmt: skip
    for name in ("windows", "random_draws", "ablation_windows"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    check_claims(args.claims)  # an unknown name fails before any work
    config = ReproduceConfig.preset(args.quick, **overrides)
    with claimed_workspace(args.out, "reproduce"):  # one reproduce per --out; never into a folder of other files
        summary = reproduce(config, args.out, args.claims)
    width = max(len(v["claim"]) for v in summary["verdicts"])
    for verdict in summary["verdicts"]:
        where = verdict["model"] + (f" · {verdict['corpus']}" if verdict.get("corpus") else "")
        print(f"{verdict['claim']:<{width}}  {verdict['verdict']:<20} {where}")
    written = "claims-verdicts.json" if args.claims else "report.html"
    print(f"report: {args.out}/{written} ({summary['seconds']:.0f} s)")
    return 0

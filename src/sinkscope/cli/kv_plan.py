"""`sinkscope kv-plan`: a per-head KV-cache plan (sink + recent window vs full cache) read off sinkscope's
statistics, written in DuoAttention's format, and optionally evaluated against random plans, all-streaming and an
oracle at equal memory."""

from __future__ import annotations

import argparse

from sinkscope.cli.options import OVERWRITE_HELP, corpus_options, float_list, model_options, output_options

EPILOG = """examples:
  sinkscope kv-plan --model smollm2-135m --corpus builtin:prose --seq-len 128 --max-windows 4 --share 0.5 \\
      --sink-size 4 --recent-size 16 --out plans/smollm2
  sinkscope kv-plan --model smollm2-135m --run runs/smollm2 --share 0.25 --evaluate --shares 0.25,0.5,0.75 \\
      --draws 20 --out plans/smollm2-eval
  sinkscope kv-plan --model smollm2-135m --plan plans/optimised --evaluate --out plans/compare

Every KV head is scored for "streamable" (keeps only the first --sink-size keys and the last --recent-size): rule
`measures` = sink + diagonal + previous-token mass (the share the paper's measures place on kept keys), rule
`far-mass` = 1 − the attention beyond the window; a KV head takes its least streamable query head (GQA). The top
--share of KV heads by need keep a full cache. Writes OUT/full_attention_heads.tsv (layers × KV heads, higher =
full; > 0.5 = this plan), OUT/config.json (sink_size, recent_size), OUT/kv_plan_heads.parquet (scores and reason per
head); with --evaluate also OUT/kv_plan_eval.parquet, OUT/kv_plan_eval_summary.parquet, OUT/kv_plan_oracle.parquet
and OUT/figures/kv_plan_eval.png. See docs/kv-plans.md."""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "kv-plan",
        help="per-head KV-cache plan (sink + recent window vs full) in DuoAttention's format, and its evaluation",
        description="Score every KV head for streaming (sink + recent window) from sinkscope's measures, write a "
        "DuoAttention-format plan at a share of full-cache heads, and optionally evaluate it at equal memory.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[
            model_options(),
            corpus_options(corpus="corpus source (as for analyze)",
                           max_windows=(4, "windows scored and evaluated (default 4)")),
            output_options("plan folder (written atomically)", overwrite=OVERWRITE_HELP),
        ],
    )
    parser.add_argument("--run", help="an analyze run folder of this model (default: run the analysis here)")
    parser.add_argument("--share", type=float, default=0.5, help="fraction of KV heads kept full, in [0, 1] "
                        "(default 0.5)")  # fmt: skip
    parser.add_argument("--sink-size", type=int, default=4, help="first tokens a streaming head keeps (default 4)")
    parser.add_argument("--recent-size", type=int, default=32, help="recent keys a streaming head keeps, the query "
                        "included (default 32)")  # fmt: skip
    parser.add_argument("--rule", default="measures", help="measures (default) or far-mass")
    parser.add_argument("--evaluate", action="store_true", help="also compare plans at equal memory")
    parser.add_argument("--shares", type=float_list, default=(0.25, 0.5, 0.75), help="shares compared (default "
                        "0.25,0.5,0.75)")  # fmt: skip
    parser.add_argument("--draws", type=int, default=20, help="random plans per share (default 20)")
    parser.add_argument("--span", type=int, default=16, help="tokens of the copied span (default 16)")
    parser.add_argument("--plan", help="a plan folder (DuoAttention format) to evaluate beside the others")
    parser.add_argument("--far-mass-on", choices=("windows", "probes"), default="windows", help="measure far mass "
                        "on the corpus windows (default) or on the probe windows, whose copied span gives "
                        "retrieval heads a reason to look far")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seed of random corpora and random plans")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sinkscope.errors import SinkscopeError
    from sinkscope.pipelines.kv_plan import PlanConfig
    from sinkscope.pipelines.kv_plan_eval import EvalConfig

    config = PlanConfig(share=args.share, sink_size=args.sink_size, recent_size=args.recent_size, rule=args.rule)
    evaluation = EvalConfig(shares=args.shares, draws=args.draws, span=args.span, seed=args.seed)
    if args.evaluate or args.far_mass_on == "probes":
        evaluation.check_lengths(args.seq_len, config.sink_size, config.recent_size)
    elif args.plan:
        raise SinkscopeError("--plan is a plan to evaluate: add --evaluate")
    for flag, folder, needed in (("--run", args.run, "run.json"), ("--plan", args.plan, "config.json")):
        if folder and not (Path(folder) / needed).is_file():
            raise SinkscopeError(f"{flag} {folder} has no {needed}: give a folder written by sinkscope "
                                 f"{'analyze' if flag == '--run' else 'kv-plan'}")  # fmt: skip
    if config.sink_size + config.recent_size >= args.seq_len:
        raise SinkscopeError(f"--sink-size {config.sink_size} + --recent-size {config.recent_size} keep every key "
                             f"of --seq-len {args.seq_len}: use a longer --seq-len")  # fmt: skip
    from sinkscope.cli.model_windows import model_windows

    with model_windows(args) as (lm, stream):
        summary = _plan_and_evaluate(lm, stream, args, config, evaluation)
    print(f"plan -> {args.out} ({config.rule}, share {config.share}, sink {config.sink_size}, recent "
          f"{config.recent_size})")  # fmt: skip
    if summary is not None:
        for _, row in summary.iterrows():
            extra = f"  beats {row['beats_random']:.0%} of random" if row["beats_random"] == row["beats_random"] else ""
            print(f"  {row['policy']:<9} full {row['n_full']:>3} memory {row['memory']:.3f}: loss {row['loss']:.4f} "
                  f"(Δ {row['delta_full']:+.4f} [{row['delta_lo']:+.4f}, {row['delta_hi']:+.4f}]) copy accuracy "
                  f"{row['accuracy']:.3f}{extra}")  # fmt: skip
    return 0


def _plan_and_evaluate(lm, stream, args, config, evaluation):
    """Check the model's KV layout, the run and the given plan against it, then score, write and evaluate."""
    from sinkscope.errors import SinkscopeError
    from sinkscope.pipelines import kv_plan, kv_plan_eval
    from sinkscope.pipelines.analysis import AnalyzeConfig, analyze
    from sinkscope.pipelines.run import Run
    from sinkscope.report.plots import figure_png

    L, KV, group = kv_plan.kv_head_count(lm.config)
    given = kv_plan.read_plan(args.plan, L, KV) if args.plan else None
    if given is not None and given[1:] != (config.sink_size, config.recent_size):
        raise SinkscopeError(f"--plan {args.plan} streams with sink_size {given[1]}, recent_size {given[2]}: pass "
                             f"--sink-size {given[1]} --recent-size {given[2]}")  # fmt: skip
    batches = list(stream)
    if args.run:
        analysis = Run.load(args.run)
        shape = (analysis.heads["layer"].nunique(), analysis.heads["head"].nunique())
        if shape != (L, KV * group) or analysis.meta["model"].get("name") != lm.identity.get("name"):
            raise SinkscopeError(f"--run {args.run} is an analysis of {analysis.meta['model'].get('name')} "
                                 f"({shape[0]} layers × {shape[1]} heads), not of {lm.identity.get('name')} "
                                 f"({L} × {KV * group})")  # fmt: skip
    else:
        analysis = analyze(lm, stream, AnalyzeConfig(geometry_cap=0), progress=False, threads=None)
    probes = [kv_plan_eval.probe(b, evaluation.span, config.sink_size) for b in batches]
    far = kv_plan.measure_far_mass(lm, probes if args.far_mass_on == "probes" else batches, config.sink_size,
                                   config.recent_size)  # fmt: skip
    scores = kv_plan.head_scores(analysis.heads, far, group, config)
    order = kv_plan.need_order(scores)
    values = kv_plan.plan_values(order, kv_plan.full_heads(order, L, KV, config.share))
    meta = {"model": lm.identity, "analysis": args.run or "run here (geometry_cap 0)", "seq_len": args.seq_len,
            "corpus": stream.identity(), "windows": sum(b.shape[0] for b in batches),
            "far_mass_on": args.far_mass_on}  # fmt: skip
    if not args.evaluate:
        kv_plan.write_plan(args.out, values, scores, config, meta)
        return None
    orders = {"sinkscope": kv_plan.need_order(scores.assign(need=1 - scores["kept"])),
              "far-mass": kv_plan.need_order(scores.assign(need=scores["far_mass"]))}  # fmt: skip
    rows, oracle = kv_plan_eval.compare(lm, probes, orders, (L, KV, group), config.sink_size, config.recent_size,
                                        evaluation, plan=None if given is None else given[0] > 0.5, progress=True)
    summary = kv_plan_eval.summarize(rows)
    png = figure_png(kv_plan_eval.figure(summary, f"{lm.identity.get('name', 'model')}: sink {config.sink_size} + "
                                         f"recent {config.recent_size}, T = {probes[0].shape[1]}"))  # fmt: skip
    meta["evaluation"] = {"shares": list(evaluation.shares), "draws": evaluation.draws, "span": evaluation.span,
                          "seed": evaluation.seed}  # fmt: skip
    kv_plan.write_plan(args.out, values, scores, config, meta,
                       extra={"kv_plan_eval.parquet": rows, "kv_plan_eval_summary.parquet": summary,
                              "kv_plan_oracle.parquet": oracle}, figures={"kv_plan_eval.png": png})  # fmt: skip
    return summary

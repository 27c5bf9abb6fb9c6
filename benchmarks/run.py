"""Speed and memory of sinkscope against a plain forward pass, plain transformers and TransformerLens.

For each window length T the same token windows go through every method, each in its own process
(benchmarks/worker.py), and the table gives tokens/s and extra RSS with their ratios to the floor (a plain sdpa
forward of the base model). Then: agreement of per-head scores between sinkscope and the full attention maps,
the half-space certificates' own time, and extra RSS against the number of layers. See docs/performance.md.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/run.py                  # the full grid (make bench)
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/run.py --seq-lens 64 --windows 2 --batch 2 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GB = 1e9


def int_list(text: str) -> list[int]:
    return [int(item) for item in text.split(",") if item]


def per_length(values: list[int], lengths: list[int], flag: str) -> list[int]:
    """One value per window length: a single value applies to all."""
    if len(values) == 1:
        return values * len(lengths)
    if len(values) != len(lengths):
        sys.exit(f"{flag} needs one value or one per --seq-lens entry ({len(lengths)})")
    return values


def token_windows(corpus: str, tokenizer, seq_len: int, count: int):
    """`count` BOS-prefixed windows (count, seq_len) of `corpus`, or of builtin:random if it is too short."""
    import torch

    import sinkscope

    stream = sinkscope.windows(corpus, tokenizer, seq_len, max_windows=count, batch_size=count)
    ids = torch.cat(list(stream))
    if len(ids) < count:
        stream = sinkscope.windows("builtin:random", tokenizer, seq_len, max_windows=count, batch_size=count)
        return torch.cat(list(stream)), f"builtin:random ({corpus} gave only {len(ids)} windows)"
    return ids, corpus


def busy_cpu_seconds() -> float:
    """CPU-seconds the whole machine has spent busy since boot (Linux /proc/stat; 0 elsewhere)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def source_state() -> str:
    """The commit measured, and whether src/ differed from it (numbers move with the code)."""
    try:
        git = ["git", "-C", str(HERE.parent)]
        commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
        dirty = subprocess.run([*git, "status", "--porcelain", "src"], capture_output=True, text=True).stdout
    except OSError:
        return "unknown commit"
    return commit.strip() + (" with uncommitted changes in src/" if dirty.strip() else "")


def run_worker(
    python: str,
    method: str,
    ids_path: Path,
    args: argparse.Namespace,
    batch: int,
    repeats: int,
    layers: int = 0,
    threads: int = 2,
    beyond_context: bool = False,
) -> dict:
    """One method in a fresh process; its JSON result, or {"note": why it failed}."""
    flags = {
        "--method": method,
        "--model": args.model,
        "--ids": ids_path,
        "--batch": batch,
        "--repeats": repeats,
        "--threads": threads,
        "--layers": layers,
        # the geometry run's warm-up would solve the certificates twice
        "--warmup": 0 if method == "sinkscope-geom" or args.no_warmup else 1,
    }
    command = [python, str(HERE / "worker.py"), *(str(item) for pair in flags.items() for item in pair)]
    if beyond_context:
        command.append("--beyond-context")
    load, busy, children = (
        os.getloadavg()[0],
        busy_cpu_seconds(),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"method": method, "note": f"timed out after {args.timeout} s"}
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    worker_cpu = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    # Other processes' share of the machine while the worker ran: what contention the timing suffered.
    others = (busy_cpu_seconds() - busy - worker_cpu) / (wall * (os.cpu_count() or 1))
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return {"method": method, "note": f"failed (exit {done.returncode}): {last}"}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result |= {"load_before": load, "others_cpu_share": max(0.0, others), "wall_seconds": wall, "threads": threads}
    if beyond_context:
        result["note"] = (result.get("note", "") + " beyond the model's context: cost only").strip()
    return result


def map_bytes(layers: int, batch: int, heads: int, seq_len: int) -> int:
    """Bytes of the float32 attention maps a full-map method holds at once: L × B × H × T² × 4."""
    return layers * batch * heads * seq_len**2 * 4


def max_abs_diff(a: dict, b: dict, name: str) -> float | None:
    if name not in a.get("scores", {}) or name not in b.get("scores", {}):
        return None
    x, y = a["scores"][name], b["scores"][name]
    return max(abs(u - v) for row_x, row_y in zip(x, y) for u, v in zip(row_x, row_y))


def ratio(value: float | None, floor: float | None) -> str:
    return "" if value is None or not floor else f"{value / floor:.2f}×"


def result_table(rows: list[dict], floors: dict) -> list[str]:
    lines = [
        "| T | threads | method | windows × batch | tokens/s | × floor | tokens/CPU-s | × floor | extra RSS (GB) | × floor | others' CPU | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        floor = floors.get((row["seq_len"], row.get("threads"), row.get("layers_kept", 0)), {})
        cells = [f"{row['seq_len']}", f"{row.get('threads', '')}", row["method"],
                 f"{row.get('windows', '')} × {row.get('batch', '')}"]  # fmt: skip
        for key, scale, digits in (
            ("tokens_per_second", 1, 0),
            ("tokens_per_cpu_second", 1, 0),
            ("extra_rss", GB, 2),
        ):
            value = row.get(key)
            cells += [
                "" if value is None else f"{value / scale:.{digits}f}",
                ratio(value, floor.get(key)),
            ]
        others = f"{row['others_cpu_share']:.0%}" if "others_cpu_share" in row else ""
        lines.append("| " + " | ".join([*cells, others, row.get("note", "")]) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--corpus", default="builtin:prose")
    parser.add_argument("--seq-lens", type=int_list, default=[256, 1024, 4096])
    parser.add_argument("--windows", type=int_list, default=[32, 8, 2], help="windows per length")
    parser.add_argument("--batch", type=int_list, default=[8, 2, 1], help="batch size per length")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes over the windows (median)")
    parser.add_argument("--threads", type=int_list, default=[2], help="torch threads; several: each length on each")
    parser.add_argument("--no-warmup", action="store_true", help="time the first pass (long T: halves the run)")
    parser.add_argument("--methods", default="floor,sinkscope,attentions,transformerlens")
    parser.add_argument(
        "--tl-python",
        default=str(HERE / ".venv-tl" / "bin" / "python"),
        help="python of the venv with TransformerLens (see docs/performance.md)",
    )
    parser.add_argument(
        "--max-map-gb",
        type=float,
        default=16.0,
        help="skip full-map methods whose attention maps would exceed this",
    )
    parser.add_argument("--no-geometry", action="store_true", help="skip timing the half-space certificates")
    parser.add_argument(
        "--depth-seq-len", type=int, default=1024, help="T of the memory-vs-layers check (0: skip)"
    )
    parser.add_argument("--depth-layers", type=int_list, default=[10, 30])
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per worker process")
    parser.add_argument("--out", default="runs/bench/results.json")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    windows = per_length(args.windows, args.seq_lens, "--windows")
    batches = per_length(args.batch, args.seq_lens, "--batch")
    methods = args.methods.split(",")

    import torch

    import sinkscope

    lm = sinkscope.load_model(args.model)
    tokenizer, n_layers, n_heads, context = lm.tokenizer, len(lm.layers), lm.layout.n_heads, lm.max_positions
    del lm
    started, load_start = time.time(), os.getloadavg()
    print(
        f"# {args.model}: {n_layers} layers × {n_heads} heads; torch {torch.__version__}, threads {args.threads}; "
        f"sinkscope at {source_state()}; load average {load_start[0]:.2f}",
        flush=True,
    )
    rows, floors, agreement = [], {}, []
    with tempfile.TemporaryDirectory() as scratch:
        for T, count, batch in zip(args.seq_lens, windows, batches):
            ids, source = token_windows(args.corpus, tokenizer, T, count)
            ids_path = Path(scratch) / f"ids_{T}.pt"
            torch.save(ids, ids_path)
            print(f"# T={T}: {len(ids)} windows of {source}, batch {batch}", flush=True)
            beyond = context is not None and T > context  # SmolLM2: 8192; sinkscope refuses longer windows
            for threads in args.threads:
                by_method = {}
                extra_methods = [] if args.no_geometry or T != args.seq_lens[0] else ["sinkscope-geom"]
                for method in methods + extra_methods:
                    python = args.tl_python if method == "transformerlens" else sys.executable
                    needed = map_bytes(n_layers, batch, n_heads, T)
                    if method in ("attentions", "transformerlens") and needed > args.max_map_gb * GB:
                        result = {
                            "method": method,
                            "note": f"skipped: maps need {needed / GB:.1f} GB (L·B·H·T²·4)",
                        }
                    elif method == "transformerlens" and not Path(python).exists():
                        result = {"method": method, "note": f"skipped: no TransformerLens venv at {python}"}
                    else:
                        repeats = 1 if method == "sinkscope-geom" else args.repeats
                        result = run_worker(python, method, ids_path, args, batch, repeats, 0, threads, beyond)
                    result.setdefault("seq_len", T)
                    result.setdefault("threads", threads)
                    if method == "sinkscope-geom" and "geometry_seconds" in result:
                        result["note"] = (
                            f"certificates: {result['geometry_seconds']:.1f} s after the forward passes"
                        )
                    by_method[method] = result
                    rows.append(result)
                    if method == "floor":
                        floors[(T, threads, 0)] = result
                    print("\n".join(result_table([result], floors)[2:]), flush=True)
                for other in ("attentions", "transformerlens"):
                    if "sinkscope" in by_method and other in by_method:
                        diffs = {
                            name: max_abs_diff(by_method["sinkscope"], by_method[other], name)
                            for name in ("sink_score", "diag_score")
                        }
                        if None not in diffs.values():
                            agreement.append({"seq_len": T, "threads": threads, "against": other, **diffs})
        depth = []
        if args.depth_seq_len:
            T = args.depth_seq_len
            ids, source = token_windows(args.corpus, tokenizer, T, 2)
            ids_path = Path(scratch) / f"depth_{T}.pt"
            torch.save(ids, ids_path)
            for layers in args.depth_layers:
                for method in ("floor", "sinkscope", "attentions"):
                    result = run_worker(sys.executable, method, ids_path, args, 2, 1, layers, args.threads[0])
                    result |= {"seq_len": T, "layers_kept": layers}
                    if method == "floor":
                        floors[(T, args.threads[0], layers)] = result
                    depth.append(result)
                    print(
                        f"# depth {layers}: {method} extra RSS {result.get('extra_rss', 0) / GB:.2f} GB "
                        f"{result.get('note', '')}",
                        flush=True,
                    )

    load_end = os.getloadavg()
    lines = result_table(rows, floors)
    lines += [
        "",
        "| T | threads | compared with | max abs diff sink_score | max abs diff diag_score |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {a['seq_len']} | {a['threads']} | {a['against']} | {a['sink_score']:.2e} | {a['diag_score']:.2e} |"
        for a in agreement
    ]
    if depth:
        lines += [
            "",
            f"Extra RSS against depth (T={args.depth_seq_len}, 2 windows, batch 2, one pass):",
            "",
            "| layers | method | extra RSS (GB) | × floor | note |",
            "|---|---|---|---|---|",
        ]
        for row in depth:
            floor = floors.get((row["seq_len"], row["threads"], row["layers_kept"]), {})
            extra = row.get("extra_rss")
            lines.append(
                f"| {row['layers_kept']} | {row['method']} | "
                + ("" if extra is None else f"{extra / GB:.2f}")
                + f" | {ratio(extra, floor.get('extra_rss'))} | {row.get('note', '')} |"
            )
    minutes = (time.time() - started) / 60
    lines += [
        "",
        f"{minutes:.1f} min; 1-min load average {load_start[0]:.2f} at start, {load_end[0]:.2f} at end",
    ]
    busy = max(row.get("others_cpu_share", 0) for row in rows + depth)
    if busy > 0.05:
        lines.append(f"WARNING: other processes used up to {busy:.0%} of the CPUs while a worker ran")
    print("\n" + "\n".join(lines))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for row in rows + depth:
        row.pop("scores", None)
    record = {
        "args": vars(args),
        "rows": rows,
        "agreement": agreement,
        "depth": depth,
        "minutes": minutes,
        "source": source_state(),
        "load_start": load_start,
        "load_end": load_end,
        "table": lines,
    }
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(out)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

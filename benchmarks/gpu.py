"""Speed and memory of `sinkscope analyze` on a GPU, against the sdpa floor and eager `output_attentions`.

One process, one table (issue 23): for each dtype and window length T, the same random token windows through
  floor       `lm.base(input_ids, use_cache=False)` with sdpa attention: the cheapest pass over the tokens
  sinkscope   `sinkscope.analyze(lm, windows, AnalyzeConfig(geometry_cap=0), progress=False)`, once per attention
              precision (`--precisions`, default exact and model: `AnalyzeConfig.attention_precision`; exact only,
              with a note, on a sinkscope without that setting), with the path every layer took
  eager       the eager base model with `output_attentions=True`, then per-head sink and diagonal scores from the
              maps (skipped, with the estimate, where the maps alone would exceed `--max-map-gb`)
Tokens/s = windows × T / seconds of one pass over all windows (CUDA-synchronised wall clock), median of
`--repeats` passes after a warm-up pass of the same shapes (which also compiles the flex kernels). Extra memory =
peak allocated GPU memory during the passes minus the memory allocated before them (model and windows).

The model is SmolLM2-135M's shape (Llama: 30 layers, d = 576, 9 heads, 3 KV heads, head size 64, MLP 1536,
vocabulary 49152) with random weights, since the GPU machine has no model files; `--model DIR` takes a saved
model directory instead. Needs only torch, transformers, pandas (a stock CUDA PyTorch environment) and sinkscope:

    PYTHONPATH=src python benchmarks/gpu.py --out runs/bench/gpu.json

It stops starting new cells after `--budget-seconds` (default 330, so the whole script stays under 6 minutes)
and says which cells it skipped. `--device cpu --seq-lens 64 --tokens 256` is a smoke run on any machine.
`--quick` is the short run of issue 33 (meant to finish within 4 minutes, compilation included; not yet timed
on a GPU): T = 1024, 4096, 16384 in bfloat16, 16384 tokens per pass, one timed pass, a 150-second budget (checked
before every method, so a slow compilation skips what is left rather than overrunning); flags given explicitly
override it. `--tiny` swaps the model for a 2-layer Llama of width 64 (vocabulary 96), for a run end to end on
the CPU in seconds (`tests/integration/test_gpu_benchmark.py`):

    PYTHONPATH=src python benchmarks/gpu.py --quick --device cpu --tiny --seq-lens 16,32 --tokens 64
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

SMOLLM2_SHAPE = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                     num_attention_heads=9, num_key_value_heads=3, head_dim=64, rope_theta=100000.0,
                     tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)  # fmt: skip
TINY_SHAPE = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, bos_token_id=1, eos_token_id=2)  # fmt: skip
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
PRECISIONS = ("exact", "model")


QUICK = dict(seq_lens="1024,4096,16384", dtypes="bfloat16", tokens=16384, repeats=1, budget_seconds=150.0)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="issue 33's short run (module doc)")
    parser.add_argument("--seq-lens", default="1024,4096,16384,32768", help="window lengths T (comma-separated)")
    parser.add_argument("--dtypes", default="bfloat16,float32", help="model dtypes (comma-separated)")
    parser.add_argument("--tokens", type=int, default=65536, help="tokens per timed pass (windows = tokens / T)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per cell (median)")
    parser.add_argument("--methods", default="floor,sinkscope,eager", help="which of floor, sinkscope, eager")
    parser.add_argument("--precisions", default=",".join(PRECISIONS), help="sinkscope's attention precisions")
    parser.add_argument("--max-map-gb", type=float, default=60.0, help="skip eager above this much map memory")
    parser.add_argument("--budget-seconds", type=float, default=330.0, help="start no new cell after this")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu for a smoke run")
    parser.add_argument("--model", default=None, help="a saved model directory instead of the random SmolLM2 shape")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer Llama of width 64 (a smoke run, module doc)")
    parser.add_argument("--out", default="runs/bench/gpu.json", help="JSON with every measurement")
    if parser.parse_known_args(argv)[0].quick:
        parser.set_defaults(**QUICK)
    return parser.parse_args(argv)


def build_model(args: argparse.Namespace, dtype: torch.dtype, max_len: int):
    """The base model for the floor and sinkscope (sdpa) and the same weights with eager attention."""
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    from sinkscope.models.families import family_for
    from sinkscope.models.load import LoadedModel

    torch.manual_seed(0)
    if args.model:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation="sdpa")
        model.to(args.device)
        name = args.model
    else:
        config = LlamaConfig(**(TINY_SHAPE if args.tiny else SMOLLM2_SHAPE), max_position_embeddings=max(max_len, 8192))
        with torch.device(args.device):
            model = LlamaForCausalLM(config).to(dtype)
        model.set_attn_implementation("sdpa")
        name = "tiny-llama-random" if args.tiny else "smollm2-shape-random"
    model.eval().requires_grad_(False)
    identity = {"name": name, "dtype": next(k for k, v in DTYPES.items() if v == dtype)}
    return LoadedModel(model=model, tokenizer=None, family=family_for(model.config.model_type), identity=identity)


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def measure(run, device: str, repeats: int) -> dict:
    """Median seconds of `run()` over `repeats` after one warm-up call, and the extra peak memory (bytes)."""
    run()
    synchronize(device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        synchronize(device)
        times.append(time.perf_counter() - started)
    extra = torch.cuda.max_memory_allocated() - before if device == "cuda" else None
    return {"seconds": statistics.median(times), "all_seconds": times, "extra_bytes": extra}


def precisions_here(wanted: list[str]) -> tuple[list[str], str | None]:
    """The attention precisions this sinkscope offers among `wanted`, and a note when some are missing."""
    from sinkscope.pipelines.analysis import AnalyzeConfig

    if "attention_precision" in AnalyzeConfig.__dataclass_fields__:
        return wanted, None
    return ["exact"], "this sinkscope has no attention_precision setting: exact (float32) only"


def layer_paths(record: list[str], n_layers: int) -> str:
    """The path of each layer in the first forward pass, as runs: "flex 0–29" or "rows 0–1, blocks 2"."""
    runs: list[list] = []
    for layer, path in enumerate(record[:n_layers]):
        if runs and runs[-1][0] == path:
            runs[-1][2] = layer
        else:
            runs.append([path, layer, layer])
    return ", ".join(f"{p} {a}" if a == b else f"{p} {a}–{b}" for p, a, b in runs)


def analysed(lm, windows, precision: str | None, args: argparse.Namespace) -> dict:
    """`measure` of `analyze` at `precision` (None: the default), with the path each layer call took."""
    import sinkscope.capture.attention as attention
    from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

    record: list[str] = []
    layer_rows, blocked = attention._layer_rows, attention.blocked_attention

    def rows_path(path, *rest, **form):
        out = layer_rows(path, *rest, **form)
        if out is not None:  # None: the block path takes the call (and records it)
            record.append("rows (flex failed)" if path == "flex" and attention._flex_failed else path)
        return out

    def block_path(*rest):
        record.append("blocks")
        return blocked(*rest)

    attention._layer_rows, attention.blocked_attention = rows_path, block_path
    try:
        config = AnalyzeConfig(geometry_cap=0, **({} if precision is None else {"attention_precision": precision}))
        result = measure(lambda: analyze(lm, windows, config, progress=False), args.device, args.repeats)
    finally:
        attention._layer_rows, attention.blocked_attention = layer_rows, blocked
    result["paths"] = layer_paths(record, len(lm.layers))
    result["flex_failed"] = attention._flex_failed
    return result


def cell(args: argparse.Namespace, lm, dtype_name: str, seq_len: int, methods: list[str], started: float) -> dict:
    """Every method on the same windows of one (dtype, T); a method is skipped once `--budget-seconds` have passed
    since `started`."""
    from sinkscope.corpus.windows import TokenWindows

    batch = max(1, args.tokens // seq_len)
    generator = torch.Generator().manual_seed(seq_len)
    ids = torch.randint(3, lm.config.vocab_size, (batch, seq_len), generator=generator)
    ids[:, 0] = lm.config.bos_token_id if lm.config.bos_token_id is not None else 1
    device_ids = ids.to(args.device)
    tokens = batch * seq_len
    result = {"dtype": dtype_name, "seq_len": seq_len, "windows": batch, "batch": batch, "tokens": tokens}
    layout = lm.layout
    map_gb = len(lm.layers) * batch * layout.n_heads * seq_len**2 * DTYPES[dtype_name].itemsize / 1e9

    precisions, note = precisions_here(args.precisions.split(","))
    runs = [("floor", None)] * ("floor" in methods) + [(f"sinkscope {p}", p) for p in precisions] * ("sinkscope" in methods)
    runs += [("eager", None)] * ("eager" in methods)
    windows = TokenWindows(ids, batch_size=batch)
    with torch.no_grad():
        for name, precision in runs:
            if time.perf_counter() - started > args.budget_seconds:
                result[name] = {"skipped": f"over --budget-seconds {args.budget_seconds:.0f}"}
            elif name == "floor":
                result[name] = measure(lambda: lm.base(input_ids=device_ids, use_cache=False), args.device, args.repeats)
            elif name.startswith("sinkscope"):
                result[name] = analysed(lm, windows, None if note else precision, args)  # None: no such setting
            elif map_gb > args.max_map_gb:
                result[name] = {"skipped": f"the maps alone would take {map_gb:.0f} GB (> --max-map-gb)"}
            else:
                result[name] = eager_cell(lm, device_ids, args)
    floor = result.get("floor", {})
    for name, _ in runs:
        entry = result[name]
        if "seconds" in entry:
            entry["tokens_per_second"] = tokens / entry["seconds"]
            if "seconds" in floor:
                entry["ratio"] = floor["seconds"] / entry["seconds"]
    return result


def eager_cell(lm, device_ids: torch.Tensor, args: argparse.Namespace) -> dict:
    """Eager `output_attentions` and per-head sink/diagonal scores; an out-of-memory error is reported, not raised."""

    def run():
        maps = lm.base(input_ids=device_ids, use_cache=False, output_attentions=True).attentions
        for attn in maps:
            attn[..., :, 0].float().mean(-1).mean(0)
            attn.diagonal(dim1=-2, dim2=-1)[..., 1:].float().mean(-1).mean(0)

    previous = lm.model.config._attn_implementation
    lm.model.set_attn_implementation("eager")
    try:
        return measure(run, args.device, args.repeats)
    except torch.OutOfMemoryError as error:
        return {"skipped": f"out of memory: {str(error).splitlines()[0]}"}
    finally:
        lm.model.set_attn_implementation(previous)
        if args.device == "cuda":
            torch.cuda.empty_cache()


def table(results: list[dict]) -> str:
    """The table in Markdown: one row per (dtype, T, method): tokens/s, × the floor's, extra memory (peak allocated
    during the passes less what was allocated before them), and for sinkscope the path of every layer."""
    lines = ["| dtype | T | windows | method | tokens/s | × floor | extra memory | layers' paths |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in results:
        for name in (key for key in r if key == "floor" or key == "eager" or key.startswith("sinkscope")):
            entry = r[name]
            if "tokens_per_second" not in entry:
                lines.append(f"| {r['dtype']} | {r['seq_len']} | {r['windows']} | {name} | {entry.get('skipped', '–')} | | | |")
                continue
            extra = "n/a (CPU)" if entry.get("extra_bytes") is None else f"{entry['extra_bytes'] / 2**30:.2f} GiB"
            lines.append(f"| {r['dtype']} | {r['seq_len']} | {r['windows']} | {name} | {entry['tokens_per_second']:,.0f} | "
                         f"{entry.get('ratio', 1.0):.2f}× | {extra} | {entry.get('paths', '')} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    if args.device == "cuda" and not torch.cuda.is_available():
        print("benchmarks/gpu.py: no CUDA device here; use --device cpu for a smoke run", file=sys.stderr)
        return 2
    started = time.perf_counter()
    seq_lens = [int(t) for t in args.seq_lens.split(",")]
    methods = args.methods.split(",")
    environment = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if args.device == "cuda"
                   else "cpu"}  # fmt: skip
    import transformers

    environment["transformers"] = transformers.__version__
    results, skipped = [], []
    for dtype_name in args.dtypes.split(","):
        lm = build_model(args, DTYPES[dtype_name], max(seq_lens))
        for seq_len in seq_lens:
            if time.perf_counter() - started > args.budget_seconds:
                skipped.append(f"{dtype_name} T={seq_len}")
                continue
            cell_started = time.perf_counter()
            try:
                result = cell(args, lm, dtype_name, seq_len, methods, started)
            except torch.OutOfMemoryError as error:
                result = {"dtype": dtype_name, "seq_len": seq_len, "windows": 0, "error": str(error).splitlines()[0]}
            result["cell_seconds"] = time.perf_counter() - cell_started
            results.append(result)
            print(json.dumps(result), flush=True)
        del lm
        if args.device == "cuda":
            torch.cuda.empty_cache()
    _, note = precisions_here(args.precisions.split(","))
    report = {"environment": environment, "results": results, "skipped": skipped,
              "seconds": time.perf_counter() - started, "note": note}  # fmt: skip
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(table(results))
    if note:
        print(note)
    if skipped:
        print(f"skipped (over --budget-seconds {args.budget_seconds:.0f}): {', '.join(skipped)}")
    print(f"wrote {out} ({report['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

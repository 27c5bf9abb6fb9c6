"""One benchmark method in its own process, so its memory is measured alone; prints one JSON object.

Methods (all on the same token windows, base model only, no gradients):
  floor            plain sdpa forward of the base model, no outputs: the floor every other method is held to
  sinkscope        `sinkscope.analyze(lm, windows, AnalyzeConfig(geometry_cap=0))`
  sinkscope-geom   the same with the default half-space certificates (geometry_cap=256), timed separately
  attentions       eager forward with `output_attentions=True, output_hidden_states=True`, then per-head
                   sink/diag scores from the returned maps (what a user would do with plain transformers)
  transformerlens  TransformerLens 4 `TransformerBridge.run_with_cache` with a names filter (attention patterns
                   and residual inputs), then the same sink/diag scores; needs its own venv (docs/performance.md)

Speed: tokens/s over the wall clock (median of the repeats), and tokens per CPU-second of this process (user +
system, all threads), which other processes on the machine disturb less than the wall clock.
Memory: "extra RSS" is the peak resident set during warm-up and timed repeats minus the resident set after
loading the model and the windows, with every weight paged in (bytes). The peak is sampled every 2 ms in a
thread and cross-checked with `getrusage` (whose lifetime peak counts only when the job exceeds the loading one).
Usage: python benchmarks/worker.py --method floor --ids windows.pt --batch 8 --repeats 3
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator

import psutil  # installed with accelerate, a sinkscope dependency
import torch
from torch import Tensor

METHODS = ("floor", "sinkscope", "sinkscope-geom", "attentions", "transformerlens")


class PeakRSS:
    """Samples this process's resident set every `interval` seconds in a background thread (bytes)."""

    def __init__(self, interval: float = 0.002) -> None:
        self.process = psutil.Process()
        self.interval = interval
        self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(self.interval)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)


def max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def keep_layers(lm, n_layers: int) -> None:
    """Truncate the base model to its first `n_layers` decoder layers (the memory-vs-depth check)."""
    base = lm.base
    blocks = getattr(base, lm.family.layers)
    setattr(base, lm.family.layers, torch.nn.ModuleList(list(blocks)[:n_layers]))
    config = lm.config
    config.num_hidden_layers = n_layers
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = config.layer_types[:n_layers]


class PatternScores:
    """Per-head sums of SPEC §2's sink score (`mean_t A[t,0]`) and diagonal score (`mean_{t≥1} A[t,t]`),
    computed directly from full attention maps; independent of sinkscope's streaming code."""

    def __init__(self) -> None:
        self.sink: Tensor | None = None
        self.diag: Tensor | None = None
        self.windows = 0
        self.seq_len = 0

    def add(self, patterns: list[Tensor]) -> None:
        """`patterns`: one (B, H, T, T) map per layer; summed in float64 without copying the maps."""
        sink = torch.stack([p[..., 0].sum((0, 2), dtype=torch.float64) for p in patterns])  # (L, H)
        diag = torch.stack(
            [p.diagonal(dim1=-2, dim2=-1)[..., 1:].sum((0, 2), dtype=torch.float64) for p in patterns]
        )
        self.sink = sink if self.sink is None else self.sink + sink
        self.diag = diag if self.diag is None else self.diag + diag
        self.windows += patterns[0].shape[0]
        self.seq_len = patterns[0].shape[-1]

    def scores(self) -> dict[str, list[list[float]]]:
        W, T = self.windows, self.seq_len
        return {
            "sink_score": (self.sink / (W * T)).tolist(),
            "diag_score": (self.diag / (W * (T - 1))).tolist(),
        }


def heads_scores(heads) -> dict[str, list[list[float]]]:
    """(L, H) nested lists of a sinkscope run's sink and diagonal scores."""
    table = heads.sort_values(["layer", "head"])
    n_layers = int(table["layer"].max()) + 1
    return {
        name: table[name].to_numpy().reshape(n_layers, -1).tolist() for name in ("sink_score", "diag_score")
    }


def make_job(method: str, lm, ids: Tensor, batch: int) -> tuple[Callable[[Tensor], dict], Callable[[], dict]]:
    """`(run, scores)`: `run(ids)` processes windows `ids` (N, T) and returns extra timings; `scores()` the
    per-head scores of the last `run` (empty for the floor)."""
    from sinkscope.corpus.windows import TokenWindows
    from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

    last: dict = {}

    def batches(windows: Tensor) -> Iterator[Tensor]:
        yield from windows.split(batch)

    if method == "floor":

        def run(windows: Tensor) -> dict:
            for chunk in batches(windows):
                lm.base(input_ids=chunk, use_cache=False)
            return {}

    elif method in ("sinkscope", "sinkscope-geom"):
        config = AnalyzeConfig(geometry_cap=0) if method == "sinkscope" else AnalyzeConfig()

        def run(windows: Tensor) -> dict:
            result = analyze(lm, TokenWindows(windows, batch_size=batch), config, progress=False)
            last["scores"] = heads_scores(result.heads)
            return {"geometry_seconds": result.meta["timings"]["geometry_seconds"]}

    elif method == "attentions":

        def run(windows: Tensor) -> dict:
            scores = PatternScores()
            for chunk in batches(windows):
                out = lm.base(
                    input_ids=chunk, output_attentions=True, output_hidden_states=True, use_cache=False
                )
                scores.add(list(out.attentions))
                del out
            last["scores"] = scores.scores()
            return {}

    elif method == "transformerlens":
        from transformer_lens.model_bridge import TransformerBridge

        if not lm.model.config.architectures:  # GGUF-loaded models may lack it; the bridge needs it
            lm.model.config.architectures = [type(lm.model).__name__]
        bridge = TransformerBridge.boot_transformers(
            lm.model.config._name_or_path, hf_model=lm.model, tokenizer=lm.tokenizer
        )
        wanted = lambda name: name.endswith(("attn.hook_pattern", "hook_resid_pre"))  # noqa: E731

        def run(windows: Tensor) -> dict:
            scores = PatternScores()
            for chunk in batches(windows):
                _, cache = bridge.run_with_cache(chunk, names_filter=wanted, return_type=None)
                scores.add([cache[f"blocks.{i}.attn.hook_pattern"] for i in range(len(bridge.blocks))])
                del cache
            last["scores"] = scores.scores()
            return {}

    else:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    return run, lambda: last.get("scores", {})


@torch.no_grad()
def measure(args: argparse.Namespace) -> dict:
    import sinkscope

    torch.set_num_threads(args.threads)
    eager = args.method in ("attentions", "transformerlens")
    lm = sinkscope.load_model(args.model, attn_implementation="eager" if eager else "sdpa")
    if args.layers:
        keep_layers(lm, args.layers)
    if args.beyond_context:  # cost only: positions past the trained context give meaningless numbers
        import sinkscope.pipelines.analysis as analysis

        analysis.check_seq_len = lambda lm, seq_len: None
    ids = torch.load(args.ids, weights_only=True)  # (N, T) token ids, BOS first
    run, scores = make_job(args.method, lm, ids, args.batch)
    for parameter in lm.model.parameters():  # safetensors weights are mapped lazily: page them in now, so
        parameter.sum()  # that "extra" is the job's memory, not the weights' first touch
    gc.collect()
    rss_loaded, maxrss_loaded = psutil.Process().memory_info().rss, max_rss_bytes()
    seconds, cpu_seconds, extras = [], [], {}
    with PeakRSS() as sampler:
        if args.warmup:
            run(ids[: args.batch])  # one batch of the same shape
        for _ in range(args.repeats):
            started, cpu_started = time.perf_counter(), time.process_time()
            extras = run(ids)
            seconds.append(time.perf_counter() - started)
            cpu_seconds.append(time.process_time() - cpu_started)
    maxrss_job = max_rss_bytes()
    peak = max(sampler.peak, maxrss_job if maxrss_job > maxrss_loaded else 0)
    N, T = ids.shape
    return {
        "method": args.method,
        "seq_len": T,
        "windows": N,
        "batch": args.batch,
        "layers": len(lm.layers),
        "heads": lm.layout.n_heads,
        "threads": torch.get_num_threads(),
        "seconds": seconds,
        "tokens_per_second": N * T / statistics.median(seconds),
        "cpu_seconds": cpu_seconds,
        "tokens_per_cpu_second": N * T / statistics.median(cpu_seconds),
        "rss_loaded": rss_loaded,
        "rss_peak": peak,
        "extra_rss": peak - rss_loaded,
        **extras,
        "scores": scores(),
        "torch": torch.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--method", choices=METHODS, required=True)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--ids", required=True, help="a torch.save'd LongTensor (N, T) of token windows")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=1, help="1: run one batch before timing; 0: don't")
    parser.add_argument("--layers", type=int, default=0, help="keep only the first N decoder layers (0: all)")
    parser.add_argument("--beyond-context", action="store_true",
                        help="let sinkscope run windows longer than the model's context (to time and size them only)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(json.dumps(measure(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

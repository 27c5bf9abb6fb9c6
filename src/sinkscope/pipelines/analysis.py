"""The analysis pipeline: stream windows through the base model, reduce attention as it is computed, tabulate.

`analyze(lm, windows)` feeds every forward pass to the streaming statistics of SPEC §2–§5 (`statistics/`, through
`capture.feed.Feed`), joins their tables and returns a `Run` whose tables are those of SPEC §8.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import torch

from sinkscope.capture import fused_cpu
from sinkscope.capture.attention import PATH_CALLS, attention_precision
from sinkscope.capture.feed import Feed
from sinkscope.capture.gate import output_gate_hooks
from sinkscope.corpus.windows import TokenWindows, Windows
from sinkscope.errors import SinkscopeError
from sinkscope.functional.head_classes import HeadThresholds
from sinkscope.models.families import require_softmax_layers, softmax_layers
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.checkpoint import checkpoint_order, load_checkpoint, save_checkpoint
from sinkscope.pipelines.linear_layers import mark_linear_layers
from sinkscope.pipelines.run import Run
from sinkscope.pipelines.time_estimate import time_estimate
from sinkscope.provenance import package_versions
from sinkscope.statistics.bos_geometry import BosGeometry
from sinkscope.statistics.certificates import HalfSpaceCertificates
from sinkscope.statistics.key_tokens import KeyTokens
from sinkscope.statistics.learned_sink import LearnedSinkScores
from sinkscope.statistics.massive_activations import MassiveActivations
from sinkscope.statistics.output_gate import OutputGates
from sinkscope.statistics.pattern_scores import PatternScores
from sinkscope.statistics.smoothing_curves import LAMBDAS, SmoothingCurves
from sinkscope.statistics.statistic import Statistic, Tables
from sinkscope.statistics.switch_counts import SwitchCounts
from sinkscope.statistics.window_sink_rate import WindowSinkRate
from sinkscope.statistics.window_summary import WindowSummary
from sinkscope.threads import threads_for_call


@dataclass(frozen=True)
class AnalyzeConfig:
    """Thresholds of an analysis (SPEC §2–§4). `epsilon`: sink-rate threshold (Gu et al.: 0.3); `delta`:
    hard-pattern threshold; `tau`: switch threshold; `geometry_cap`: attention inputs sampled per layer for the
    half-space certificates; `seed`: that sample's seed; `epsilons`: more sink-rate thresholds counted in the
    same pass (summary `sink_rates`), so an ε sweep needs one pass and no per-window storage. `diagonal`,
    `previous`, `dense`, `learned_sink` (None: ε): the head-class thresholds (`head_thresholds`);
    `attention_precision`: the flex path's (CUDA) "exact" (float32) or "model" (the model's dtype; `capture.flex`)."""

    epsilon: float = 0.3
    delta: float = 0.1
    tau: float = 0.1
    geometry_cap: int = 256
    seed: int = 0
    epsilons: tuple[float, ...] = ()
    diagonal: float = HeadThresholds.diagonal
    previous: float = HeadThresholds.previous
    dense: float = HeadThresholds.dense
    learned_sink: float | None = None
    attention_precision: str = "exact"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilons", tuple(float(e) for e in self.epsilons))
        for name, value in [("epsilon", self.epsilon), ("delta", self.delta), ("tau", self.tau)] + [
            ("epsilons", e) for e in self.epsilons
        ]:
            if not 0 < value < 1:
                raise SinkscopeError(f"--{name} {value} must lie strictly between 0 and 1")
        if self.geometry_cap < 0:
            raise SinkscopeError(f"--geometry-cap {self.geometry_cap} must be ≥ 0")
        for flag, value in [("--diag-threshold", self.diagonal), ("--prev-threshold", self.previous),
                            ("--dense-threshold", self.dense), ("--learned-sink-threshold", self.learned_sink)]:
            if value is not None and not 0 <= value <= 1:
                raise SinkscopeError(f"{flag} {value} must lie between 0 and 1 (a share of attention or entropy)")
        if self.attention_precision not in ("exact", "model"):
            raise SinkscopeError(f"--attention-precision {self.attention_precision!r} must be exact or model")

    @property
    def head_thresholds(self) -> HeadThresholds:
        """The thresholds of the head classes (`stats.head_classes`): sink at ε, learned sink at `learned_sink`
        (default ε), and `diagonal`, `previous`, `dense`."""
        learned = self.epsilon if self.learned_sink is None else self.learned_sink
        return HeadThresholds(sink=self.epsilon, diagonal=self.diagonal, previous=self.previous, dense=self.dense,
                              learned_sink=learned)  # fmt: skip

    @property
    def thresholds(self) -> tuple[float, ...]:
        """`epsilon` first, then the other `epsilons` (each once)."""
        return tuple(dict.fromkeys((self.epsilon, *self.epsilons)))


def check_seq_len(lm: LoadedModel, seq_len: int) -> None:
    """A clear error for a window longer than the model's context."""
    limit = lm.max_positions
    if limit is not None and seq_len > limit:
        raise SinkscopeError(f"--seq-len {seq_len} exceeds the model's context of {limit} tokens; use ≤ {limit}")


@torch.no_grad()
def analyze(
    lm: LoadedModel,
    windows: Windows | TokenWindows,
    config: AnalyzeConfig | None = None,
    *,
    progress: bool = True,
    checkpoint_dir: str | Path | None = None,
    checkpoint_every: int = 0,
    resume: bool = False,
    smoothing: bool | Sequence[int] = False,
    threads: int | str | None = "auto",
) -> Run:
    """Per-head and per-layer statistics of a model on a corpus (SPEC §2–§4, §8), streamed over windows.

    Every statistic is a `statistics.Statistic` fed by one `capture.feed.Feed`: `statistics_for` lists them.
    Under `torch.distributed` (e.g. `torchrun`), each rank analyses the windows whose index is its rank modulo
    the world size and the statistics are all-reduced, so every rank returns the result of the whole corpus.
    With `checkpoint_dir` and `checkpoint_every` N, the feed's state is saved every N windows (per rank) and once
    more after the last window; `resume` continues from it. The checkpoint stays until the caller has saved the
    result (`checkpoint.remove_checkpoint`), so a full disk or an interrupt while saving loses no work. `smoothing` (True, or
    the layers to measure) adds the SPEC §5 tables (`SmoothingCurves`) to the same forward passes; like every
    statistic, it is checkpointed and all-reduced. `windows` is only read, never modified.
    `threads`: torch's CPU threads for the call, chosen like the CLI's `--threads` (`sinkscope.threads.threads_for_call`:
    "auto" picks from the machine's load unless a command chose already, N sets N, None leaves torch's count); the
    count and why are in `meta["timings"]` (`threads`, `threads_chosen`), and torch's own count is restored after.
    """
    with threads_for_call(threads) as choice:
        run = _analyze(lm, windows, config, progress=progress, checkpoint_dir=checkpoint_dir,
                       checkpoint_every=checkpoint_every, resume=resume, smoothing=smoothing)  # fmt: skip
    run.meta["timings"]["threads_chosen"] = choice.reason
    return run


def _analyze(
    lm: LoadedModel,
    windows: Windows | TokenWindows,
    config: AnalyzeConfig | None,
    *,
    progress: bool,
    checkpoint_dir: str | Path | None,
    checkpoint_every: int,
    resume: bool,
    smoothing: bool | Sequence[int],
) -> Run:
    """`analyze`'s pass, under the thread count the caller's `threads` chose."""
    from tqdm.auto import tqdm

    asked = config = config or AnalyzeConfig()
    check_seq_len(lm, windows.seq_len)
    require_softmax_layers(lm.family, lm.layers, "analyze")  # before the pass, not a division by zero after it
    rank, world = distributed_shard()
    if resume and checkpoint_dir is not None:  # the same --epsilons in another order: count in the checkpoint's
        config = checkpoint_order(config, Path(checkpoint_dir), rank)
    statistics = statistics_for(lm, windows.seq_len, config, smoothing=smoothing, progress=progress and rank == 0)
    feed = Feed(
        statistics, windows.seq_len, lm.layout.group, config.delta, shard=(rank, world),
        dtype_name=lm.identity.get("dtype", "float32"),
    )  # fmt: skip
    fingerprint = {"config": asdict(config), "model": lm.identity, "corpus": windows.identity(), "world": world}
    fingerprint["corpus"].pop("windows", None)
    if smoothing is not False:
        fingerprint["smoothing"] = smoothing if smoothing is True else list(smoothing)
    skip, saved_sha256 = 0, None
    if resume and checkpoint_dir is not None:
        skip, saved_sha256 = load_checkpoint(feed, Path(checkpoint_dir), rank, fingerprint)
    expected = windows.available()  # fewer than max_windows when the corpus runs out: the bar's true length
    total = None if expected is None else math.ceil(expected / world / windows.batch_size)
    started = time.perf_counter()
    paths_before = Counter(PATH_CALLS)
    analysed, saved, digest = 0, feed.windows, hashlib.sha256()  # digest: token ids of this rank's windows so far
    gate_readers = [s.on_gate for s in statistics if isinstance(s, OutputGates)]
    left = None if total is None else max(1, total - skip // windows.batch_size)  # batches still to run
    estimate = time_estimate(lm.layers, left, enabled=progress and rank == 0)  # said once, if a minute or more
    with feed.hooks(lm), output_gate_hooks(lm, gate_readers), attention_precision(config.attention_precision), estimate:
        batches = windows.batches(shard=(rank, world))  # from the first: a resume checks the text it skips
        bar = tqdm(batches, total=total, desc="analyze", unit="batch", disable=not progress or rank != 0)
        for batch in bar:
            if analysed < skip:  # analysed before the checkpoint: only their token ids are read, and must match
                taken = batch[: skip - analysed]
                digest.update(_token_bytes(taken))
                analysed += len(taken)
                if analysed == skip:
                    _check_same_text(digest.hexdigest(), saved_sha256, skip, checkpoint_dir, rank, windows)
                batch = batch[len(taken) :]
                if not len(batch):
                    continue
            digest.update(_token_bytes(batch))
            batch = batch.to(lm.device)
            feed.begin_batch(batch)
            lm.base(input_ids=batch, use_cache=False)
            feed.end_batch(len(batch))
            analysed += len(batch)
            if checkpoint_dir is not None and checkpoint_every and analysed % checkpoint_every < len(batch):
                save_checkpoint(feed, Path(checkpoint_dir), rank, fingerprint, digest.hexdigest())
                saved = feed.windows
    if analysed < skip:
        _check_same_text(None, saved_sha256, skip, checkpoint_dir, rank, windows)
    if checkpoint_dir is not None and checkpoint_every and analysed and saved != feed.windows:
        # the whole pass: a failed save of the result redoes no window
        save_checkpoint(feed, Path(checkpoint_dir), rank, fingerprint, digest.hexdigest())
    seconds = time.perf_counter() - started
    if world > 1:
        feed.all_reduce()
    if feed.windows == 0:
        raise SinkscopeError("no window was analysed")
    parts, compute_seconds = {}, {}
    for statistic in statistics:
        compute_started = time.perf_counter()
        parts[statistic.name] = statistic.compute(feed.windows)
        compute_seconds[statistic.name] = time.perf_counter() - compute_started
    mark_linear_layers(parts, statistics, softmax_layers(lm.family, lm.layers), len(lm.layers))
    heads, layers, positions, extra = joined(parts.values())
    corpus = windows.identity() | {"windows": feed.windows, "tokens": windows.tokens()}
    meta = {
        "config": asdict(asked),
        "model": lm.identity,
        "corpus": corpus,
        "versions": package_versions(),
        "timings": {
            "analyze_seconds": seconds,
            "tokens_per_second": (analysed - skip) * world * windows.seq_len / seconds,
            "geometry_seconds": compute_seconds.get("certificates", 0.0),
            "world_size": world,
            "threads": torch.get_num_threads(),  # the CPU threads torch used (--threads, or its default)
            "attention_paths": dict(PATH_CALLS - paths_before),  # layer calls per path (capture.attention)
        },
        "summary": summary(heads, statistic_summaries(parts), config.thresholds),
    }
    if lm.device.type == "cpu":  # which CPU kernel could run: the compiled one, or why not (then the rows path)
        meta["timings"]["compiled_kernel"] = fused_cpu.why_unavailable() or "available"
    for key in ("sink_rates", "sink_rates_of_mean"):  # listed in the order asked for, whatever order was counted in
        meta["summary"][key] = {str(e): meta["summary"][key][str(e)] for e in asked.thresholds}
    run = Run(meta=meta, heads=heads, layers=layers, positions=positions, extra=extra)
    if "smoothing" in parts:
        from sinkscope.report.smoothing_section import smoothing_summary

        run.meta["smoothing"] = {"lambdas": list(LAMBDAS), **smoothing_summary(parts["smoothing"].heads)}
    return run


def _token_bytes(batch: torch.Tensor) -> bytes:
    """The token ids of `batch` (B, T) as int64 bytes, row after row: what `windows_sha256` hashes."""
    return batch.to(device="cpu", dtype=torch.int64).contiguous().numpy().tobytes()


def _check_same_text(
    sha256: str | None, saved: str | None, skip: int, checkpoint_dir, rank: int, windows: Windows | TokenWindows
) -> None:
    """Refuse to resume when the first `skip` windows now are not those the checkpoint analysed (by content)."""
    from sinkscope.pipelines.checkpoint import checkpoint_file

    if sha256 is not None and sha256 == saved:
        return
    now = "fewer windows" if sha256 is None else "other token ids"
    raise SinkscopeError(
        f"checkpoint {checkpoint_file(Path(checkpoint_dir), rank)} was computed on other text: the first {skip} "
        f"windows of {getattr(windows, 'source', 'the corpus')} now have {now} (the corpus or tokenizer changed "
        "since); rerun without --resume"
    )


def statistics_for(
    lm: LoadedModel,
    seq_len: int,
    config: AnalyzeConfig,
    *,
    smoothing: bool | Sequence[int] = False,
    progress: bool = False,
) -> list[Statistic]:
    """The statistics of an analysis, in the order their columns appear: pattern scores (SPEC §2), switches
    (§3), Gu et al.'s per-window sink rate, the learned-sink scores (models with one), BOS geometry, massive activations and, with `geometry_cap` > 0, the half-space certificates
    (§4), the key-token table (§2) and, with `smoothing` (True: every layer; or a list of layers), the
    oversmoothing curves (§5)."""
    L, H, T, device = len(lm.layers), lm.layout.n_heads, seq_len, lm.device
    statistics: list[Statistic] = [
        PatternScores(L, H, T, config.epsilon, device, thresholds=config.head_thresholds),
        SwitchCounts(L, H, T, config.tau, device),
        WindowSinkRate(L, H, T, config.thresholds, device),
        WindowSummary(L, H, T, config.epsilon, device),
        BosGeometry(L, T, device),
        MassiveActivations(L, lm.layout.d_model, device),
    ]
    if lm.family.learned_sink is not None:  # gpt-oss: the learned sink's columns beside the BOS sink's
        statistics.insert(3, LearnedSinkScores(L, H, T, config.epsilon, config.delta, config.tau, device))
    if lm.family.output_gate is not None:  # Qwen3-Next: each head's output gate beside its sink
        statistics.append(OutputGates(L, H, T, device=device))
    if config.geometry_cap > 0:
        statistics.append(HalfSpaceCertificates(config.geometry_cap, config.seed, progress))
    statistics.append(KeyTokens(L, H, T, config.epsilon, lm.tokenizer, device))
    if smoothing is not False:
        statistics.append(SmoothingCurves(lm, seq_len, None if smoothing is True else smoothing))
    return statistics


# The two sink-rate definitions lead the layers and positions tables, as in run directories of every version.
LEADING = {"layers": ["sink_rate", "sink_rate_of_mean"], "positions": ["sink_rate", "sink_rate_of_mean"]}


def joined(parts: Iterable[Tables]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict[str, pd.DataFrame]]:
    """The heads, layers and positions tables (columns of every part, joined on their keys in order, the
    `LEADING` columns first after the keys) and the extra tables of all parts."""
    tables: dict[str, pd.DataFrame | None] = {"heads": None, "layers": None, "positions": None}
    keys = {"heads": ["layer", "head"], "layers": ["layer"], "positions": ["layer", "position"]}
    extra: dict[str, pd.DataFrame] = {}
    for part in parts:
        for name, key in keys.items():
            table = getattr(part, name)
            if table is not None:
                tables[name] = table if tables[name] is None else tables[name].merge(table, on=key, how="left")
        extra |= part.extra
    for name, lead in LEADING.items():
        table = tables[name]
        if table is not None:
            first = keys[name] + [c for c in lead if c in table]
            tables[name] = table[first + [c for c in table.columns if c not in first]]
    return tables["heads"], tables["layers"], tables["positions"], extra


def distributed_shard() -> tuple[int, int]:
    """(rank, world size) of the running `torch.distributed` group, (0, 1) without one."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def statistic_summaries(parts: dict[str, Tables]) -> dict:
    """The model-level numbers of every statistic (`Tables.summary`) in one dict, in the order of the statistics;
    a key that two statistics both set is refused (neither may silently overwrite the other)."""
    merged: dict = {}
    owner: dict[str, str] = {}
    for name, tables in parts.items():
        for key, value in tables.summary.items():
            if key in merged:
                raise SinkscopeError(f"statistics '{owner[key]}' and '{name}' both set the summary number '{key}'; "
                                     "rename it in one of them")  # fmt: skip
            merged[key], owner[key] = value, name
    return merged


# run.json's summary has begun so since 0.1.0: each per-window sink rate beside its threshold-of-mean counterpart.
LEADING_SUMMARY = ("sink_rate", "sink_rate_of_mean", "epsilon", "sink_rates", "sink_rates_of_mean")


def summary(heads: pd.DataFrame, statistics: dict, thresholds: tuple[float, ...]) -> dict:
    """Model-level numbers printed by the CLI and shown first in the report: the statistics' own
    (`statistic_summaries`; `sink_rate`, Gu et al.'s per-window threshold at `thresholds[0]` (SPEC §2), and
    `sink_rates` at every threshold come from `WindowSinkRate`) and those of the heads table: `sink_rate_of_mean` /
    `sink_rates_of_mean` threshold the window-mean sink score of each head instead. Heads without a softmax map
    (linear-attention layers: NaN) are left out. A statistic may not set a key of the heads table's numbers."""
    heads = heads[heads["sink_score"].notna()]
    own = {
        "sink_rate_of_mean": float((heads["sink_score"] > thresholds[0]).mean()),
        "epsilon": thresholds[0],
        "sink_rates_of_mean": {str(e): float((heads["sink_score"] > e).mean()) for e in thresholds},
        "mean_sink_score": float(heads["sink_score"].mean()),
        "mean_diag_score": float(heads["diag_score"].mean()),
        "head_classes": {k: int(v) for k, v in heads["head_class"].value_counts().items()},
    }
    taken = sorted(own.keys() & statistics.keys())
    if taken:
        raise SinkscopeError(f"a statistic sets the summary number(s) {', '.join(taken)}, which the analysis computes "
                             "from the heads table; rename them")  # fmt: skip
    merged = own | statistics
    return {key: merged[key] for key in LEADING_SUMMARY if key in merged} | {
        key: value for key, value in merged.items() if key not in LEADING_SUMMARY
    }

"""BOS-prefixed token windows (SPEC §1), streamed so a corpus of any size costs constant memory.

Documents are tokenized without special tokens and joined with the EOS id between them; the stream is cut into
consecutive non-overlapping chunks of `T-1` tokens, each prefixed with the BOS id. The incomplete tail of n < T-1
tokens is not dropped (`tail="overlap"`, the default): one last window holds the final T-1 tokens of the stream,
so it starts T-1-n tokens early and those are analysed twice (at other positions, in another context); every
window keeps length T, which every statistic's normalisation and the positions table assume. `tail="drop"`
drops the tail instead. A run's corpus identity is source + tokenizer + T + tail + number of windows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from sinkscope.corpus.document_tokens import corpus_tokens
from sinkscope.corpus.sources import TOKEN_CONTROLS, check_source
from sinkscope.errors import SinkscopeError

TAILS = ("overlap", "drop")  # what becomes of the last T-1 > n > 0 tokens of a corpus (module doc)


def default_bos_id(tokenizer) -> int:
    """The tokenizer's BOS id, else its EOS id (SPEC §1)."""
    for token_id in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return int(token_id)
    raise SinkscopeError("the tokenizer has neither a BOS nor an EOS token; pass --bos-id")


@dataclass
class Windows:
    """A re-iterable stream of BOS-prefixed windows of `seq_len` token ids.

    Iterating yields `LongTensor[B, seq_len]` batches; `count` is the number of windows of the corpus the last
    complete iteration went through (the stream is lazy, so it is known only afterwards). `batches(shard, skip)`
    iterates one data-parallel shard, or resumes. `tail` is one of `TAILS` (module doc); after an iteration,
    `tokens()` says how many tokens were read, analysed twice and dropped.
    """

    source: str
    tokenizer: object
    seq_len: int
    max_windows: int | None = None
    bos_id: int | None = None
    batch_size: int = 8
    seed: int = 0
    count: int = 0
    tail: str = "overlap"

    def __post_init__(self) -> None:
        if self.tail not in TAILS:
            raise SinkscopeError(f"--tail {self.tail!r} is not one of {', '.join(TAILS)}")
        if self.seq_len < 2:
            raise SinkscopeError(f"--seq-len {self.seq_len} is too short: a window needs BOS plus at least 1 token")
        if self.max_windows is not None and self.max_windows < 1:
            raise SinkscopeError(f"--max-windows {self.max_windows} must be at least 1")
        if self.batch_size < 1:
            raise SinkscopeError(f"--batch-size {self.batch_size} must be at least 1")
        if self.bos_id is None:
            self.bos_id = default_bos_id(self.tokenizer)
        check_source(self.source)

    def __iter__(self) -> Iterator[torch.Tensor]:
        return self.batches()

    def batches(self, shard: tuple[int, int] = (0, 1), skip: int = 0) -> Iterator[torch.Tensor]:
        """Batches of the windows whose index is `rank` modulo `world` (`shard = (rank, world)`), after the first
        `skip` of them (analysed before a resume)."""
        self.count, self._complete = 0, False
        rank, world = shard
        mine = 0
        batch: list[torch.Tensor] = []
        for window in self._windows():
            index = self.count
            self.count += 1
            if index % world == rank:
                mine += 1
                if mine > skip:
                    batch.append(window)
            if len(batch) == self.batch_size:
                yield torch.stack(batch)
                batch = []
            if self.max_windows is not None and self.count >= self.max_windows:
                break
        else:
            self._complete = True
        if batch:
            yield torch.stack(batch)
        if self.count == 0:
            raise SinkscopeError(
                f"corpus '{self.source}' gave {self._tokens_seen} tokens; one window of --seq-len {self.seq_len} "
                f"needs {self.seq_len - 1}: use a larger corpus, a smaller --seq-len, or --seq-len whole (one "
                f"window of {self._tokens_seen + 1})"
            )

    def tokens(self) -> dict:
        """What the last iteration read: `read` tokens of the corpus (EOS separators included), `windows`, `overlap`
        (tokens of the last window that the window before already held), `dropped` (the tail, with `tail="drop"`)
        and `complete` (whether it reached the corpus's end rather than `max_windows`; an endless control never
        does). `analysed` = read − dropped (every one of them once, `overlap` of them twice)."""
        complete = getattr(self, "_complete", False) or getattr(self, "_at_tail", False)
        read, overlap, dropped = getattr(self, "_tokens_seen", 0), getattr(self, "_overlap", 0), 0
        if complete and self.tail == "drop":
            dropped = getattr(self, "_tail", 0)
        return {"read": read, "analysed": read - dropped, "overlap": overlap, "dropped": dropped,
                "windows": self.count, "complete": complete}  # fmt: skip

    def available(self) -> int | None:
        """How many windows this stream will give: `max_windows`, or fewer when the corpus runs out first (counted
        by tokenizing it up to that point, which stops at `max_windows`); None when unknown without reading it
        all: no `max_windows` (a local corpus is not tokenized twice to count) or a streamed `hf:` dataset."""
        if self.max_windows is None or self.source.startswith("hf:"):
            return None
        if self.source in TOKEN_CONTROLS:
            return self.max_windows
        key = (self.source, self.seq_len, self.max_windows, self.bos_id)
        if getattr(self, "_available", (None, None))[0] != key:  # counted once per setting (CLI, then analyze)
            count = 0
            for _ in self._windows():
                count += 1
                if count >= self.max_windows:
                    break
            else:
                self._complete = True  # the corpus ran out first: `tokens()` knows its tail
            self._available = (key, count)
        return self._available[1]

    def identity(self) -> dict:
        """Corpus identity recorded in run.json (SPEC §1)."""
        return {
            "source": self.source,
            "tokenizer": getattr(self.tokenizer, "name_or_path", type(self.tokenizer).__name__),
            "seq_len": self.seq_len,
            "windows": self.count,
            "max_windows": self.max_windows,
            "bos_id": self.bos_id,
            "seed": self.seed,
            "tail": self.tail,
        }

    def _windows(self) -> Iterator[torch.Tensor]:
        body = self.seq_len - 1
        self._tokens_seen, self._overlap, self._tail, self._at_tail = 0, 0, 0, False
        if self.source in TOKEN_CONTROLS:
            yield from self._control_windows(body)
            return
        buffer: list[int] = []
        last: list[int] = []  # the body of the last full window: the overlap of a tail window comes from it
        for ids in corpus_tokens(self.source, self.tokenizer):  # read and tokenized only as far as windows are taken
            buffer.extend(ids)
            while len(buffer) >= body:
                self._tokens_seen += body
                last = buffer[:body]
                yield torch.tensor([self.bos_id, *last], dtype=torch.long)
                del buffer[:body]
        self._tokens_seen += len(buffer)
        self._tail = len(buffer)
        if buffer and last and self.tail == "overlap":  # the final T-1 tokens: no token is left out
            self._overlap, self._at_tail = body - len(buffer), True  # the corpus's end, even if max_windows stops here
            yield torch.tensor([self.bos_id, *(last + buffer)[-body:]], dtype=torch.long)

    def _control_windows(self, body: int) -> Iterator[torch.Tensor]:
        """Gu et al. 2025's controls: uniform random ordinary tokens, or one ordinary token repeated."""
        if self.max_windows is None:
            raise SinkscopeError(f"corpus '{self.source}' is endless: pass --max-windows")
        special = set(self.tokenizer.all_special_ids)
        ordinary = torch.tensor([i for i in range(len(self.tokenizer)) if i not in special], dtype=torch.long)
        generator = torch.Generator().manual_seed(self.seed)
        while True:
            if self.source == "builtin:random":
                tokens = ordinary[torch.randint(len(ordinary), (body,), generator=generator)]
            else:
                tokens = ordinary[torch.randint(len(ordinary), (1,), generator=generator)].expand(body)
            self._tokens_seen += body
            yield torch.cat([torch.tensor([self.bos_id]), tokens])


def windows(
    corpus: str,
    tokenizer,
    seq_len: int,
    max_windows: int | None = None,
    *,
    bos_id: int | None = None,
    batch_size: int = 8,
    seed: int = 0,
    tail: str = "overlap",
) -> Windows:
    """BOS-prefixed windows of a corpus (SPEC §1); iterate to get `LongTensor[B, seq_len]` batches. `tail`:
    "overlap" (a last window of the final T-1 tokens, so none is dropped) or "drop" (module doc)."""
    return Windows(corpus, tokenizer, seq_len, max_windows, bos_id, batch_size, seed, tail=tail)


def corpus_length(corpus: str, tokenizer) -> int:
    """The tokens of a text corpus as windows read them (documents without special tokens, EOS between them):
    `--seq-len whole` makes one window of this many tokens plus BOS. Reads the whole corpus, a chunk at a time."""
    check_source(corpus)
    if corpus in TOKEN_CONTROLS:
        raise SinkscopeError(f"corpus '{corpus}' is endless: --seq-len whole needs a text corpus; pass --seq-len N")
    return sum(map(len, corpus_tokens(corpus, tokenizer)))


@dataclass
class TokenWindows:
    """Windows already tokenized: `ids` (N, T) token ids, each row starting with its BOS; same interface as
    `Windows` (iterate for `LongTensor[B, T]` batches)."""

    ids: torch.Tensor
    batch_size: int = 8
    source: str = "tensor"

    def __post_init__(self) -> None:
        if self.ids.dim() != 2 or self.ids.shape[1] < 2 or self.ids.shape[0] < 1:
            raise SinkscopeError(f"token windows must have shape (N ≥ 1, T ≥ 2), got {tuple(self.ids.shape)}")
        self.ids = self.ids.long()

    @property
    def seq_len(self) -> int:
        return self.ids.shape[1]

    @property
    def max_windows(self) -> int:
        return self.ids.shape[0]

    @property
    def count(self) -> int:
        return self.ids.shape[0]

    def available(self) -> int:
        """As `Windows.available`: every row."""
        return self.ids.shape[0]

    def __iter__(self) -> Iterator[torch.Tensor]:
        return self.batches()

    def batches(self, shard: tuple[int, int] = (0, 1), skip: int = 0) -> Iterator[torch.Tensor]:
        """As `Windows.batches`: one shard's windows, after the first `skip`."""
        rank, world = shard
        yield from self.ids[rank::world][skip:].split(self.batch_size)

    def tokens(self) -> dict:
        """As `Windows.tokens`: every row's T-1 tokens after BOS, none dropped."""
        read = self.ids.shape[0] * (self.seq_len - 1)
        return {"read": read, "analysed": read, "overlap": 0, "dropped": 0, "windows": self.count, "complete": True}

    def identity(self) -> dict:
        return {"source": self.source, "seq_len": self.seq_len, "windows": self.count, "bos_id": int(self.ids[0, 0])}

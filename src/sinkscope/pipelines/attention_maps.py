"""`sinkscope.attention(lm, text)`: one text's raw attention as arrays, from plain eager `transformers` attention.

No sinkscope capture path is involved: the model runs once with `attn_implementation="eager"` and
`output_attentions=True` (its attention implementation is restored afterwards), so the maps are exactly what
`transformers` returns. The text is tokenized as `sinkscope view` and a corpus window are (BOS first, documents
joined with EOS; `sinkscope.explorer.capture.text_ids`), and the per-head scores are those of
`docs/statistics.md` (`sinkscope.stats.patterns`) computed on this one text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from sinkscope.corpus.sources import documents
from sinkscope.errors import SinkscopeError
from sinkscope.explorer.capture import check_length, text_ids
from sinkscope.models.load import LoadedModel
from sinkscope.stats.patterns import (
    diag_score,
    entropy_score,
    hard_diag_frac,
    hard_sink_frac,
    head_class,
    prev_score,
    sink_score,
)


@dataclass
class AttentionMaps:
    """One text's attention.

    `ids` (T,) int64 and `tokens` (each id decoded alone), BOS first; `maps` (L, H, T, T) float32, every head's
    causal attention (rows = queries t, columns = keys j; zero above the diagonal); `scores` {name: (L, H)
    float64}: `sink` α = mean_t A[t,0], `diag` mean_{t≥1} A[t,t], `prev` mean_{t≥1} A[t,t-1], `entropy` mean
    normalised row entropy, `hard_sink` / `hard_diag` the fractions of queries t ≥ 1 with A[t,0] (A[t,t]) ≥ 1-δ;
    `head_class` (L, H) the class of each head on this text (analyze's classifier at ε).
    """

    ids: np.ndarray
    tokens: list[str]
    maps: np.ndarray
    scores: dict[str, np.ndarray]
    head_class: np.ndarray

    def table(self) -> pd.DataFrame:
        """One row per (layer, head): the scores and the class, as `heads.parquet` names them."""
        L, H = self.head_class.shape
        layer, head = np.divmod(np.arange(L * H), H)
        columns = {"layer": layer, "head": head}
        names = {"sink": "sink_score", "diag": "diag_score", "prev": "prev_score", "entropy": "entropy",
                 "hard_sink": "hard_sink_frac", "hard_diag": "hard_diag_frac"}  # fmt: skip
        columns.update({names[name]: values.reshape(-1) for name, values in self.scores.items()})
        columns["head_class"] = self.head_class.reshape(-1)
        return pd.DataFrame(columns)


def attention(
    model: str | LoadedModel,
    text: str | None = None,
    *,
    file: str | Path | None = None,
    seq_len: int | None = None,
    bos_id: int | None = None,
    epsilon: float = 0.3,
    delta: float = 0.1,
    device: str = "cpu",
    dtype: str = "float32",
) -> AttentionMaps:
    """Every head's attention map on one text, its tokens and per-head scores, as arrays (`AttentionMaps`).

    `model`: a `LoadedModel` or anything `sinkscope.load_model` takes. `text` or `file` (split into documents at
    blank lines and joined with EOS, as a corpus window is), BOS-prefixed and cut to `seq_len` tokens (default:
    all, at most 1024: the maps take L·H·T² floats, 1.1 GB for SmolLM2 at T = 1024). `epsilon`/`delta`: analyze's
    sink and hard-pattern thresholds.
    """
    if (text is None) == (file is None):
        raise SinkscopeError("pass exactly one of text or file")
    for name, value in (("epsilon", epsilon), ("delta", delta)):
        if not 0 < value < 1:
            raise SinkscopeError(f"{name} {value} must lie strictly between 0 and 1")
    check_length(seq_len)
    if file is not None:
        path = Path(file).expanduser()
        if not path.is_file():
            raise SinkscopeError(f"file {path} does not exist or is not a file")
        docs = list(documents(str(path)))
    else:
        docs = [text]
    if isinstance(model, str):
        from sinkscope.models.load import load_model

        model = load_model(model, device=device, dtype=dtype)
    ids = text_ids(model.tokenizer, docs, seq_len, bos_id)
    maps = eager_maps(model, ids)
    a = maps.double()
    scores = {"sink": sink_score(a), "diag": diag_score(a), "prev": prev_score(a), "entropy": entropy_score(a),
              "hard_sink": hard_sink_frac(a, delta), "hard_diag": hard_diag_frac(a, delta)}  # fmt: skip
    L, H = a.shape[:2]
    classes = np.array([[head_class(*(float(scores[k][l, h]) for k in ("sink", "diag", "prev", "entropy")), epsilon)
                         for h in range(H)] for l in range(L)])  # fmt: skip
    return AttentionMaps(
        ids=ids.numpy(),
        tokens=[model.tokenizer.decode([int(i)]) for i in ids],
        maps=maps.numpy(),
        scores={name: value.numpy() for name, value in scores.items()},
        head_class=classes,
    )


@torch.no_grad()
def eager_maps(lm: LoadedModel, ids: torch.Tensor) -> torch.Tensor:
    """(L, H, T, T) float32 attention of the sequence `ids` (T,) from the model's own eager attention
    (`output_attentions=True`); the model's attention implementation is set back afterwards."""
    limit = lm.max_positions
    if limit is not None and ids.shape[0] > limit:
        raise SinkscopeError(f"{ids.shape[0]} tokens exceed the model's context of {limit}; pass seq_len ≤ {limit}")
    previous = lm.model.config._attn_implementation
    try:
        lm.model.set_attn_implementation("eager")
        out = lm.base(input_ids=ids[None].to(lm.device), output_attentions=True, use_cache=False)
    finally:
        lm.model.set_attn_implementation(previous)
    return torch.stack([layer[0].float().cpu() for layer in out.attentions])

"""`sinkscope.attention(lm, text)`: one text's raw attention as arrays, from plain eager `transformers` attention.

No sinkscope attention path is involved: the model runs once with `attn_implementation="eager"` and
`output_attentions=True` (its attention implementation is restored afterwards), so the maps are exactly what
`transformers` returns. That one pass is `sinkscope.capture.text_maps.capture_text`, which `sinkscope view` builds
its page on too (`attention_from_capture` gives the page's per-head scores and classes), so the page and these
arrays cannot differ. The text is tokenized as a corpus window is (BOS first, documents joined with EOS;
`text_ids`), and the per-head scores are those of `docs/statistics.md` (`sinkscope.functional.patterns`) computed on
this one text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from sinkscope.capture.text_maps import TextCapture, capture_text, check_length, file_ids, text_ids
from sinkscope.corpus.sources import check_source, check_text
from sinkscope.errors import SinkscopeError
from sinkscope.functional.patterns import (
    diag_score,
    entropy_score,
    hard_diag_frac,
    hard_sink_frac,
    head_class,
    prev_score,
    sink_score,
)
from sinkscope.models.load import LoadedModel, check_bos_id


@dataclass
class AttentionMaps:
    """One text's attention.

    `ids` (T,) int64 and `tokens` (each id decoded alone), BOS first; `maps` (L, H, T, T) float32, every head's
    causal attention (rows = queries t, columns = keys j; zero above the diagonal); `scores` {name: (L, H)
    float64}: `sink` α = mean_t A[t,0], `diag` mean_{t≥1} A[t,t], `prev` mean_{t≥1} A[t,t-1], `entropy` mean
    normalised row entropy, `hard_sink` / `hard_diag` the fractions of queries t ≥ 1 with A[t,0] (A[t,t]) ≥ 1-δ;
    `head_class` (L, H) the class of each head on this text (analyze's classifier at ε). A layer without a softmax
    map (Qwen3-Next's linear-attention layers) has NaN maps and scores and the class "linear".
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
    check_bos_id(None, bos_id)  # a negative id before the model loads, one beyond the vocabulary after
    if file is not None:
        path = Path(file).expanduser()
        if not path.is_file():
            raise SinkscopeError(f"file {path} does not exist or is not a file")
        check_source(str(path))  # its start is text: before the model loads
    else:
        text = check_text(text)
    if isinstance(model, str):
        from sinkscope.models.load import load_model

        model = load_model(model, device=device, dtype=dtype)
    check_bos_id(model, bos_id)
    if file is not None:
        ids = file_ids(model.tokenizer, path, seq_len, bos_id)
    else:
        ids = text_ids(model.tokenizer, [text], seq_len, bos_id)
    return attention_from_capture(model.tokenizer, capture_text(model, ids), epsilon, delta)


def head_scores(attn: torch.Tensor, delta: float) -> dict[str, torch.Tensor]:
    """The per-head scores of docs/statistics.md on one text's maps `attn` (L, H, T, T) float64 → {name: (L, H)}."""
    return {"sink": sink_score(attn), "diag": diag_score(attn), "prev": prev_score(attn),
            "entropy": entropy_score(attn), "hard_sink": hard_sink_frac(attn, delta),
            "hard_diag": hard_diag_frac(attn, delta)}  # fmt: skip


def head_classes(scores: dict[str, torch.Tensor], epsilon: float) -> np.ndarray:
    """(L, H) head class of each head from its `head_scores` (analyze's classifier at the sink threshold ε)."""
    L, H = scores["sink"].shape
    return np.array([[head_class(*(float(scores[k][l, h]) for k in ("sink", "diag", "prev", "entropy")), epsilon)
                      for h in range(H)] for l in range(L)])  # fmt: skip


def token_texts(tokenizer, ids: torch.Tensor) -> list[str]:
    """Each token's own text (`decode` of the single id)."""
    return [tokenizer.decode([int(i)]) for i in ids]


def attention_from_capture(tokenizer, capture: TextCapture, epsilon: float, delta: float) -> AttentionMaps:
    """`AttentionMaps` of one `capture_text` pass: its maps, tokens, scores and classes."""
    linear = capture.attn.flatten(1).isnan().all(1)  # layers without a softmax map: NaN maps, scores
    scores = {k: v.masked_fill(linear[:, None], torch.nan) for k, v in head_scores(capture.attn.double(), delta).items()}
    classes = np.where(linear[:, None].numpy(), "linear", head_classes(scores, epsilon))
    return AttentionMaps(
        ids=capture.ids.numpy(),
        tokens=token_texts(tokenizer, capture.ids),
        maps=capture.attn.numpy(),
        scores={name: value.numpy() for name, value in scores.items()},
        head_class=classes,
    )

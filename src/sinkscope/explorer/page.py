"""`sinkscope.view`: one text's attention as a self-contained HTML page (no network, works from file://).

Code builds the data; the template `view.html.j2` of the one page builder (`sinkscope.report.page`) builds the
markup and holds the inline JS.
Per head the page shows the SPEC §2 scores and head class of `sinkscope.functional.patterns` (same thresholds as
`analyze`) computed from the full-precision maps of this one text; per layer the BOS geometry of SPEC §4
(`sinkscope.functional.geometry`) and the MLP-like fraction of SPEC §3; the maps themselves are embedded quantised
(`sinkscope.explorer.quantise`: every causal entry to within 7.6e-6). A layer without a softmax map (Qwen3-Next's
linear-attention layers: NaN maps in the capture) is listed in `linear_layers`; the page labels its row
"linear attention: no softmax map" and keeps no map or score for it; its heads get the class `linear`, as in
`sinkscope.attention`.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from sinkscope.capture.text_maps import TextCapture, capture_text, check_length, file_ids, text_ids
from sinkscope.corpus.sources import check_source, check_text
from sinkscope.errors import SinkscopeError
from sinkscope.explorer.quantise import BITS, levels, quant_error, quantise_maps
from sinkscope.functional.geometry import bos_cosine, bos_norm_ratio
from sinkscope.functional.patterns import (
    HEAD_CLASS_THRESHOLDS,
    hard_sink_frac,
    pattern_block_sums,
    sink_score,
)
from sinkscope.functional.switch import value_drain
from sinkscope.models.families import require_softmax_layers
from sinkscope.models.load import LoadedModel, check_bos_id
from sinkscope.pipelines.attention_maps import head_classes, head_scores, token_texts
from sinkscope.report.page import render_page
from sinkscope.staging import check_file_target

TOP_SINKS = 3  # strongest non-BOS keys marked per head
# The automatic colour scale of a map is logarithmic when its median entry is below this share of its largest:
# on a linear scale more than half the map would then be drawn within 5% of white (a dense head on 256 tokens).
LOG_WHEN_MEDIAN_BELOW = 0.05
LOG_DECADES = 3  # a log scale spans [largest · 10^-3, largest]
# A key's `received` averages over its later tokens; keys near the end have a few readers and would win by chance,
# so the marked keys are those with at least this many readers (fewer in a short text: half of it).
MIN_READERS = 16
DEFAULT_BITS = 8  # SmolLM2 on 256 tokens: 2.5 MB (16 bits: 11.4 MB), see docs/view.md


def display_decimals(bits: int) -> int:
    """Decimals the page prints: enough that display rounding adds at most half the quantisation error
    (8 bits: 3, 12: 4, 16: 6)."""
    return math.floor(-math.log10(quant_error(bits))) + 1


def shown_error(bits: int) -> float:
    """Bound on |number the page prints - the model's attention|: quantisation plus display rounding."""
    return quant_error(bits) + 0.5 * 10 ** -display_decimals(bits)


@dataclass
class ViewPage:
    """A rendered page: `html` (the whole self-contained document) and where it was written, if anywhere."""

    html: str
    n_tokens: int
    path: Path | None = None

    @property
    def size_bytes(self) -> int:
        return len(self.html.encode("utf-8"))

    def save(self, path: str | Path) -> Path:
        """Write the page whole or not at all (`staging.staged_file`: staged, then renamed); a file that is not a
        sinkscope page, a directory or a full disk is one clear error and leaves what was there."""
        from sinkscope.staging import staged_file

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with staged_file(path) as tmp:
            tmp.write_text(self.html, encoding="utf-8")
        self.path = Path(path)
        return self.path

    def _repr_html_(self) -> str:
        """Notebooks show the page in an iframe (its scripts run there as from a file)."""
        return f'<iframe srcdoc="{html.escape(self.html)}" style="width:100%;height:900px;border:0"></iframe>'


def received_scores(attn: Tensor) -> Tensor:
    """SPEC §2 key-token `received_k = mean_{t=k+1..T-1} A[t,k]` for keys k = 1..T-2. (..., T, T) → (..., T-2)."""
    T = attn.shape[-1]
    below = attn.tril(-1).sum(-2)[..., 1 : T - 1]  # Σ_{t>k} A[t,k]
    return below / torch.arange(T - 2, 0, -1, dtype=attn.dtype, device=attn.device)


def linear_layers(attn: Tensor) -> list[int]:
    """The layers without a softmax map: their maps in the capture are NaN throughout (`capture_text`)."""
    return attn.flatten(1).isnan().all(1).nonzero().flatten().tolist()


def head_table(attn: Tensor, value_norms: Tensor, epsilon: float, delta: float) -> list[list[dict]]:
    """Per (layer, head) of one text: the scores and head class of `sinkscope.attention` (the same functions,
    `pipelines.attention_maps.head_scores` / `head_classes`), the value drain and the strongest non-BOS keys
    (largest `received`, among keys with at least `MIN_READERS` later tokens). A linear-attention layer's heads:
    class `linear`, scores NaN (shown as a dash), no keys."""
    a = attn.double()
    linear = set(linear_layers(attn))
    no_map = torch.tensor([layer in linear for layer in range(a.shape[0])])[:, None]  # (L, 1)
    scores = {name: value.masked_fill(no_map, torch.nan)
              for name, value in {**head_scores(a, delta), "value_drain": value_drain(value_norms.double())}.items()}
    classes = head_classes(scores, epsilon)
    T = a.shape[-1]
    readers = min(MIN_READERS, (T - 1) // 2)
    received = received_scores(a)[..., : max(0, T - 1 - readers)]  # keys k = 1.. with ≥ `readers` later tokens
    top = received.topk(min(TOP_SINKS, received.shape[-1]), dim=-1)
    L, H = a.shape[:2]
    table = []
    for layer in range(L):
        row = []
        for head in range(H):
            cell = {name: round(float(value[layer, head]), 4) for name, value in scores.items()}
            cell["cls"] = "linear" if layer in linear else str(classes[layer, head])
            cell["sinks"] = [] if layer in linear else [
                [int(k) + 1, round(float(v), 4)]
                for k, v in zip(top.indices[layer, head], top.values[layer, head])
            ]  # fmt: skip
            row.append(cell)
        table.append(row)
    return table


def colour_scales(attn: Tensor) -> list[list[dict]]:
    """Per (layer, head): the map's automatic colour scale from its dynamic range. Over the causal entries of the
    queries t ≥ 1 (row 0 is always A[0,0] = 1): `hi` the largest, `median` the median; `log` when median <
    LOG_WHEN_MEDIAN_BELOW · hi, spanning [`lo`, `hi`] with `lo` = hi · 10^-LOG_DECADES; else linear over [0, hi]."""
    L, H, T, _ = attn.shape
    rows, cols = torch.tril_indices(T, T, offset=0)
    keep = rows >= 1
    entries = attn[..., rows[keep], cols[keep]].double()  # (L, H, T(T+1)/2 - 1)
    hi = entries.amax(-1)
    median = entries.quantile(0.5, dim=-1) if entries.shape[-1] < 2**24 else entries.median(-1).values
    scales = []
    for layer in range(L):
        scales.append([{
            "log": bool(median[layer, head] < LOG_WHEN_MEDIAN_BELOW * hi[layer, head]),
            "hi": round(float(hi[layer, head]), 6),
            "lo": round(float(hi[layer, head]) * 10.0**-LOG_DECADES, 9),
            "median": round(float(median[layer, head]), 6),
        } for head in range(H)])  # fmt: skip
    return scales


def opening_head(attn: Tensor, delta: float = 0.1) -> tuple[int, int]:
    """The head the page opens on: the largest sink score α = mean_t A[t,0] among the heads whose map is not one
    BOS column (fewer than half their queries t ≥ 1 put ≥ 1-δ on BOS); among all heads if every head is such a
    pure sink. The first in layer, head order wins a tie. A sink head is the pattern the page is about; a pure
    one shows a single dark column and nothing else, and layer 0 head 0 is often a dense, near-blank map.
    Linear-attention layers (NaN maps) are never opened on."""
    a = attn.double()
    linear = a.isnan().flatten(2).all(-1)  # (L, H)
    alpha = sink_score(a).masked_fill(linear, -2.0)  # (L, H)
    structured = (hard_sink_frac(a, delta) < 0.5) & ~linear
    if structured.any():
        alpha = alpha.masked_fill(~structured, -1.0)
    index = int(alpha.flatten().argmax())
    return divmod(index, alpha.shape[1])


def finite(value):
    """`value` with every NaN or ±inf float (a value drain of zero values, a cosine of a zero vector) replaced by
    None, so the page's JSON is valid (JSON has no NaN) and shows a dash there."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def script_json(data: dict) -> str:
    """`data` as JSON that is safe inside a `<script>` element in every HTML parser state: every "<" is written
    as the escape \\u003c, so no "</script", "<script" or "<!--" (which would end the element or switch the
    parser into its escaped states) can appear, whatever a model name or token holds; JSON.parse reads the same
    string back. Non-finite numbers must have been replaced (`finite`): they are refused here."""
    try:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError as err:
        raise SinkscopeError(f"the view page's data holds a non-finite number ({err}); this is a bug in sinkscope") from err
    return text.replace("<", "\\u003c")


def layer_table(capture: TextCapture, delta: float) -> list[dict]:
    """Per layer of one text: BOS cosine of z and norm ratio of h (SPEC §4), and the MLP-like tokens (SPEC §3):
    queries t ≥ 1 at which every head is hard-sink or hard-diagonal (none, and `mlp_like` NaN, for a
    linear-attention layer: it has no map to read them from)."""
    cos = bos_cosine(capture.z).double()  # (L, T-1)
    ratio_h, ratio_z = bos_norm_ratio(capture.h), bos_norm_ratio(capture.z)
    linear = set(linear_layers(capture.attn))
    rows = []
    for layer in range(capture.attn.shape[0]):
        _, hard_sink, hard_diag = pattern_block_sums(capture.attn[layer][None], 0, delta)
        mlp = (hard_sink | hard_diag).all(dim=1)[0]  # (T,), false at t = 0
        rows.append({
            "cos_z_mean": round(float(cos[layer].mean()), 4),
            "cos_z_max": round(float(cos[layer].max()), 4),
            "cos_z_nonpos": round(float((cos[layer] <= 0).double().mean()), 4),
            "norm_ratio_h": round(float(ratio_h[layer]), 3),
            "norm_ratio_z": round(float(ratio_z[layer]), 3),
            "mlp_like": math.nan if layer in linear else round(float(mlp[1:].double().mean()), 4),
            "mlp_tokens": [] if layer in linear else mlp.nonzero().flatten().tolist(),
        })  # fmt: skip
    return rows


def page_data(lm: LoadedModel, capture: TextCapture, epsilon: float, delta: float, bits: int) -> dict:
    """Everything the page shows except the maps, as JSON-ready values."""
    L, H, T, _ = capture.attn.shape
    layer, head = opening_head(capture.attn, delta)
    return {
        "model": {k: v for k, v in lm.identity.items() if isinstance(v, str | int | float)},
        "open": {"layer": layer, "head": head},
        "scales": colour_scales(capture.attn),
        "n_layers": L,
        "n_heads": H,
        "n_tokens": T,
        "linear_layers": linear_layers(capture.attn),
        "ids": capture.ids.tolist(),
        "tokens": token_texts(lm.tokenizer, capture.ids),
        "heads": head_table(capture.attn, capture.value_norms, epsilon, delta),
        "layers": layer_table(capture, delta),
        "thresholds": {"epsilon": epsilon, "delta": delta, **HEAD_CLASS_THRESHOLDS},
        "quant": {"bits": bits, "levels": levels(bits), "error": quant_error(bits),
                  "decimals": display_decimals(bits), "shown_error": shown_error(bits)},
    }


def render(data: dict, maps: str) -> str:
    """The page: the template with `data` as JSON (`data["quant"]["offsets"]` locating each head's stream in
    `maps`) and the quantised maps as base64. The builder escapes every text of the markup (token texts and model
    names are arbitrary); the JSON is escaped for the script element (`script_json`); non-finite numbers become
    null (`finite`), shown as a dash."""
    data = finite(data)
    return render_page("view.html.j2", data=data, data_json=script_json(data), maps=maps)


def _check_args(text: str | None, file: str | Path | None, epsilon: float, delta: float, bits: int) -> str | Path:
    if (text is None) == (file is None):
        raise SinkscopeError("pass exactly one of --text or --file")
    if bits not in BITS:
        raise SinkscopeError(f"--bits {bits} must be one of {', '.join(map(str, BITS))}")
    for name, value in (("epsilon", epsilon), ("delta", delta)):
        if not 0 < value < 1:
            raise SinkscopeError(f"--{name} {value} must lie strictly between 0 and 1")
    if text is not None:
        return check_text(text, "--text")
    path = Path(file).expanduser()
    if not path.is_file():
        raise SinkscopeError(f"--file {path} does not exist or is not a file")
    check_source(str(path))  # its start is text: before the model loads
    return path


def check_softmax_layers(lm: LoadedModel) -> None:
    """A clear error for a model none of whose layers has a softmax attention map: the page would have no map to
    draw (a model with some linear-attention layers, as Qwen3-Next, is drawn with those layers labelled)."""
    require_softmax_layers(lm.family, lm.layers, "view")


def view(
    model: str | LoadedModel,
    text: str | None = None,
    *,
    file: str | Path | None = None,
    seq_len: int | None = None,
    out: str | Path | None = None,
    bos_id: int | None = None,
    epsilon: float = 0.3,
    delta: float = 0.1,
    device: str = "cpu",
    dtype: str = "float32",
    bits: int = DEFAULT_BITS,
) -> ViewPage:
    """An interactive page of one text's attention (every head's map, head classes, BOS geometry per layer).

    `model`: a `LoadedModel` or anything `sinkscope.load_model` takes. `text` or `file` (a text file is split
    into documents at blank lines and joined with EOS, as a corpus window is); the text is BOS-prefixed and cut
    to `seq_len` tokens (default: all, at most 1024). `epsilon`/`delta`: the sink and hard-pattern thresholds of
    `analyze`. `bits` (8, 12 or 16): the maps' quantisation, each entry within `quant_error(bits)` of the model's
    attention (8: 2.0e-3, 12: 1.2e-4, 16: 7.6e-6, for a page about 2.5×, 4.6× as large). Writes the page to
    `out` when given. See docs/view.md.
    """
    source = _check_args(text, file, epsilon, delta, bits)  # the text, or the file's path (read after the model loads)
    check_length(seq_len)
    check_bos_id(None, bos_id)  # before the model loads, what can be known then
    if out is not None:
        check_file_target(out)
    if isinstance(model, str):
        from sinkscope.models.load import load_model

        model = load_model(model, device=device, dtype=dtype)
    check_bos_id(model, bos_id)
    check_softmax_layers(model)
    if isinstance(source, Path):
        ids = file_ids(model.tokenizer, source, seq_len, bos_id)
    else:
        ids = text_ids(model.tokenizer, [source], seq_len, bos_id)
    capture = capture_text(model, ids)
    data = page_data(model, capture, epsilon, delta, bits)
    maps, data["quant"]["offsets"] = quantise_maps(capture.attn, bits)
    page = ViewPage(render(data, maps), len(ids))
    if out is not None:
        page.save(out)
    return page

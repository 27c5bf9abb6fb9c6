"""Head ablation hooks: switch chosen attention heads off inside a `with` block (issue 3, part 3).

Two interventions, both on the input of the attention output projection (`o_proj`, GPT-2's `c_proj`), whose
input is the concatenation of the per-head outputs `o_t = Σ_j A[t,j] v_j` (SPEC §3), `dh` columns per head:

- `zero`: the head's slice is set to 0 (its output is switched off exactly — the paper's hard switch);
- `bos`: the slice is set to `v_0`, the value of position 0 of the head's kv group, i.e. the output the head
  would have with all attention on BOS (Guo et al. 2024). `v_0` comes from a forward hook on the value
  projection (GPT-2's fused `c_attn`: the value block follows the query and key blocks).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from torch import Tensor

from sinkscope.capture.head_outputs import edited_head_outputs
from sinkscope.errors import SinkscopeError
from sinkscope.models.load import LoadedModel

Head = tuple[int, int]  # (layer, head)
MODES = ("zero", "bos")


@contextmanager
def head_ablation(lm: LoadedModel, heads: Iterable[Head], mode: str = "zero") -> Iterator[None]:
    """Inside the block, the given heads' outputs are zeroed (`zero`) or replaced by `v_0` (`bos`).

    Hooks: `capture.head_outputs.edited_head_outputs` (and, for `bos`, its value hook); removed on leaving the
    block. Raises if a forward pass of the base model ran but an affected layer was never reached.
    """
    if mode not in MODES:
        raise SinkscopeError(f"ablation mode {mode!r} is not one of {', '.join(MODES)}")
    layout, blocks = lm.layout, lm.layers
    by_layer: dict[int, list[int]] = defaultdict(list)
    for layer, head in heads:
        if not (0 <= layer < len(blocks) and 0 <= head < layout.n_heads):
            raise SinkscopeError(
                f"head {layer}.{head} does not exist: the model has layers 0..{len(blocks) - 1} and heads "
                f"0..{layout.n_heads - 1}"
            )
        by_layer[layer].append(head)
    group = layout.group

    def edit(_layer: int, head: int, output: Tensor, first_values: Tensor | None) -> Tensor:
        if mode == "zero":
            return output.new_zeros(())
        return first_values[:, head // group, None]  # (B, 1, dh): v_0 of the head's kv group, over T

    first_value = None if mode == "zero" else (lambda values: values[:, 0])  # (B, n_kv, dh)
    with edited_head_outputs(lm, by_layer, edit, first_value):
        yield

"""A tiny random Llama with sharpened queries (so heads are far from uniform) and its plain-transformers maps."""

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from .tiny_checkpoint import save_tiny_llama

TEXT = " ".join(f"w{(7 * i) % 61}" for i in range(40))


def save_sharp_llama(directory: Path) -> Path:
    save_tiny_llama(directory)
    model = AutoModelForCausalLM.from_pretrained(directory)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(12.0)  # larger logits: peaked, varied attention
    model.save_pretrained(directory, safe_serialization=True)
    return directory


def eager_attention(directory: Path, text: str, seq_len: int | None = None) -> tuple[list[int], torch.Tensor]:
    """BOS id + the text's tokens and the model's own `output_attentions` (L, H, T, T), independently of sinkscope."""
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager").eval()
    ids = [tokenizer.bos_token_id, *tokenizer(text, add_special_tokens=False)["input_ids"]][:seq_len]
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_attentions=True)
    return ids, torch.stack(out.attentions)[:, 0].double()

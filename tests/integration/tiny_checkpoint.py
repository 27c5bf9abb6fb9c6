"""A tiny random Llama saved as a real Hugging Face model directory (safetensors + fast tokenizer) and a corpus."""

import random
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

WORDS = ["<bos>", "<eos>", "<unk>", *[f"w{i}" for i in range(61)]]


def save_tiny_llama(directory: Path) -> Path:
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", eos_token="<eos>",
                                        unk_token="<unk>")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         bos_token_id=0, eos_token_id=1)
    model = LlamaForCausalLM(config)
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
    return directory


def write_corpus(path: Path, documents: int = 400, words: int = 40) -> Path:
    rng = random.Random(0)
    path.write_text("\n\n".join(" ".join(rng.choice(WORDS[3:]) for _ in range(words)) for _ in range(documents)))
    return path

"""Shared test setup: offline hub, fixed seeds, and tiny random-weight Hugging Face models built from configs."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

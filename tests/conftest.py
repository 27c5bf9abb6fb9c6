"""Shared test setup: offline hub, fixed seeds, and tiny random-weight Hugging Face models built from configs."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from hypothesis import Phase, settings  # noqa: E402

# Hypothesis's explain phase traces every line of every example (sys.settrace) to explain a failure it may never
# see: the name property test ran 270 s traced. A failure is still shrunk and reported; only the explanation goes.
# Derandomized: CI draws the same examples every run, so a red CI names a bug, not an unlucky seed.
settings.register_profile(
    "sinkscope", phases=[phase for phase in Phase if phase != Phase.explain], derandomize=True
)
settings.load_profile("sinkscope")

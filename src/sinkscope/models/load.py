"""Load a causal LM by embedded name, Hugging Face hub id, local directory or `.gguf` file (SPEC §1).

GGUF files are dequantized by transformers once, then cached as safetensors under a directory keyed by the
file's sha256, so the next load reads plain safetensors. Weights are only ever read from safetensors or GGUF
(never unpickled), and `trust_remote_code` is off unless the caller turns it on.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from sinkscope.errors import SinkscopeError
from sinkscope.identity import cache_root, content_sha256, model_identity
from sinkscope.locking import CREATED, held, recover, temporary_prefix
from sinkscope.models.embedded import DEFAULT_MODEL, EMBEDDED, EmbeddedModel, embedded_installed  # noqa: F401
from sinkscope.models.families import Family, HeadLayout, decoder_layers, family_for, head_layout

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Converting a GGUF file to safetensors, seconds per MB of the file: SmolLM2-135M's 98 MB took 17 s on 2 CPUs at a
# load of 6 (`make demo` on a fresh clone and an empty SINKSCOPE_CACHE).
CONVERT_SECONDS_PER_MB = 0.2


@dataclass
class LoadedModel:
    """A causal LM with its tokenizer, family entry and identity (recorded in every run)."""

    model: nn.Module
    tokenizer: object
    family: Family
    identity: dict = field(default_factory=dict)

    @property
    def config(self):
        """The text config (for multimodal wrappers, the language model's)."""
        config = self.model.config
        return getattr(config, "text_config", None) or config

    @property
    def base(self) -> nn.Module:
        """The base model without the LM head (logits are pure cost for this analysis)."""
        return self.model.base_model

    @property
    def layout(self) -> HeadLayout:
        return head_layout(self.config)

    @property
    def layers(self) -> list[nn.Module]:
        return decoder_layers(self.family, self.base)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def max_positions(self) -> int | None:
        config = self.config
        return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, hashed once per version of the file (`identity.content_sha256`: a GGUF file is read
    once, not on every load)."""
    return content_sha256(path)


def _dequantized_gguf(path: Path, sha256: str) -> Path:
    """Directory holding the GGUF model as safetensors; dequantizes and caches it on first use."""
    root = cache_root()
    if root.exists() and not root.is_dir():  # before the minutes of dequantizing, with the right advice
        raise SinkscopeError(
            f"the model cache {root} (SINKSCOPE_CACHE) is a file, not a folder; set SINKSCOPE_CACHE to a folder"
        )
    target = root / "gguf" / sha256[:32]
    if (target / "model.safetensors").is_file() or (target / "model.safetensors.index.json").is_file():
        return target
    print(first_use_line(path, target), file=sys.stderr, flush=True)  # before transformers' progress bars
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except Exception as err:  # the GGUF reader raises many types on a damaged file
        raise SinkscopeError(
            f"could not read GGUF file {path} ({type(err).__name__}: {str(err)[:200]}); "
            "check the file is complete or reinstall its package"
        ) from err
    # transformers refuses to save a model it still marks as GGUF-quantized; the weights are already dense.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SinkscopeError(_cache_error(target, err)) from None
    with held(target, wait=True, what="the model cache"):  # a second process converting the same file waits, then finds it cached
        if (target / "model.safetensors").is_file() or (target / "model.safetensors.index.json").is_file():
            return target
        recover(target)  # under the lock: conversions of killed processes of this host (`.NAME.partial-PID@TAG-*`)
        try:
            staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=temporary_prefix(target)))
        except OSError as err:
            raise SinkscopeError(_cache_error(target, err)) from None
        CREATED.add(str(staging))
        try:
            model.save_pretrained(staging, safe_serialization=True)
            tokenizer.save_pretrained(staging)
            os.replace(staging, target)
        except BaseException as err:  # Ctrl-C and SIGTERM too: a half-written copy (hundreds of MB) never stays
            shutil.rmtree(staging, ignore_errors=True)
            if not isinstance(err, OSError):
                raise
            raise SinkscopeError(_cache_error(target, err)) from None
    return target


def first_use_line(gguf: Path, target: Path) -> str:
    """What the first load of a GGUF file does, said before transformers' progress bars: a one-time conversion
    into the cache, its expected time (`CONVERT_SECONDS_PER_MB` × the file's size) and where it goes."""
    megabytes = gguf.stat().st_size / 1e6
    seconds = max(5, round(megabytes * CONVERT_SECONDS_PER_MB, -1))
    return (f"sinkscope: first use of {gguf.name} ({megabytes:.0f} MB): converting it once to float32 safetensors "
            f"(about {seconds:.0f} s on a 2-core machine; several times the file's size on disk) into {target}; later loads "
            "read that copy")  # fmt: skip


def weights_identity(name_or_path: str) -> dict:
    """What a model is, by content, without loading it (`identity.model_identity`: the sha256 of each weight, index,
    config and tokenizer file of a model folder, of a `.gguf` file, or the pinned sha256 of an embedded model),
    recorded in run.json and compared before a result is reused (resume, sweep cells, reproduce sections)."""
    entry = EMBEDDED.get(name_or_path)
    return model_identity(name_or_path, entry.sha256 if entry is not None else None)


def _cache_error(target: Path, err: OSError) -> str:
    return (
        f"cannot write the model cache {target}: {err.strerror or err}; free space there or set SINKSCOPE_CACHE to "
        "a folder with room"
    )


def _resolve(name_or_path: str) -> tuple[Path | str, dict]:
    """Turn a user's model argument into something `from_pretrained` reads, plus identity fields."""
    if name_or_path in EMBEDDED:
        entry = EMBEDDED[name_or_path]
        try:
            gguf = entry.locate()
        except (ModuleNotFoundError, ImportError) as err:
            raise SinkscopeError(
                f"embedded model '{name_or_path}' is not installed; install it with: {entry.install}"
            ) from err
        if not gguf.is_file():
            raise SinkscopeError(f"embedded model '{name_or_path}' file {gguf} is missing; reinstall: {entry.install}")
        source = _gguf_source(gguf, expected_sha256=entry.sha256, fix=entry.install)
        return source[0], {**source[1], "name": name_or_path, "build": entry.build}
    path = Path(name_or_path).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise SinkscopeError(f"GGUF file {path} does not exist")
        return _gguf_source(path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise SinkscopeError(
                f"directory {path} holds no Hugging Face model (no config.json); pass a model directory, "
                f"a .gguf file, a hub id, or one of: {', '.join(EMBEDDED)}"
            )
        _check_config(path / "config.json")
        return path, {"name": path.name, "source": "directory", "path": str(path.resolve())}
    if path.exists() or name_or_path.count("/") != 1 or name_or_path.startswith((".", "/", "~")):
        raise SinkscopeError(
            f"unknown model '{name_or_path}': not an embedded name ({', '.join(EMBEDDED)}), "
            "a model directory, a .gguf file or a hub id (org/name)"
        )
    return name_or_path, {"name": name_or_path, "source": "hub", "path": name_or_path}


# Sizes a model directory's config.json must give as positive integers when it gives them at all.
POSITIVE_SIZES = ("num_attention_heads", "num_key_value_heads", "num_hidden_layers", "hidden_size", "head_dim",
                  "vocab_size", "max_position_embeddings")  # fmt: skip


def _check_config(path: Path) -> None:
    """One clear line for a config.json that is not JSON or whose sizes are not positive (transformers would
    fail deep inside with e.g. 'integer modulo by zero')."""
    import json

    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SinkscopeError(f"{path} is not a readable JSON config ({err}); restore the model's config.json") from None
    sections = [config, config.get("text_config")] if isinstance(config, dict) else [None]
    for section in sections:
        for key in POSITIVE_SIZES if isinstance(section, dict) else ():
            value = section.get(key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise SinkscopeError(f"{path} gives {key} {value!r}; it must be a positive integer: fix the config")
        experts = (section.get("num_local_experts") or section.get("num_experts")) if isinstance(section, dict) else None
        chosen = section.get("num_experts_per_tok") if isinstance(section, dict) else None
        if isinstance(experts, int) and isinstance(chosen, int) and chosen > experts > 0:
            raise SinkscopeError(
                f"{path} routes each token to num_experts_per_tok {chosen} experts of only {experts}; it must be at "
                "most the number of experts: fix the config"
            )
    if not isinstance(config, dict):
        raise SinkscopeError(f"{path} is not a JSON object; restore the model's config.json")


def _gguf_source(gguf: Path, expected_sha256: str | None = None, fix: str = "") -> tuple[Path, dict]:
    sha256 = file_sha256(gguf)
    if expected_sha256 is not None and sha256 != expected_sha256:
        raise SinkscopeError(
            f"{gguf} has sha256 {sha256}, not the {expected_sha256} of the release sinkscope knows; reinstall: {fix}"
        )
    directory = _dequantized_gguf(gguf, sha256)
    return directory, {"name": gguf.stem, "source": "gguf", "path": str(gguf.resolve()), "sha256": sha256}


def load_model(
    name_or_path: str = DEFAULT_MODEL,
    *,
    device: str = "cpu",
    dtype: str = "float32",
    trust_remote_code: bool = False,
    attn_implementation: str = "sdpa",
    device_map: str | None = None,
) -> LoadedModel:
    """Load a causal LM for analysis (SPEC §1): embedded name, hub id, local directory or `.gguf` path.

    `device` is "cpu", "cuda", "auto" (cuda when available) or any torch device string; `dtype` one of
    float32 (default), bfloat16, float16. `device_map="auto"` spreads a model too large for one device over all
    visible devices (accelerate) and ignores `device`. The model is put in eval mode with gradients off.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if dtype not in DTYPES:
        raise SinkscopeError(f"--dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    device = resolve_device(device)
    source, identity = _resolve(name_or_path)
    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
        config = getattr(config, "text_config", None) or config
        family = family_for(config.model_type, config)  # before the weights: a refused model type loads nothing
        if not family.sdpa and attn_implementation == "sdpa":
            attn_implementation = "eager"  # transformers has no sdpa path for it; an analysis routes it anyway
        model = AutoModelForCausalLM.from_pretrained(
            source,
            dtype=DTYPES[dtype],
            attn_implementation=attn_implementation,
            trust_remote_code=trust_remote_code,
            use_safetensors=True,
            device_map=device_map,
        )
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    except OSError as err:
        raise SinkscopeError(
            f"could not load model '{name_or_path}': {str(err).splitlines()[0][:300]} "
            "(offline? set a local directory; weights must be safetensors)"
        ) from err
    except ValueError as err:
        if "trust_remote_code" in str(err):
            raise SinkscopeError(
                f"model '{name_or_path}' needs custom code; pass --trust-remote-code if you trust its source"
            ) from err
        raise SinkscopeError(f"could not load model '{name_or_path}': {str(err)[:300]}") from err
    except SinkscopeError:  # a refused or unknown model type: its own line, which says where to look
        raise
    except Exception as err:  # safetensors' SafetensorError on a truncated or foreign weights file, and the like
        fix = ("its safetensors weights are truncated or damaged: copy or download them again"
               if "safetensor" in type(err).__name__.lower() else "check its config.json and files")  # fmt: skip
        if isinstance(source, Path) and Path(os.path.abspath(source)).is_relative_to(os.path.abspath(cache_root())):
            fix = f"its converted copy in the cache, {source}, is damaged: delete that folder and rerun to convert again"
        raise SinkscopeError(
            f"could not load model '{name_or_path}' ({type(err).__name__}: {str(err)[:200]}); {fix}"
        ) from None
    if device_map is None:
        model.to(device)
    model.eval().requires_grad_(False)
    config = getattr(model.config, "text_config", None) or model.config
    identity.update(
        weights=weights_identity(name_or_path),
        model_type=config.model_type,
        family=family.name,
        dtype=dtype,
        device=str(device) if device_map is None else f"device_map={device_map}",
        n_layers=config.num_hidden_layers,
        **head_layout(config).__dict__,
    )
    return LoadedModel(model=model, tokenizer=tokenizer, family=family, identity=identity)


def resolve_device(device: str) -> torch.device:
    """`auto` → cuda when available else cpu; an unavailable cuda is a clear error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SinkscopeError(f"--device {device}: no CUDA device is available here; use --device cpu")
    try:
        return torch.device(device)
    except RuntimeError as err:
        raise SinkscopeError(f"--device {device!r} is not a torch device (cpu, cuda, cuda:1, auto)") from err


def check_bos_id(lm: LoadedModel | None, bos_id: int | None) -> None:
    """A clear error for a `--bos-id` that is no token id (before a model loads, `lm` None: a negative one) or
    lies outside the model's vocabulary (the embedding would fail mid-pass)."""
    if bos_id is None:
        return
    if bos_id < 0:
        raise SinkscopeError(f"--bos-id {bos_id} is not a token id; token ids are ≥ 0")
    if lm is None:
        return
    vocab = lm.model.get_input_embeddings().num_embeddings
    if bos_id >= vocab:
        raise SinkscopeError(f"--bos-id {bos_id} is not a token of the model (its ids are 0 to {vocab - 1})")

"""Checkpoints of a long analysis: the feed's streaming state every N windows, so `--resume` continues.

One safetensors file per data-parallel rank, with a JSON fingerprint of what was being computed (the model with
its identity by content: the sha256 of its weight, config and tokenizer files, `sinkscope.identity`; corpus, T,
thresholds, world size) and the identity of the text by content: sha256 of the token ids of the
windows analysed so far (`windows_sha256`, int64 row after row). Resuming a different computation, or the same
corpus path whose text changed, is refused rather than silently mixed; so is a damaged checkpoint.
A resumed run gives the same result as an uninterrupted one (the geometry sample's priorities depend only on
the window index).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path

from sinkscope.capture.feed import Feed
from sinkscope.errors import SinkscopeError


def checkpoint_file(directory: Path, rank: int) -> Path:
    return Path(directory) / f"rank{rank}.safetensors"


def save_checkpoint(feed: Feed, directory: Path, rank: int, fingerprint: dict, windows_sha256: str) -> None:
    """Write this rank's state atomically (temp file, then rename), with `windows_sha256` of its windows so far."""
    from safetensors.torch import save

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = checkpoint_file(directory, rank)
    tmp = path.with_name(path.name + ".tmp")
    state = {name: tensor.contiguous() for name, tensor in feed.state_dict().items()}
    metadata = {
        "fingerprint": json.dumps(fingerprint, sort_keys=True, default=str),
        "windows": str(feed.windows),
        "windows_sha256": windows_sha256,
    }
    metadata["state_sha256"] = state_digest(state, metadata)
    try:
        tmp.write_bytes(save(state, metadata=metadata))  # bytes first: Python's OSError on a full disk
        tmp.replace(path)
    except OSError as err:  # a full disk: the previous checkpoint stays whole
        tmp.unlink(missing_ok=True)
        raise SinkscopeError(
            f"cannot write checkpoint {path}: {err.strerror or err}; the previous checkpoint (if any) is unchanged: "
            "free space, then rerun the same command with --resume"
        ) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remove_checkpoint(directory: Path) -> None:
    """Remove a finished analysis's checkpoints; call it only once the result is safely on disk."""
    shutil.rmtree(directory, ignore_errors=True)


def checkpoint_order(config, directory: Path, rank: int):
    """`config` (an `AnalyzeConfig`) with its `epsilons` in the order the checkpoint in `directory` stored them, when
    they are the same values in another order (the per-ε state is kept in that order, so the resumed statistics
    must count in it); otherwise `config` itself. The ε order changes no number, only the order results are listed
    in, which the caller restores."""
    from safetensors import safe_open

    path = checkpoint_file(directory, rank)
    try:
        with safe_open(str(path), "pt") as handle:
            saved = json.loads((handle.metadata() or {})["fingerprint"])["config"]["epsilons"]
        saved = tuple(float(e) for e in saved)
    except Exception:  # no checkpoint, or a damaged one: load_checkpoint says which, in one line
        return config
    if saved != config.epsilons and sorted(saved) == sorted(config.epsilons):
        return dataclasses.replace(config, epsilons=saved)
    return config


def load_checkpoint(feed: Feed, directory: Path, rank: int, fingerprint: dict) -> tuple[int, str | None]:
    """Restore this rank's state; returns the number of this rank's windows already analysed and the sha256 of
    their token ids (0 and None without a checkpoint). A checkpoint of another computation, or one that is not a
    readable sinkscope checkpoint (not safetensors, no or broken metadata, NaN, a window count that disagrees with
    its metadata), is refused in one line."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    path = checkpoint_file(directory, rank)
    if not path.is_file():
        return 0, None
    fix = f"delete {Path(directory)} and rerun without --resume"
    try:
        with safe_open(str(path), "pt") as handle:
            metadata = handle.metadata() or {}
        saved = json.loads(metadata["fingerprint"])
        windows, windows_sha256 = int(metadata["windows"]), metadata["windows_sha256"]
        state = load_file(str(path))
        if metadata.get("state_sha256") != state_digest(state, metadata):
            raise SinkscopeError(
                f"checkpoint {path} was edited or damaged after it was written (its contents do not match the digest "
                f"saved with them, or it is from a sinkscope without one); {fix}"
            )
    except KeyError as err:
        raise SinkscopeError(f"checkpoint {path} lacks its metadata ({err}); {fix}") from None
    except SinkscopeError:
        raise
    except Exception as err:  # safetensors raises its own error types on a file that is not safetensors
        raise SinkscopeError(f"checkpoint {path} is damaged ({type(err).__name__}: {str(err)[:120]}); {fix}") from None
    expected = _same_paths(json.loads(json.dumps(fingerprint, sort_keys=True, default=str)))
    saved = _same_paths(saved)
    if saved != expected:
        raise SinkscopeError(
            f"checkpoint {path} belongs to a different analysis ({'; '.join(_differences(saved, expected))}); "
            "resume with the arguments of the interrupted run, or rerun without --resume"
        )
    bad = [name for name, tensor in state.items() if tensor.is_floating_point() and bool(tensor.isnan().any())]
    if bad:
        raise SinkscopeError(f"checkpoint {path} is damaged (NaN in {', '.join(bad[:3])}); {fix}")
    try:
        feed.load_state_dict(state)
    except (KeyError, RuntimeError, ValueError) as err:
        raise SinkscopeError(f"checkpoint {path} does not fit this analysis ({err}); {fix}") from None
    if feed.windows != windows:
        raise SinkscopeError(
            f"checkpoint {path} is damaged (its state counts {feed.windows} windows, its metadata {windows}); {fix}"
        )
    return feed.windows, windows_sha256


def state_digest(state: dict, metadata: dict) -> str:
    """sha256 over the metadata (fingerprint, window count, text digest) and every tensor's name, dtype, shape and
    bytes, saved with the checkpoint: a value edited afterwards (inf, -1e6, a key id of 1e12, a window count of -4)
    is refused as a damaged checkpoint instead of becoming a wrong result."""
    import torch

    digest = hashlib.sha256()
    for key in ("fingerprint", "windows", "windows_sha256"):
        digest.update(f"{key}={metadata[key]}\0".encode())
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _same_paths(fingerprint: dict) -> dict:
    """`fingerprint` with its corpus file named by absolute path (`./corpus.txt` and `corpus.txt` are one file;
    the text itself is compared by content, `windows_sha256`)."""
    corpus = fingerprint.get("corpus")
    source = corpus.get("source") if isinstance(corpus, dict) else None
    if isinstance(source, str) and source and not source.startswith(("builtin:", "hf:")):
        fingerprint = {**fingerprint, "corpus": {**corpus, "source": os.path.abspath(os.path.expanduser(source))}}
    return fingerprint


def _differences(saved: dict, expected: dict, prefix: str = "") -> list[str]:
    """'corpus.max_windows: 48 in the checkpoint, 40 now' for every leaf where two fingerprints differ."""
    lines = []
    for key in sorted(set(saved) | set(expected)):
        old, new = saved.get(key), expected.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            lines += _differences(old, new, f"{prefix}{key}.")
        elif old != new:
            lines.append(f"{prefix}{key}: {old} in the checkpoint, {new} now")
    return lines

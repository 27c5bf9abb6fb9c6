"""Checkpoints of a long analysis: the feed's streaming state every N windows, so `--resume` continues.

One safetensors file per data-parallel rank, with a JSON fingerprint of what was being computed (model,
corpus, T, thresholds, world size); resuming a different computation is refused rather than silently mixed.
A resumed run gives the same result as an uninterrupted one (the geometry sample's priorities depend only on
the window index).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from sinkscope.capture.feed import Feed
from sinkscope.errors import SinkscopeError


def checkpoint_file(directory: Path, rank: int) -> Path:
    return Path(directory) / f"rank{rank}.safetensors"


def save_checkpoint(feed: Feed, directory: Path, rank: int, fingerprint: dict) -> None:
    """Write this rank's state atomically (temp file, then rename)."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = checkpoint_file(directory, rank)
    tmp = path.with_name(path.name + ".tmp")
    state = {name: tensor.contiguous() for name, tensor in feed.state_dict().items()}
    save_file(state, str(tmp), metadata={"fingerprint": json.dumps(fingerprint, sort_keys=True, default=str)})
    tmp.replace(path)


def remove_checkpoint(directory: Path) -> None:
    """Remove a finished analysis's checkpoints; call it only once the result is safely on disk."""
    shutil.rmtree(directory, ignore_errors=True)


def load_checkpoint(feed: Feed, directory: Path, rank: int, fingerprint: dict) -> int:
    """Restore this rank's state; returns the number of this rank's windows already analysed (0 if none)."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    path = checkpoint_file(directory, rank)
    if not path.is_file():
        return 0
    with safe_open(str(path), "pt") as handle:
        saved = json.loads(handle.metadata()["fingerprint"])
    expected = json.loads(json.dumps(fingerprint, sort_keys=True, default=str))
    if saved != expected:
        raise SinkscopeError(
            f"checkpoint {path} belongs to a different analysis ({'; '.join(_differences(saved, expected))}); "
            "resume with the arguments of the interrupted run, or rerun without --resume"
        )
    feed.load_state_dict(load_file(str(path)))
    return feed.windows


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

"""The ordered series of checkpoints a trajectory analyses, checked before any model loads.

A series comes from a folder of Hugging Face checkpoints (`checkpoint-<step>/`, as `transformers.Trainer` writes
them), from a list of checkpoint folders, or from revisions of a hub repository that are already in the local hub
cache (Pythia-style `step1000` branches; this tool never downloads). Each checkpoint's step is the number its name
ends in (`checkpoint-1500`, `step1500`), else the `global_step` of its `trainer_state.json`.

Refused, each with one line naming the input and the fix: a folder the Trainer is still writing
(`tmp-checkpoint-<step>`), a checkpoint whose step cannot be told, two checkpoints of one step, a series of fewer
than two checkpoints, and checkpoints whose architecture (config.json's sizes) or tokenizer (its files' bytes)
differ from the first's: a trajectory follows one model through training.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from sinkscope.errors import SinkscopeError

# The config.json sizes that make two checkpoints one architecture (what the analysis tables are indexed by).
ARCHITECTURE_KEYS = ("model_type", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size",
                     "head_dim", "vocab_size")  # fmt: skip
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "vocab.json", "merges.txt", "vocab.txt")  # fmt: skip
STEP_IN_NAME = re.compile(r"(\d+)$")
UNFINISHED = "tmp-checkpoint-"  # transformers.Trainer saves into this folder, then renames it checkpoint-<step>


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of a series: its training step and its model folder."""

    step: int
    path: Path


def folder_series(folder: str | Path) -> list[Checkpoint]:
    """The `checkpoint-<step>` folders of a training output folder, ordered by step (`check_series`)."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise SinkscopeError(f"--checkpoints {folder} is not a folder; pass the Trainer's output_dir or --paths")
    _refuse_lab_run(folder)
    unfinished = sorted(p.name for p in folder.iterdir() if p.name.startswith(UNFINISHED))
    if unfinished:
        raise SinkscopeError(
            f"{folder / unfinished[0]} is still being written by the Trainer (it renames the folder to "
            f"{unfinished[0].removeprefix('tmp-')} when done): wait for it, or list the finished checkpoints with --paths"
        )
    paths = sorted(p for p in folder.iterdir() if p.is_dir() and p.name.startswith("checkpoint-"))
    if not paths:
        raise SinkscopeError(f"{folder} holds no checkpoint-<step> folder; pass the Trainer's output_dir or --paths")
    return check_series(paths)


def path_series(paths: list[str | Path]) -> list[Checkpoint]:
    """Checkpoint folders given one by one, ordered by step (`check_series`)."""
    return check_series([Path(p).expanduser() for p in paths])


def revision_series(repository: str, revisions: list[str]) -> list[Checkpoint]:
    """Revisions of a hub repository (e.g. `step1000`) as the folders of the local hub cache that hold them; a
    revision not in the cache is one line (this machine reads the cache only: download it where there is network,
    or pass local folders)."""
    from huggingface_hub import snapshot_download

    paths = []
    for revision in revisions:
        try:
            folder = snapshot_download(repository, revision=revision, local_files_only=True)
        except Exception:  # LocalEntryNotFoundError, RevisionNotFoundError, a malformed id: all mean "not here"
            raise SinkscopeError(
                f"revision {revision} of {repository} is not in the local Hugging Face cache (sinkscope reads the "
                "cache only, never the network): download it with `huggingface-cli download "
                f"{repository} --revision {revision}` where there is network, or pass local folders with --paths"
            ) from None
        paths.append((revision, Path(folder)))
    return check_series([p for _, p in paths], names=[r for r, _ in paths])


def check_series(paths: list[Path], names: list[str] | None = None) -> list[Checkpoint]:
    """The checkpoints ordered by step, after refusing every bad series (module doc) with one line. `names`: what
    each step is read from (default: the folder names)."""
    names = [p.name for p in paths] if names is None else names
    for path in paths:
        if path.name.startswith(UNFINISHED):
            raise SinkscopeError(f"{path} is still being written by the Trainer: wait until it is renamed "
                                 f"{path.name.removeprefix('tmp-')}, or leave it out")  # fmt: skip
        _refuse_lab_run(path)
        if not (path / "config.json").is_file():
            raise SinkscopeError(f"{path} holds no Hugging Face model (no config.json); pass checkpoint folders")
    series = sorted((Checkpoint(_step(path, name), path) for path, name in zip(paths, names)), key=lambda c: c.step)
    if len(series) < 2:
        raise SinkscopeError(
            f"a trajectory needs at least two checkpoints; found {len(series)} ({', '.join(str(p) for p in paths)}); "
            "for one checkpoint use `sinkscope analyze --model PATH`"
        )
    steps = [c.step for c in series]
    repeated = sorted({s for s in steps if steps.count(s) > 1})
    if repeated:
        same = [str(c.path) for c in series if c.step == repeated[0]]
        raise SinkscopeError(f"two checkpoints have step {repeated[0]} ({', '.join(same)}); pass one per step")
    first = series[0]
    shape, tokenizer = architecture(first.path), tokenizer_digest(first.path)
    for checkpoint in series[1:]:
        other = architecture(checkpoint.path)
        differ = [k for k in ARCHITECTURE_KEYS if other.get(k) != shape.get(k)]
        if differ:
            key = differ[0]
            raise SinkscopeError(
                f"{checkpoint.path} has another architecture than {first.path} ({key} {other.get(key)} vs "
                f"{shape.get(key)}): a trajectory follows one model; pass the checkpoints of one training run"
            )
        if tokenizer_digest(checkpoint.path) != tokenizer:
            raise SinkscopeError(
                f"{checkpoint.path} has another tokenizer than {first.path} (its tokenizer files differ): the probe "
                "windows must be the same tokens for every checkpoint; pass the checkpoints of one training run"
            )
    return series


def _refuse_lab_run(path: Path) -> None:
    """One line for a `sinkscope train-bb` run folder (or its checkpoints/ folder): its `TinyTransformer`
    checkpoints are bare state dicts of sinkscope's own module, not Hugging Face models; `--train-bb` reads the
    run's own evaluations instead (`trajectory_lab`)."""
    if any(path.glob("step_*.safetensors")) or any(path.glob("checkpoints/step_*.safetensors")):
        run = path.parent if path.name == "checkpoints" else path
        raise SinkscopeError(
            f"{path} is a `sinkscope train-bb` run: its checkpoints are the lab's own TinyTransformer, not Hugging "
            f"Face models; pass the run as `--train-bb {run}` (its heads at every evaluation step)"
        )


def _step(path: Path, name: str) -> int:
    """The step a checkpoint's name ends in, else its trainer_state.json's global_step, else one line."""
    match = STEP_IN_NAME.search(name)
    if match:
        return int(match.group(1))
    state = path / "trainer_state.json"
    try:
        return int(json.loads(state.read_text(encoding="utf-8"))["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        raise SinkscopeError(
            f"cannot tell the training step of {path}: its name ends in no number and it has no readable "
            "trainer_state.json; rename it checkpoint-<step>"
        ) from None


def architecture(path: Path) -> dict:
    """The `ARCHITECTURE_KEYS` of a checkpoint's config.json (a multimodal config's text config)."""
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SinkscopeError(f"{path / 'config.json'} is not a readable JSON config ({err}); restore it") from None
    config = config.get("text_config") or config if isinstance(config, dict) else {}
    return {key: config.get(key) for key in ARCHITECTURE_KEYS}


def tokenizer_digest(path: Path) -> str:
    """sha256 over the names and bytes of a checkpoint's tokenizer files (`TOKENIZER_FILES` present in it)."""
    digest = hashlib.sha256()
    for name in TOKENIZER_FILES:
        file = path / name
        if file.is_file():
            digest.update(name.encode() + b"\0" + _tokenizer_bytes(file))
    return digest.hexdigest()


def _tokenizer_bytes(file: Path) -> bytes:
    """A tokenizer file's bytes; a JSON file canonicalised (sorted keys), and tokenizer_config.json without the
    fields a save rewrites with no change to the tokenization (`LOADING_FIELDS`: transformers records its own
    version and how the tokenizer was loaded)."""
    data = file.read_bytes()
    if file.suffix != ".json":
        return data
    try:
        config = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return data
    if isinstance(config, dict) and file.name == "tokenizer_config.json":
        config = {k: v for k, v in config.items() if k not in LOADING_FIELDS}
    return json.dumps(config, sort_keys=True).encode()


LOADING_FIELDS = ("name_or_path", "transformers_version", "is_local", "local_files_only", "_commit_hash")

"""Options that several subcommands share, as argparse parent parsers (`add_parser(..., parents=[...])`).

Each builder returns a new parent (`add_help=False`), so a command that changes a default with
`parser.set_defaults` changes its own copy only (argparse shares the parent's action objects with the child).
The flags, defaults and help text are those each command had before it used a parent; where commands differ
(e.g. `--max-windows` 256 for analyze, 64 for ablate and sweep), the builder takes the difference as a parameter.

`config_flags` builds one `--field-name` flag per field of configuration dataclasses (train-bb's RunConfig);
`defer_options` adds such options only when their command is used, as their modules import torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping
from pathlib import Path

from sinkscope.threads import parse_threads

DEFAULT_MODEL = "smollm2-135m"  # as sinkscope.models.load.DEFAULT_MODEL, without importing torch for --help
MODEL_HELP = "embedded name, model dir, .gguf file or hub id"
SEQ_LEN_HELP = "window length T including BOS (default 64)"
OVERWRITE_HELP = "replace an existing --out directory"
THREADS_HELP = ("torch CPU threads, or auto (default): the CPUs this process may use less their load average, so a "
                "busy shared machine gets fewer threads, which is much faster there (docs/performance.md, Threads)")


def _parent() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(add_help=False)


def model_options(
    *,
    model: bool = True,
    default: str | None = DEFAULT_MODEL,
    model_help: str = MODEL_HELP,
    device: bool = True,
    loading: bool = False,
) -> argparse.ArgumentParser:
    """Which model and how it loads: `--model` (unless `model=False`: sweep and reproduce take `--models`),
    `--device`/`--dtype`/`--threads` (unless `device=False`: cost has none; `apply_threads` applies the last), `--device-map`/`--trust-remote-code`
    (with `loading=True`: analyze); `default` and `model_help` are --model's."""
    parser = _parent()
    if model:
        parser.add_argument("--model", default=default, help=model_help)
    if device:
        parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default cpu)")
    if loading:
        parser.add_argument("--device-map", default=None, choices=["auto"],
                            help="spread a model larger than one device over all visible GPUs (accelerate)")
    if device:
        parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
        parser.add_argument("--threads", type=parse_threads, default="auto", metavar="N",
                            help=THREADS_HELP)  # fmt: skip
    if loading:
        parser.add_argument("--trust-remote-code", action="store_true", help="allow a hub model's own code")
    return parser


def apply_threads(threads: int | None) -> int:
    """Set torch's CPU thread count to `threads` (None: leave torch's default) and return the count in use, which
    `analyze` records in run.json (`timings.threads`). Imports torch: call it in a command's run function; the CLI
    passes `sinkscope.threads.choose_threads(--threads)` (auto by default)."""
    from sinkscope.errors import SinkscopeError

    if threads is not None and threads < 1:
        raise SinkscopeError(f"--threads {threads} must be 1 or more (the number of CPU threads torch uses)")
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def corpus_options(
    *,
    corpus: str | None = None,
    seq_len: str | None = SEQ_LEN_HELP,
    seq_len_default: int | None = 64,
    max_windows: tuple[int, str] | None = None,
    batch_size: bool = True,
    bos_id: bool = True,
    whole: bool = False,
) -> argparse.ArgumentParser:
    """Which windows: `--corpus` (help `corpus`), `--seq-len` (help `seq_len`, default `seq_len_default`; with
    `whole` it also takes "whole": one window of the whole corpus), `--max-windows` (`max_windows` = (default,
    help)), `--batch-size` and `--bos-id`; a None or False leaves the flag out (sweep and reproduce take lists:
    `--corpora`, `--seq-lens`)."""
    parser = _parent()
    if corpus is not None:
        parser.add_argument("--corpus", default="builtin:prose", help=corpus)
    if seq_len is not None and whole:
        parser.add_argument("--seq-len", type=_seq_len_or_whole, default=seq_len_default, metavar="T",
                            help=f"{seq_len}, or whole: the corpus as one window (up to the model's context)")
    elif seq_len is not None:
        parser.add_argument("--seq-len", type=int, default=seq_len_default, help=seq_len)
    if max_windows is not None:
        parser.add_argument("--max-windows", type=int, default=max_windows[0], help=max_windows[1])
    if batch_size:
        parser.add_argument("--batch-size", type=int, default=8, help="windows per forward pass (default 8)")
    if bos_id:
        parser.add_argument("--bos-id", type=int, default=None, help="BOS id (default: tokenizer's BOS, else EOS)")
    return parser


def _seq_len_or_whole(text: str) -> int | str:
    """`--seq-len` of analyze: a whole number or "whole"."""
    if text == "whole":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a whole number nor 'whole'") from None


def _out_path(text: str) -> Path:
    """`--out` as a folder with a name of its own (`staging.output_path`: `.` is the current folder by its absolute
    path); an empty `--out` is one line, not a traceback deep in a command."""
    from sinkscope.errors import SinkscopeError
    from sinkscope.staging import output_path

    try:
        return output_path(text)
    except SinkscopeError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _out_text(text: str) -> str:
    return str(_out_path(text))


def output_options(
    out_help: str,
    *,
    required: bool = True,
    as_path: bool = False,
    overwrite: str | None = None,
    quiet: str | None = None,
) -> argparse.ArgumentParser:
    """Where results go: `--out` (help `out_help`; `required=False` means default None; `as_path` parses it as
    a Path), and when their help is given `--overwrite` and `--quiet` (what each means differs by command)."""
    parser = _parent()
    out = {"type": _out_path if as_path else _out_text}
    if required:
        parser.add_argument("--out", required=True, help=out_help, **out)
    else:
        parser.add_argument("--out", default=None, help=out_help, **out)
    if overwrite is not None:
        parser.add_argument("--overwrite", action="store_true", help=overwrite)
    if quiet is not None:
        parser.add_argument("--quiet", action="store_true", help=quiet)
    return parser


def config_flags(
    parser: argparse.ArgumentParser,
    sections: Mapping[str, type],
    helps: Mapping[str, str],
    names: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Add one flag per field of each `sections` dataclass to `parser`, a help group per section; {key: flag}.

    A field `section.field_name` becomes `--field-name` (or `names[key]`), dest `section.field_name`,
    default None (unset: the dataclass default applies), type from the field's annotation, a bool field
    `--field-name/--no-field-name`; help is `helps[key]` followed by the key. Two sections sharing a field name
    need a `names` entry for at least one of them.
    """
    names = names or {}
    flags: dict[str, str] = {}
    for section, cls in sections.items():
        group = parser.add_argument_group(f"{section} settings ({cls.__name__}; also --set {section}.FIELD=VALUE)")
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            key = f"{section}.{field.name}"
            flag = names.get(key, "--" + field.name.replace("_", "-"))
            kind = hints[field.name]
            common = dict(dest=key, default=None, help=f"{helps[key]} ({key})")
            if kind is bool:
                group.add_argument(flag, action=argparse.BooleanOptionalAction, **common)
            else:
                group.add_argument(flag, type=kind, metavar=field.name.upper(), **common)
            flags[key] = flag
    return flags


def defer_options(parser: argparse.ArgumentParser, add: Callable[[argparse.ArgumentParser], object]) -> None:
    """Call `add(parser)` when `parser` is first used (parsing, help or usage), not now.

    `sinkscope` builds every subcommand's parser for each call; options generated from classes whose modules
    import torch would make `sinkscope --help` and every other command wait for torch (seconds).
    """
    added = False

    def wrap(method: Callable) -> Callable:
        @functools.wraps(method)
        def first_adding(*args, **kwargs):
            nonlocal added
            if not added:
                added = True
                add(parser)
            return method(*args, **kwargs)

        return first_adding

    for name in ("parse_known_args", "format_help", "format_usage"):
        setattr(parser, name, wrap(getattr(parser, name)))


def check_finite_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse, in one line naming the flag, any float option of `parser` (or an item of a list of floats) that is
    NaN or ±inf: every threshold, margin, rate and weight sinkscope takes is a finite number, and a NaN compares
    false with every bound, so it would pass the checks that follow and fail deep inside the work."""
    import math

    from sinkscope.errors import SinkscopeError

    for action in parser._actions:
        value = getattr(args, action.dest, None)
        values = value if isinstance(value, (tuple, list)) else (value,)
        bad = [v for v in values if isinstance(v, float) and not math.isfinite(v)]
        if bad and action.option_strings:
            raise SinkscopeError(f"{action.option_strings[-1]} {bad[0]} is not a finite number; give a finite value")


def too_long_name(err: OSError, args: argparse.Namespace) -> str | None:
    """The one line for an `OSError` ENAMETOOLONG (a path with a name over the file system's NAME_MAX, commonly 255
    bytes), naming the option whose value holds that path; None for any other error."""
    import errno

    if err.errno != errno.ENAMETOOLONG:
        return None
    path = str(err.filename or "")
    option = ""
    for dest, value in vars(args).items():
        texts = [str(v) for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, (str, Path))]
        if dest not in ("argv", "command") and path and any(text and (text in path or path in text) for text in texts):
            option = f"{dest} " if dest == "runs" else f"--{dest.replace('_', '-')} "
            break
    longest = max((len(part.encode("utf-8", "surrogatepass")) for part in Path(path).parts), default=0)
    shown = path if len(path) <= 60 else f"{path[:57]}..."
    return (f"{option}{shown}: a name in this path is {longest} bytes long, more than the file system allows "
            "(commonly 255 per folder or file name); rename it or give a shorter path")


def float_list(text: str) -> tuple[float, ...]:
    """A comma-separated list of numbers ("0.1,0.5"; empty items skipped), as an argparse type."""
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from err


def int_list(text: str) -> tuple[int, ...]:
    """A comma-separated list of whole numbers ("8,16,32"; empty items skipped), as an argparse type."""
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from err

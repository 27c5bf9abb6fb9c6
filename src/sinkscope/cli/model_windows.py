"""The shared start of the commands that run one model over one corpus (attribute, dense, evict, prevalence,
switch-assumptions): every flag and the corpus checked before any work, the output folder claimed, then the model
loaded and its windows streamed."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def model_windows(args: argparse.Namespace) -> Iterator[tuple]:
    """Yield `(lm, windows)` for the model and corpus options of `args`, inside `staging.claimed_output(args.out)`.

    The checks that need no model (`cli.analyze.check_arguments`, `corpus.sources.check_source`) run first, so a
    typo fails in a second; the window length is checked against the model's context once it is loaded."""
    from sinkscope.cli.analyze import check_arguments
    from sinkscope.corpus.sources import check_source
    from sinkscope.corpus.windows import windows
    from sinkscope.models.families import require_softmax_layers
    from sinkscope.models.load import load_model
    from sinkscope.pipelines.analysis import check_seq_len
    from sinkscope.staging import claimed_output

    check_arguments(args)
    check_source(args.corpus)
    with claimed_output(Path(args.out), args.overwrite):
        lm = load_model(args.model, device=args.device, dtype=args.dtype)
        require_softmax_layers(lm.family, lm.layers, getattr(args, "command", "this command"))
        check_seq_len(lm, args.seq_len)
        yield lm, windows(args.corpus, lm.tokenizer, args.seq_len, args.max_windows, bos_id=args.bos_id,
                          batch_size=args.batch_size, seed=args.seed)  # fmt: skip

"""`sinkscope view`: one text's attention as an interactive, self-contained HTML page."""

from __future__ import annotations

import argparse

from sinkscope.cli.options import corpus_options, model_options, output_options

EXAMPLE = """examples:
  sinkscope view --model smollm2-135m --text "The cat sat on the mat." --out cat.html
  sinkscope view --model smollm2-135m --file notes.txt --seq-len 256 --out notes.html
The page works offline from file:// (open it in any browser); what it shows and how the maps are quantised:
docs/view.md"""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "view",
        help="write an interactive attention explorer page for one text",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[
            model_options(),
            corpus_options(seq_len="keep the first N tokens including BOS (default: the whole text, at most 1024)",
                           seq_len_default=None, batch_size=False),  # the text comes from --text or --file
            output_options("HTML file to write"),
        ],
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="the text to look at")
    source.add_argument("--file", help="a text file (blank-line separated documents are joined with EOS)")
    parser.add_argument("--epsilon", type=float, default=0.3, help="sink threshold ε of the head class (default 0.3)")
    parser.add_argument("--delta", type=float, default=0.1, help="hard-pattern threshold δ (default 0.1)")
    parser.add_argument("--bits", type=int, default=8, choices=[8, 12, 16],
                        help="quantisation of the embedded maps: each entry within 1/(2·(2^bits-1)) of the "
                        "model's (8: 2.0e-3, default; 12: 1.2e-4; 16: 7.6e-6, a page 4.6× as large)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sinkscope.explorer.page import view

    page = view(
        args.model, args.text, file=args.file, seq_len=args.seq_len, out=args.out, bos_id=args.bos_id,
        epsilon=args.epsilon, delta=args.delta, device=args.device, dtype=args.dtype, bits=args.bits,
    )  # fmt: skip
    print(f"wrote {page.path} ({page.n_tokens} tokens, {page.size_bytes / 1e6:.2f} MB)")
    return 0

"""Size and open time of `sinkscope view` pages, and the screenshots in docs/img.

    python benchmarks/view_page.py --seq-len 256 --bits 8 12 16 --screenshots docs/img

Builds one page per `--bits` from the same forward pass (default: SmolLM2 on the first 256 tokens of Python's
LICENSE.txt, a real English text present wherever Python is), then opens each in headless Chromium (the one the
browser tests use) `--repeats` times after a warm-up and prints the time from navigation to the page being ready
(maps decoded, grid and first map drawn), by the page's own clock (Navigation Timing).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import sysconfig
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "browser"), str(ROOT / "tests")]  # conftest imports integration.*
from conftest import CHROMIUM, CHROMIUM_ARGS  # noqa: E402  (the browser tests' Chromium and flags)
from sinkscope.explorer.page import view  # noqa: E402
from sinkscope.models.load import load_model  # noqa: E402

DEFAULT_TEXT = Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt"


def open_times(paths: list[Path], repeats: int) -> dict[Path, list[float]]:
    from playwright.sync_api import sync_playwright

    times: dict[Path, list[float]] = {path: [] for path in paths}  # navigation start → ready, the page's clock
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        for round_ in range(repeats + 1):  # round 0 warms the browser up and is not counted
            for path in paths:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(path.resolve().as_uri())
                page.wait_for_selector("body[data-ready='1']", timeout=30_000)
                if round_:
                    nav = page.evaluate(
                        "() => { const n = performance.getEntriesByType('navigation')[0]; return [n.responseEnd, "
                        "n.domInteractive, performance.getEntriesByName('sinkscope-ready')[0].startTime]; }"
                    )
                    times[path].append(nav[2] / 1e3)
                    print(f"  {path.name}: file read {nav[0]:.0f} ms, parsed {nav[1]:.0f} ms, ready {nav[2]:.0f} ms")
                page.close()
        browser.close()
    return times


def screenshots(path: Path, directory: Path) -> None:
    """docs/img/view-grid.png (the head grid) and view-map.png (the head with the strongest non-BOS sink)."""
    import json
    import re

    from playwright.sync_api import sync_playwright

    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', path.read_text(), re.S)[1])
    strongest = max(  # the sink head with the strongest non-BOS key
        ((l, h) for l in range(data["n_layers"]) for h in range(data["n_heads"])
         if data["heads"][l][h]["sinks"] and data["heads"][l][h]["cls"] == "sink"),
        key=lambda lh: data["heads"][lh[0]][lh[1]]["sinks"][0][1],
    )  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1200})
        page.goto(path.resolve().as_uri())
        page.wait_for_selector("body[data-ready='1']")
        page.locator("#grid").screenshot(path=directory / "view-grid.png")
        page.click(f"#grid .cell[data-layer='{strongest[0]}'][data-head='{strongest[1]}']")
        page.select_option("#scale", "log")
        page.select_option("#zoom", "3")
        page.locator("#map-panel").screenshot(path=directory / "view-map.png")
        browser.close()
    print(f"screenshots in {directory}: grid, and the map of layer {strongest[0]} head {strongest[1]} (log scale)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--file", default=str(DEFAULT_TEXT))
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--bits", type=int, nargs="+", default=[16])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out-dir", default=None, help="where the pages go (default: a temporary directory)")
    parser.add_argument("--screenshots", default=None, help="write view-grid.png and view-map.png here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out_dir or tempfile.mkdtemp(prefix="sinkscope-view-"))
    lm = load_model(args.model)
    paths = []
    for bits in args.bits:
        page = view(lm, file=args.file, seq_len=args.seq_len, bits=bits, out=out / f"view-{bits}.html")
        paths.append(page.path)
        print(f"{bits:2d} bits: {page.path} {page.size_bytes / 1e6:.2f} MB ({page.n_tokens} tokens)")
    for path, seconds in open_times(paths, args.repeats).items():
        print(f"{path.name}: open to ready median {statistics.median(seconds):.2f} s, max {max(seconds):.2f} s "
              f"over {len(seconds)} loads")
    if args.screenshots:
        screenshots(paths[-1], Path(args.screenshots))


if __name__ == "__main__":
    main()

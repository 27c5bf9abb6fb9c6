"""The first load of a GGUF file says, in one sinkscope line before transformers' own progress bars, that it converts
the file once into the cache, how long that takes and where the copy goes; a later load reads the copy silently.

transformers' GGUF reader is replaced by a tiny random Llama (a stand-in for the dequantized weights), so the test
runs the real conversion path (save to safetensors under the cache lock) without a real GGUF file."""

import sys

import transformers

from integration.tiny_checkpoint import save_tiny_llama
from sinkscope.models.load import CONVERT_SECONDS_PER_MB, _dequantized_gguf, file_sha256, first_use_line


def test_first_use_of_a_gguf_file_is_one_line_before_the_progress_bars(tmp_path, monkeypatch, capsys):
    tiny = save_tiny_llama(tmp_path / "tiny")
    gguf, cache = tmp_path / "model.gguf", tmp_path / "cache"
    gguf.write_bytes(b"G" * 3_000_000)  # 3 MB: the line says its size
    monkeypatch.setenv("SINKSCOPE_CACHE", str(cache))
    for auto in (transformers.AutoModelForCausalLM, transformers.AutoTokenizer):
        real = auto.from_pretrained

        def stand_in(path, *args, real=real, gguf_file=None, **kwargs):
            print("PROGRESS BAR", file=sys.stderr)  # where transformers draws its bars
            return real(tiny)

        monkeypatch.setattr(auto, "from_pretrained", stand_in)
    sha256 = file_sha256(gguf)
    target = _dequantized_gguf(gguf, sha256)
    err = capsys.readouterr().err.splitlines()
    assert target == cache / "gguf" / sha256[:32] and (target / "model.safetensors").is_file()
    ours = [line for line in err if line.startswith("sinkscope:")]
    assert len(ours) == 1 and err.index(ours[0]) < err.index("PROGRESS BAR"), err
    # 3 MB × 0.2 s/MB = 0.6 s, below the 5 s floor
    for words in ("first use of model.gguf (3 MB)", "converting it once", "about 5 s", str(target),
                  "later loads read that copy"):  # fmt: skip
        assert words in ours[0], (words, ours[0])
    assert _dequantized_gguf(gguf, sha256) == target
    assert capsys.readouterr().err == ""  # the cached copy: no line, no conversion


def test_the_expected_time_is_the_size_times_the_rate_rounded_to_tens(tmp_path):
    """A sparse 1234 MB file: 1234 MB × 0.2 s/MB = 246.8 s, said as about 250 s (worked out by hand)."""
    assert CONVERT_SECONDS_PER_MB == 0.2  # the rate the numbers below are worked out from
    gguf = tmp_path / "big.gguf"
    with gguf.open("wb") as handle:
        handle.truncate(1_234_000_000)
    line = first_use_line(gguf, tmp_path / "copy")
    assert "first use of big.gguf (1234 MB)" in line and "about 250 s" in line, line

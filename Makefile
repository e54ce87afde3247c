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

test: install lint
	$(BIN)/python -m pytest

# Until the BERT recipe lands, the demo compresses the toy model (8 blocks -> 3) with the full command.
demo: install
	rm -rf runs/toy
	$(BIN)/theseus compress --recipe toy --out runs/toy

# Speed, memory and compile benchmarks (about 30 minutes on 2 CPU cores); tables in benchmarks/results/.
bench: install
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m theseus_zoo.assets fetch all-minilm-l6-v2
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis

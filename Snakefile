# The embedding-transfer workflow: corpus -> models -> vocab -> overlap -> fastText
# -> token vectors -> neighbours -> transfer -> LAPT -> evaluation -> report.
# Logic lives in the `embtransfer` package (workflow/embtransfer); rules stay thin.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))

from snakemake.exceptions import WorkflowError

from embtransfer.core import allocator, codehash, hooks
from embtransfer.core.cluster import SlurmProfileError
from embtransfer.config.validation import ConfigError, validate_config
from embtransfer.data.inputs import check_real_data

# The jobs' glibc keeps freed blocks for reuse: set before any job starts, as glibc reads
# it at a process's start (embtransfer/core/allocator.py)
allocator.keep_freed_memory()

# The code hashes' parses of the package, kept between invocations (core/codehash.py)
codehash.keep_parses_in(Path(".snakemake") / "embtransfer" / "code_imports.json")

# The default config (the miniature world) unless one is given with --configfile: a grid
# such as config/paper_salt.yaml replaces it rather than being merged into it.
if not workflow.config_settings.configfiles:

    configfile: str(Path(workflow.basedir) / "config" / "config.yaml")


try:
    validate_config(config)
except ConfigError as err:
    raise WorkflowError(str(err)) from None


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/vocab.smk"
include: "workflow/rules/fasttext.smk"
include: "workflow/rules/neighbors.smk"
include: "workflow/rules/transfer.smk"
include: "workflow/rules/lapt.smk"
include: "workflow/rules/evaluation.smk"
include: "workflow/rules/report.smk"


# --- the run's hooks, each registered here once: Snakemake keeps one handler of each kind,
# so a second `onsuccess:` would replace this one. At the start: refuse a SLURM run while
# slurm/config.yaml holds FILL_IN_* placeholders; report (or, with clean_temporaries,
# remove) killed writers' temporaries under results/; start the job server of a local run.
# At the end: pin hub revisions into the --configfile files; stop the job server
# (embtransfer/core/hooks.py). ---
onstart:
    try:
        check_real_data(config)  # offline, resources/real must exist (make real-data)
        hooks.on_start(workflow, config)
    except (SlurmProfileError, ConfigError) as err:
        raise WorkflowError(str(err)) from None


onsuccess:
    hooks.on_end(workflow, config)


onerror:
    hooks.on_end(workflow, config)


# Every output of the report rule is registered for `snakemake --report report.html` (make
# report-html); the front page opens with the run's findings (results/report/findings.md).
report: "workflow/report/workflow.rst"


rule all:
    default_target: True
    input:
        all_coverage(config),
        all_neighbors(config),
        all_zeroshot(config),
        all_lapt(config),
        all_evaluation(config),
        all_intrinsic(config),
        all_report(),
        # the world's pairs measured as the real ones (docs/calibration.md)
        all_shared_kinds(config),
        all_calibration(config),
        # a real dictionary's held-out half as each pair's alignment truth
        all_dictionary_truth(config),
        # the shared tokens held out from every method (transfer.holdout), and every
        # method's rows for them scored against their true source rows
        all_holdout(config),
        all_holdout_scores(config),


rule zeroshot_only:
    # Every transferred checkpoint and its zero-shot scores, without LAPT or lm-eval (the
    # report compares them: results/report/zeroshot.md).
    input:
        all_zeroshot(config),


rule neighbors_only:
    # The upstream half without any model pretraining: corpora, tokenizers,
    # vocabularies, overlap, fastText, token vectors and neighbour tables.
    input:
        all_coverage(config),
        all_neighbors(config),

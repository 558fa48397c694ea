# The embedding-transfer workflow: corpus -> models -> vocab -> overlap -> fastText
# -> token vectors -> neighbours -> transfer -> LAPT -> evaluation -> report.
# Logic lives in the `embtransfer` package (workflow/embtransfer); rules stay thin.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))

from snakemake.exceptions import WorkflowError
from snakemake.settings.types import ExecMode

from embtransfer.core import codehash, jobserver
from embtransfer.config.validation import ConfigError, validate_config

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


# --- on start: with `--executor slurm`, refuse to submit while slurm/config.yaml still holds
# FILL_IN_* placeholders (embtransfer/core/cluster.py); for a local run, start the job
# server, whose forks have torch, transformers and lm-eval imported already
# (embtransfer/core/jobserver.py; `job_server: false` turns it off). ---
onstart:
    from embtransfer.core.cluster import SlurmProfileError, check_slurm_run

    try:
        check_slurm_run(workflow)
    except SlurmProfileError as err:
        raise WorkflowError(str(err)) from None
    if (
        config["job_server"]
        and workflow.local_exec
        and not workflow.dryrun
        and workflow.exec_mode == ExecMode.DEFAULT
    ):
        jobserver.start(
            Path(".snakemake") / "jobserver", min(config["threads"], workflow.cores)
        )


onsuccess:
    jobserver.stop()


onerror:
    jobserver.stop()


rule all:
    default_target: True
    input:
        all_coverage(),
        all_neighbors(),
        rules.zeroshot_table.output,
        all_lapt(),
        all_evaluation(),
        all_intrinsic(),
        all_report(),


rule neighbors_only:
    # The upstream half without any model pretraining: corpora, tokenizers,
    # vocabularies, overlap, fastText, token vectors and neighbour tables.
    input:
        all_coverage(),
        all_neighbors(),

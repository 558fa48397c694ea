# The report: the SALT paper's Tables 1-6, 8 and Figure 2 regenerated from the result files
# (evaluation JSONs, LAPT metrics, overlap coverage, the LAPT checkpoints' zero-shot records
# for Table 5's bits per byte), the paper's numbers beside ours where the setting matches.
# Every output is registered for `snakemake --report report.html` (the Snakefile's `report:`).


rule report:
    input:
        **report_inputs(config),
    output:
        **{name: report_output(name) for name in REPORT_OUTPUTS if name != "environment"},
        # Python, machine and package versions of this run (embtransfer/report/environment.py)
        environment=REPORT_OUTPUTS["environment"],
    params:
        config=config_subset(config),
        # the results folder the report's grid builds its input paths under
        results=lambda w, output: str(Path(output.report_md).parents[1]),
        code=script_hash("report/report.py"),
        lock=str(Path(workflow.basedir) / "envs" / "requirements.lock"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/report/report.log",
    script:
        "../scripts/report/report.py"


rule calibration_table:
    # The run's shared tokens beside the committed real ones (docs/calibration.md); shown in
    # the report (results/report/), written apart from it.
    input:
        real=config["report"]["calibration"],
        run=paths.SHARED_KINDS,
    output:
        csv=report(paths.CALIBRATION_CSV, **report_entry("calibration_csv", real_text_run(config))),
        md=report(paths.CALIBRATION_MD, **report_entry("calibration_md", real_text_run(config))),
    params:
        code=script_hash("report/calibration.py"),
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/report/calibration.log",
    script:
        "../scripts/report/calibration.py"

# The regression problem's inputs: the stacked paired embeddings of the shared
# tokens (target PLM rows and source LLM rows, input and, if untied, output side).


rule regression_inputs:
    input:
        overlap=f"{RESULTS}/overlap/{{source}}/{{target}}.parquet",
        source=lambda w: model_dir(w.source),
        target=lambda w: model_dir(w.target),
    output:
        tensors=f"{RESULTS}/regression/{{lang}}/{{source}}/{{target}}/inputs.safetensors",
        meta=f"{RESULTS}/regression/{{lang}}/{{source}}/{{target}}/inputs.json",
    params:
        trust_remote_code=config["trust_remote_code"],
        allow_pickle=config["allow_pickle"],
        code=script_hash("regression_inputs.py"),
    resources:
        mem_mb=8000,
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/regression/{{lang}}/{{source}}/{{target}}/inputs.log",
    script:
        "../scripts/regression_inputs.py"

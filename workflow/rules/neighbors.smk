# Per non-shared target token: its shared neighbours, similarities and sparsemax weights.


rule neighbors:
    input:
        vectors=f"{RESULTS}/token_vectors/{{lang}}/{{vectors}}/{{target}}.npy",
        missing=f"{RESULTS}/token_vectors/{{lang}}/{{vectors}}/{{target}}.missing.npy",
        overlap=f"{RESULTS}/overlap/{{source}}/{{target}}.parquet",
    output:
        f"{RESULTS}/neighbors/{{lang}}/{{source}}/{{target}}/{{vectors}}.parquet",
    params:
        prefilter_k=config["neighbors"]["prefilter_k"],
        chunk_rows=config["neighbors"]["chunk_rows"],
        max_neighbors=config["neighbors"]["max_neighbors"],
        code=script_hash("neighbors.py"),
    threads: config["threads"]
    resources:
        mem_mb=4000,
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/neighbors/{{lang}}/{{source}}/{{target}}/{{vectors}}.log",
    script:
        "../scripts/neighbors.py"

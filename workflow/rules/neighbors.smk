# Per non-shared target token: its shared neighbours, similarities and sparsemax weights.


rule neighbors:
    input:
        vectors=paths.TOKEN_VECTORS.fill(model="{target}"),
        missing=paths.TOKEN_VECTORS_MISSING.fill(model="{target}"),
        overlap=paths.OVERLAP,
    output:
        paths.NEIGHBORS,
    params:
        prefilter_k=config["neighbors"]["prefilter_k"],
        chunk_rows=config["neighbors"]["chunk_rows"],
        max_neighbors=config["neighbors"]["max_neighbors"],
        code=script_hash("neighbors/neighbors.py"),
    threads: config["threads"]
    resources:
        mem_mb=4000,
    conda:
        CONDA_ENV
    log:
        f"{paths.LOGS}/seed{{seed}}/neighbors/{{lang}}/{{source}}/{{target}}/{{vectors}}.log",
    benchmark:
        f"{paths.BENCHMARKS}/seed{{seed}}/neighbors/{{lang}}/{{source}}/{{target}}/{{vectors}}.tsv"
    script:
        "../scripts/neighbors/neighbors.py"


use rule neighbors as holdout_neighbors with:
    # the same search with the held-out shared tokens as queries, never anchors
    input:
        vectors=paths.TOKEN_VECTORS.fill(model="{target}"),
        missing=paths.TOKEN_VECTORS_MISSING.fill(model="{target}"),
        overlap=paths.HOLDOUT_OVERLAP,
    output:
        paths.HOLDOUT_NEIGHBORS,
    log:
        f"{paths.LOGS}/seed{{seed}}/holdout_neighbors/{{lang}}/{{source}}/{{target}}/{{vectors}}.log",
    benchmark:
        f"{paths.BENCHMARKS}/seed{{seed}}/holdout_neighbors/{{lang}}/{{source}}/{{target}}/{{vectors}}.tsv"

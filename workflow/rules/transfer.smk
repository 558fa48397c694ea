# SALT's regression (GPU-declared), aligned static vectors (WECHSEL, OFA), every
# method's transferred checkpoint, and the zero-shot comparison before training.
from embtransfer.method_catalog import METHODS as METHOD_CATALOG, method_needs

TRANSFER = config["transfer"]


wildcard_constraints:
    method=wildcard_alternatives(METHOD_CATALOG),


def method_options(method):
    return TRANSFER["options"].get(method, {})


def salt_vectors():
    return method_options("salt").get("vectors", "word")


def transfer_code(wildcards):
    # The script, and only the module of this method: editing SALT reruns SALT's jobs.
    method_module = f"embtransfer.methods.{METHOD_CATALOG[wildcards.method]['module']}"
    return script_hash("transfer.py") + codehash.code_hash(method_module)


rule salt_regression:
    input:
        neighbors=lambda w: (
            f"{RESULTS}/neighbors/{w.lang}/{w.source}/{w.target}/{salt_vectors()}.parquet"
        ),
        source=lambda w: model_dir(w.source),
        target=lambda w: model_dir(w.target),
    output:
        tensors=f"{RESULTS}/regression/{{lang}}/{{source}}/{{target}}/projected.safetensors",
        meta=f"{RESULTS}/regression/{{lang}}/{{source}}/{{target}}/projected.json",
    params:
        options=method_options("salt"),
        device=TRANSFER["device"],
        trust_remote_code=config["trust_remote_code"],
        allow_pickle=config["allow_pickle"],
        code=script_hash("salt_regression.py"),
    threads: config["threads"]
    resources:
        gpu=1,
        mem_mb=16000,
        runtime=60,
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/regression/{{lang}}/{{source}}/{{target}}/projected.log",
    script:
        "../scripts/salt_regression.py"


def dictionary_input(lang):
    spec = config["languages"][lang].get("dictionary", {"type": "world"})
    return spec["path"] if spec["type"] == "file" else rules.world.output[0]


rule aligned_vectors:
    input:
        source_fasttext=lambda w: fasttext_word_bin(config["source_language"]),
        target_fasttext=lambda w: fasttext_word_bin(w.lang),
        source_vocab=f"{RESULTS}/vocab/{{source}}.parquet",
        target_vocab=f"{RESULTS}/vocab/{{target}}.parquet",
        dictionary=lambda w: dictionary_input(w.lang),
        # the tokenizers only for aligned.token_strings: decode
        tokenizers=lambda w: (
            [tokenizer_dir(w.source), tokenizer_dir(w.target)]
            if config["aligned"]["token_strings"] == "decode" else []
        ),
    output:
        f"{RESULTS}/aligned/{{lang}}/{{source}}/{{target}}.safetensors",
    params:
        dictionary=lambda w: config["languages"][w.lang].get("dictionary", {"type": "world"}),
        source_language=config.get("source_language"),
        aligned=config["aligned"],
        trust_remote_code=config["trust_remote_code"],
        code=script_hash("aligned_vectors.py"),
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/aligned/{{lang}}/{{source}}/{{target}}.log",
    script:
        "../scripts/aligned_vectors.py"


def transfer_inputs(w):
    needs = method_needs(w.method, method_options(w.method))
    inputs = {
        "source": model_dir(w.source),
        "target_tokenizer": tokenizer_dir(w.target),
        "source_vocab": f"{RESULTS}/vocab/{w.source}.parquet",
        "target_vocab": f"{RESULTS}/vocab/{w.target}.parquet",
        "overlap": f"{RESULTS}/overlap/{w.source}/{w.target}.parquet",
    }
    for kind in ("word", "token"):
        if f"neighbors_{kind}" in needs:
            inputs[f"neighbors_{kind}"] = (
                f"{RESULTS}/neighbors/{w.lang}/{w.source}/{w.target}/{kind}.parquet"
            )
    if "plm" in needs:
        inputs["plm"] = model_dir(w.target)
    if "regression" in needs:
        inputs["projected"] = rules.salt_regression.output.tensors.format(**w)
    if "aligned" in needs:
        inputs["aligned"] = rules.aligned_vectors.output[0].format(**w)
    if "source_tokenizer" in needs:
        inputs["source_tokenizer"] = tokenizer_dir(w.source)
    return inputs


rule transfer:
    input:
        unpack(transfer_inputs),
    output:
        directory(f"{RESULTS}/transfer/{{lang}}/{{source}}/{{target}}/{{method}}"),
    params:
        options=lambda w: method_options(w.method),
        mode=TRANSFER["vocab_mode"],
        seed=config["seed"],
        trust_remote_code=config["trust_remote_code"],
        allow_pickle=config["allow_pickle"],
        code=transfer_code,
    resources:
        mem_mb=8000,
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/transfer/{{lang}}/{{source}}/{{target}}/{{method}}.log",
    script:
        "../scripts/transfer.py"


rule zeroshot:
    input:
        model=f"{RESULTS}/transfer/{{lang}}/{{source}}/{{target}}/{{method}}",
        text=lambda w: corpus_file(w.lang, "valid"),
    output:
        f"{RESULTS}/zeroshot/{{lang}}/{{source}}/{{target}}/{{method}}.json",
    params:
        options=config["zeroshot"],
        device=TRANSFER["device"],
        code=script_hash("zeroshot.py"),
    threads: config["threads"]
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/zeroshot/{{lang}}/{{source}}/{{target}}/{{method}}.log",
    script:
        "../scripts/zeroshot.py"


use rule zeroshot as zeroshot_source with:
    # The untouched source LLM with its own tokenizer on the same text: the
    # reference that bits per byte makes comparable across tokenizers.
    input:
        model=lambda w: model_dir(w.source),
        text=lambda w: corpus_file(w.lang, "valid"),
    output:
        f"{RESULTS}/zeroshot/{{lang}}/{{source}}/source_model.json",
    log:
        f"{LOGS}/zeroshot/{{lang}}/{{source}}/source_model.log",


def all_zeroshot():
    files = [
        f"{RESULTS}/zeroshot/{lang}/{s}/{t}/{m}.json"
        for lang, s, t in PAIRS
        for m in TRANSFER["methods"]
    ]
    files += sorted({f"{RESULTS}/zeroshot/{lang}/{s}/source_model.json" for lang, s, _ in PAIRS})
    return files


rule zeroshot_table:
    input:
        all_zeroshot(),
    output:
        csv=f"{RESULTS}/tables/zeroshot.csv",
        md=f"{RESULTS}/tables/zeroshot.md",
    params:
        code=script_hash("zeroshot_table.py"),
    conda:
        CONDA_ENV
    log:
        f"{LOGS}/tables/zeroshot.log",
    script:
        "../scripts/zeroshot_table.py"

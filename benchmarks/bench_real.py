"""Real shapes at real scale on real text: the paper's path, on this machine.

Prints wall time and peak memory (RSS of the stage's own process) per stage;
asserts nothing beyond what the stages check themselves (every checkpoint reloads).
Inputs: Gemma 3's real tokenizer (``make fixtures``) and the real-data corpora and
FreeDict dictionaries (``make real-data``, ``benchmarks/real_data.py``,
``docs/real_text.md``). Stages, each in a fresh process:

1. ``vocab``: the vocab stage on the real Gemma 3 tokenizer (262,145 ids).
2. ``targets``: per language (de, ar, vi) the real corpus (its first 2 %, at least 200
   lines, held out) and three target tokenizers trained on it with ``tokenizers``
   (byte-level BPE, WordPiece, Unigram) at their families' usual sizes (:data:`VOCAB_SIZE`).
3. ``overlap``: vocab tables of the nine targets, overlap with Gemma 3 and coverage
   (the paper's Table 6 measures).
4. ``source``: a Gemma 3 text model with the real vocabulary and hidden size
   (262,208 rows x 1,152, Gemma 3 1B's width; one layer, random weights, bf16).
5. ``fasttext``: word-level fastText (dim 300, 5 epochs, 200,000 buckets) on the raw en,
   de, ar and vi corpora (the crawl vectors the paper downloads), token-level fastText on the
   German byte-level target's tokenization with FOCUS's settings (the workflow's
   ``fasttext.token`` default: dim 100, 3 epochs, min count 10).
6. ``neighbors``: sparsemax neighbour tables, word level for the method targets
   (:data:`METHOD_TARGETS`, one per family), token level for the German byte-level one;
   support sizes (median, 90th percentile, share degenerate).
7. ``aligned``: English -> German and English -> Arabic fastText spaces aligned by
   Procrustes on the FreeDict dictionaries (WECHSEL, OFA), token vectors of each method
   target.
8. ``plm``: a GPT-2-style target PLM per method target (its vocabulary, width 768, one
   layer, random weights).
9. ``regression``: SALT's per-token least squares (h_t 768 -> h_s 1,152) of every
   non-shared token of each method target, neighbour sets uncapped (``--salt-max-neighbors``
   caps them).
10. ``transfer``: every catalog method but ``world_oracle`` on each method target, and
    Heuristics on the six other targets: rows, checkpoint, reloaded with
    ``from_pretrained`` (checked finite).
11. ``zeroshot``: held-out loss of each target's Heuristics checkpoint.
12. ``lapt``: 3 LAPT steps (max length 128, micro batch 2 = global batch, chunked loss,
    fp32) on the German byte-level checkpoint.
13. ``lapt_source`` (not in the default run): the same steps on the source model, Gemma 3's
    262,208-row vocabulary.

Stages 9 and 10 run their jobs (a target's regression, methods on a target) in
:data:`WORKERS` one-thread processes, as the workflow's default config runs two one-thread
jobs on two cores; their peak memory is the stage process's plus every worker's.

    nice python benchmarks/bench_real.py [--work DIR] [--stages vocab,...]
        [--salt-max-neighbors 0] [--zeroshot-lines 50] [--lapt-steps 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LANGS = ("de", "ar", "vi")
FAMILIES = ("bytelevel_bpe", "wordpiece", "unigram")
TARGETS = tuple(f"{lang}_{family}" for lang in LANGS for family in FAMILIES)
#: every catalog method runs on these, one target of each family
METHOD_TARGETS = ("de_bytelevel_bpe", "ar_wordpiece", "de_unigram")
#: FreeDict dictionary (English headwords) of each method target's language
DICTIONARY_OF = {"de": "eng-deu", "ar": "eng-ara"}
#: tokens asked of each family: GPT-2's 50,257, BERT's 30,522, T5's 32,100 (rounded)
VOCAB_SIZE = {"bytelevel_bpe": 50_000, "wordpiece": 30_000, "unigram": 32_000}
KEPT_METHOD = "heuristics"  # the checkpoint of every target that zero-shot and LAPT read
#: one-thread worker processes of the regression and transfer stages (this machine's cores)
WORKERS = 2
#: methods that run in one job, in this order: OFA reuses the search WECHSEL made (the
#: neighbours are kept on the aligned vectors, ``transfer.aligned.softmax_neighbors``)
TOGETHER = ("wechsel", "ofa")
#: the slowest methods at real shapes after those (CLP's dense weights), started first so
#: that no worker is left with one at the end
SLOW_FIRST = ("clp", "clp_plus", "multivariate", "salt")
HIDDEN = 1152
PLM_HIDDEN = 768  # German GPT-2's (and GPT-2 base's) width
# The crawl vectors' width and subwords; 200,000 hash buckets instead of fastText's 2 M: a
# 2 M x 300 bucket matrix is a 2.4 GB file per model, whose writing and reading took most
# of the stage's minutes, while a few MB of text fills few buckets anyway.
FASTTEXT = {"model": "cbow", "dim": 300, "epoch": 5, "min_count": 3, "minn": 3, "maxn": 6,
            "neg": 10, "ws": 5, "lr": 0.05, "bucket": 200_000}


def focus_fasttext() -> dict:
    """FOCUS's token-level fastText settings: the workflow's ``fasttext.token`` default (the
    ``deepfocus`` package's own: dim 100, 3 epochs, min count 10), with the buckets above."""
    import yaml

    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    return {**schema["properties"]["fasttext"]["properties"]["token"]["default"],
            "bucket": FASTTEXT["bucket"]}


def bench_methods() -> list[str]:
    """Every catalog method that real data can feed: all but the miniature world's own
    (``world_oracle`` needs the world's ground truth)."""
    from embtransfer.transfer.catalog import DEFAULT_METHODS

    return list(DEFAULT_METHODS)


def gemma3_dir() -> Path:
    sys.path.insert(0, str(REPO / "tests" / "fixtures" / "tokenizers"))
    import fetch

    return fetch.fetch("gemma3")


#: summed peak memory (GB) of each :func:`in_workers` call's workers, in this process
WORKER_PEAKS: list[float] = []


def _one_thread() -> None:
    """A worker's set-up: one BLAS/OpenMP/torch thread (before numpy or torch is imported)."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    import torch

    torch.set_num_threads(1)


def _job(fn, work: str, args: argparse.Namespace, job) -> tuple[int, float, object]:
    result = fn(Path(work), args, job)
    return os.getpid(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, result


def in_workers(fn, work: Path, args: argparse.Namespace, jobs: list,
               workers: int = WORKERS) -> list:
    """``[fn(work, args, job) for job in jobs]``, computed in ``workers`` spawned one-thread
    processes that take the jobs in order as they come free. The workers' summed peak
    memory (GB; they run at the same time) goes to :data:`WORKER_PEAKS`."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers, mp.get_context("spawn"), initializer=_one_thread) as pool:
        done = list(pool.map(_job, [fn] * len(jobs), [str(work)] * len(jobs),
                             [args] * len(jobs), jobs, chunksize=1))
    peaks: dict[int, float] = {}
    for pid, peak, _ in done:
        peaks[pid] = max(peak, peaks.get(pid, 0.0))
    WORKER_PEAKS.append(sum(peaks.values()))
    return [result for _, _, result in done]


def stage_vocab(work: Path, args: argparse.Namespace) -> str:
    from embtransfer.models.loading import load_tokenizer
    from embtransfer.vocab.canonical import vocab_table, write_vocab

    tok = load_tokenizer(gemma3_dir())
    start = time.perf_counter()
    table = vocab_table(tok)
    seconds = time.perf_counter() - start
    write_vocab(table, work / "gemma3.parquet")
    kinds = table.groupby("kind").size().to_dict()
    return f"{len(table)} ids, vocab_table {seconds:.1f} s, kinds {kinds}"


def corpus(lang: str) -> Path:
    """The real-data corpus of ``lang`` (``make real-data`` builds it)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import real_data

    path = real_data.cache_root() / "corpora" / f"{lang}.txt"
    if not path.exists():
        raise SystemExit(f"{path} is missing: run {real_data.FETCH_COMMAND} first")
    return path


def dictionary(pair: str) -> Path:
    sys.path.insert(0, str(REPO / "benchmarks"))
    import real_data

    return real_data.dictionaries() / f"freedict-{pair}.index"


def train(family: str, text: list[str], size: int):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if family == "bytelevel_bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=size, show_progress=False, special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        roles = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
    elif family == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(
            vocab_size=size, show_progress=False,
            special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
        roles = {"unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                 "pad_token": "[PAD]", "mask_token": "[MASK]"}
    else:
        tok = Tokenizer(models.Unigram())
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=size, unk_token="<unk>", show_progress=False,
                                          special_tokens=["<pad>", "</s>", "<unk>"])
        roles = {"unk_token": "<unk>", "eos_token": "</s>", "pad_token": "<pad>"}
    tok.train_from_iterator(text, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, **roles)


def split_corpus(lang: str) -> tuple[list[str], list[str]]:
    """(training lines, held-out lines) of the real-data corpus of ``lang``: its first 2 %,
    at least 200 lines, are held out (the zero-shot and LAPT validation lines)."""
    lines = corpus(lang).read_text(encoding="utf-8").splitlines()
    held_out = max(200, len(lines) // 50)
    return lines[held_out:], lines[:held_out]


def stage_targets(work: Path, args: argparse.Namespace) -> str:
    out = []
    for lang in LANGS:
        text, valid = split_corpus(lang)
        (work / f"{lang}.txt").write_text("\n".join(text) + "\n", encoding="utf-8")
        (work / f"{lang}_valid.txt").write_text("\n".join(valid) + "\n", encoding="utf-8")
        for family in FAMILIES:
            tok = train(family, text, VOCAB_SIZE[family])
            tok.save_pretrained(work / f"{lang}_{family}")
            out.append(f"{lang}/{family} {len(tok)}")
    return "tokens: " + ", ".join(out)


def stage_overlap(work: Path, args: argparse.Namespace) -> str:
    """Vocab tables, overlap with Gemma 3 and coverage (the paper's Table 6) of all 9 targets."""
    from embtransfer.models.loading import load_tokenizer
    from embtransfer.vocab.canonical import read_vocab, vocab_table, write_vocab
    from embtransfer.vocab.overlap import compute_overlap, count_tokens, coverage, write_overlap

    source = read_vocab(work / "gemma3.parquet")
    out = []
    for target in TARGETS:
        lang = target.split("_")[0]
        tok = load_tokenizer(work / target)
        table = vocab_table(tok)
        write_vocab(table, work / f"{target}.parquet")
        pairs = compute_overlap(source, table)
        write_overlap(pairs, work / f"{target}_overlap.parquet")
        cov = coverage(pairs, table, count_tokens(tok, work / f"{lang}.txt", max_lines=20_000))
        out.append(f"{target} {cov['coverage_pct']:.0f}% of vocab, "
                   f"{cov['corpus_coverage_pct']:.0f}% of text")
    return "; ".join(out)


def stage_source(work: Path, args: argparse.Namespace) -> str:
    import torch
    from transformers import AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(hidden_size=HIDDEN, num_hidden_layers=1, intermediate_size=6912,
                              num_attention_heads=4, num_key_value_heads=1, head_dim=256,
                              max_position_embeddings=2048)
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(work / "source")
    AutoTokenizer.from_pretrained(str(gemma3_dir())).save_pretrained(work / "source")
    params = sum(p.numel() for p in model.parameters())
    return f"{config.vocab_size} x {HIDDEN}, {params / 1e6:.0f}M parameters"


def stage_fasttext(work: Path, args: argparse.Namespace) -> str:
    """Word-level fastText on each raw corpus (en: the aligned space's source side), and
    token-level fastText on the German byte-level target's tokenization (FOCUS)."""
    from embtransfer.fasttext.vectors import tokenize_for_fasttext, train_fasttext
    from embtransfer.models.loading import load_tokenizer

    out = []
    en = work / "en.txt"
    if not en.exists():
        en.write_text(corpus("en").read_text(encoding="utf-8"), encoding="utf-8")
    for lang in ("en", *LANGS):
        start = time.perf_counter()
        train_fasttext(work / f"{lang}.txt", work / f"{lang}_words.bin", FASTTEXT, 0, 2)
        out.append(f"{lang} words {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    tokenize_for_fasttext(load_tokenizer(work / "de_bytelevel_bpe"), work / "de.txt",
                          work / "de_tokens.txt")
    train_fasttext(work / "de_tokens.txt", work / "de_tokens.bin", focus_fasttext(), 0, 2)
    out.append(f"de_bytelevel_bpe tokens {time.perf_counter() - start:.1f} s")
    return ", ".join(out)


def _support(table, stats: dict) -> str:
    import numpy as np

    support = table.column("support").to_numpy()[~table.column("missing").to_numpy()]
    rows = max(int(stats["n_with_neighbors"]), 1)
    return (f"support median {np.median(support):.0f}, p90 {np.percentile(support, 90):.0f}, "
            f"degenerate {stats['degenerate']}/{rows} ({100 * stats['degenerate'] / rows:.2f}%)")


def stage_neighbors(work: Path, args: argparse.Namespace) -> str:
    """Sparsemax neighbour tables: word level for every method target (SALT, FOCUS), token
    level for the German byte-level target (FOCUS's default), with their support sizes."""
    from embtransfer.fasttext.vectors import load_fasttext, token_vectors
    from embtransfer.neighbors.search import compute_neighbors, write_neighbors
    from embtransfer.vocab.canonical import read_vocab
    from embtransfer.vocab.overlap import read_overlap

    out = []
    jobs = [(t, "word") for t in METHOD_TARGETS] + [("de_bytelevel_bpe", "token")]
    for target, kind in jobs:
        lang = target.split("_")[0]
        start = time.perf_counter()
        model = load_fasttext(work / f"{lang}_{'words' if kind == 'word' else 'tokens'}.bin")
        vectors, missing = token_vectors(model, read_vocab(work / f"{target}.parquet"), kind)
        pairs = read_overlap(work / f"{target}_overlap.parquet")
        table, stats = compute_neighbors(vectors, missing, pairs["target_id"].to_numpy(),
                                         pairs["source_id"].to_numpy(), threads=2)
        write_neighbors(table, stats, work / f"{target}_neighbors_{kind}.parquet")
        out.append(f"{target}/{kind} {time.perf_counter() - start:.1f} s: "
                   f"{stats['n_with_neighbors']} rows, {int(missing.sum())} without a vector, "
                   + _support(table, stats))
    return "; ".join(out)


def stage_aligned(work: Path, args: argparse.Namespace) -> str:
    """WECHSEL's and OFA's aligned space: English -> target fastText by Procrustes on the
    FreeDict dictionary, then both vocabularies' token vectors."""
    from embtransfer.data.dictionaries import read_freedict
    from embtransfer.fasttext.vectors import load_fasttext
    from embtransfer.transfer.aligned import (
        align_from_dictionary,
        token_vectors_aligned,
        write_aligned,
    )
    from embtransfer.vocab.canonical import read_vocab

    out = []
    source_ft = load_fasttext(work / "en_words.bin")
    source_vocab = read_vocab(work / "gemma3.parquet")
    maps = {}
    for lang, pair in DICTIONARY_OF.items():
        start = time.perf_counter()
        pairs = read_freedict(dictionary(pair))
        target_ft = load_fasttext(work / f"{lang}_words.bin")
        W, stats = align_from_dictionary(source_ft, target_ft, pairs)
        maps[lang] = (W, stats, target_ft)
        out.append(f"en->{lang} ({pair}, {len(pairs)} pairs) {time.perf_counter() - start:.1f}"
                   f" s: {stats['pairs_used']} used, P@1 {stats['precision_at_1']:.3f} of "
                   f"{stats['p1_candidates']} candidates")
    for target in METHOD_TARGETS:
        W, stats, target_ft = maps[target.split("_")[0]]
        aligned = token_vectors_aligned(source_ft, target_ft, W, source_vocab,
                                        read_vocab(work / f"{target}.parquet"))
        write_aligned(work / f"{target}_aligned.safetensors", aligned, W, stats)
        out.append(f"{target}: {int((~aligned.target_missing).sum())} target and "
                   f"{int((~aligned.source_missing).sum())} source tokens with a vector")
    return "; ".join(out)


def stage_plm(work: Path, args: argparse.Namespace) -> str:
    """GPT-2-style target PLMs, one per method target: its vocabulary, width 768."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from embtransfer.models.loading import check_tokenizer_model_agreement, load_tokenizer

    out = []
    for target in METHOD_TARGETS:
        tok = load_tokenizer(work / target)
        config = GPT2Config(vocab_size=len(tok), n_embd=PLM_HIDDEN, n_layer=1, n_head=12,
                            n_positions=1024, bos_token_id=tok.bos_token_id,
                            eos_token_id=tok.eos_token_id)
        torch.manual_seed(0)
        GPT2LMHeadModel(config).save_pretrained(work / f"{target}_plm")
        tok.save_pretrained(work / f"{target}_plm")
        check_tokenizer_model_agreement(work / f"{target}_plm", work / f"{target}_plm")
        out.append(f"{target} {config.vocab_size} x {PLM_HIDDEN}")
    return ", ".join(out)


def _regression(work: Path, args: argparse.Namespace, target: str) -> str:
    import numpy as np

    from embtransfer.models.loading import load_embeddings
    from embtransfer.neighbors.search import Neighbors, read_neighbors
    from embtransfer.transfer.regression import salt_coefficients, write_coefficients

    cap = args.salt_max_neighbors or None
    table, _ = read_neighbors(work / f"{target}_neighbors_word.parquet")
    plm = load_embeddings(work / f"{target}_plm")  # the source is read by transfer only
    result = salt_coefficients(plm.input, Neighbors.from_table(table), device="cpu",
                               max_neighbors=cap)
    write_coefficients(result, work / f"{target}_projected.safetensors",
                       work / f"{target}_projected.json")
    stats = result["stats"]
    k = table.column("k").to_numpy()
    return (f"{target}: {stats['counts']}, k median {np.median(k[k > 0]):.0f} max "
            f"{k.max()}, {stats['n_capped']} capped (cap {cap}), "
            f"solve {stats['seconds']['solve']:.1f} s")


def stage_regression(work: Path, args: argparse.Namespace) -> str:
    """SALT step 4 as ``workflow/scripts/transfer/salt_regression.py`` runs it, on the CPU,
    neighbour sets uncapped unless ``--salt-max-neighbors``; one worker job per target."""
    return "; ".join(in_workers(_regression, work, args, list(METHOD_TARGETS)))


def _inputs(work: Path, target: str, source, source_vocab, full: bool):
    """TransferInputs of ``target``; ``full``: every method's inputs (a method target)."""
    from embtransfer.models.loading import load_embeddings, load_tokenizer
    from embtransfer.neighbors.search import Neighbors, read_neighbors
    from embtransfer.transfer.aligned import read_aligned
    from embtransfer.transfer.methods.base import TransferInputs
    from embtransfer.transfer.regression import read_coefficients
    from embtransfer.vocab.canonical import read_vocab
    from embtransfer.vocab.overlap import read_overlap

    inputs = TransferInputs(source.input, source.output, source_vocab,
                            read_vocab(work / f"{target}.parquet"),
                            read_overlap(work / f"{target}_overlap.parquet"), seed=0)
    if full:
        for kind in ("word", "token"):
            path = work / f"{target}_neighbors_{kind}.parquet"
            if path.exists():
                inputs.neighbors[kind] = Neighbors.from_table(read_neighbors(path)[0])
        inputs.plm_input = load_embeddings(work / f"{target}_plm").input
        inputs.projected = read_coefficients(work / f"{target}_projected.safetensors",
                                             source.input.shape[0])
        inputs.aligned = read_aligned(work / f"{target}_aligned.safetensors")[0]
        inputs.source_tokenizer = load_tokenizer(work / "source")
    return inputs


def transfer_jobs() -> list[tuple[str, tuple[str, ...]]]:
    """(target, methods) of the transfer stage's jobs: every method on each method target
    (:data:`TOGETHER` in one job, then the others one by one, the slowest first), then
    :data:`KEPT_METHOD` on the other targets."""
    methods = bench_methods()
    together = tuple(m for m in TOGETHER if m in methods)
    rest = [m for m in SLOW_FIRST if m in methods] + [
        m for m in methods if m not in SLOW_FIRST and m not in together]
    per_target = ([together] if together else []) + [(m,) for m in rest]
    return [(t, ms) for t in METHOD_TARGETS for ms in per_target] + [
        (t, (KEPT_METHOD,)) for t in TARGETS if t not in METHOD_TARGETS]


#: a transfer worker's inputs of its latest target: consecutive jobs share a target
_LOADED: dict[str, object] = {}


def _transfer(work: Path, args: argparse.Namespace,
              job: tuple[str, tuple[str, ...]]) -> list[str]:
    """Methods on one target: rows, checkpoint, reloaded with ``from_pretrained``.
    The :data:`KEPT_METHOD` checkpoint is kept (``<target>_ckpt``, for the zero-shot and
    LAPT stages); the others are removed once loaded."""
    import shutil

    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    from embtransfer.models.loading import load_embeddings
    from embtransfer.transfer.checkpoint import write_transferred_checkpoint
    from embtransfer.transfer.run import run_method
    from embtransfer.vocab.canonical import read_vocab

    target, methods = job
    if "source" not in _LOADED:
        _LOADED["source"] = load_embeddings(work / "source")
        _LOADED["source_vocab"] = read_vocab(work / "gemma3.parquet")
    if _LOADED.get("target") != target:
        _LOADED.pop("inputs", None)  # one target's inputs in memory at a time
        _LOADED["inputs"] = _inputs(work, target, _LOADED["source"], _LOADED["source_vocab"],
                                    target in METHOD_TARGETS)
        _LOADED["target"] = target
    inputs = _LOADED["inputs"]
    # FOCUS reads token-level neighbours where they were built, else word-level ones
    options = {"focus": {"vectors": "token" if "token" in inputs.neighbors else "word"}}
    notes = []
    for method in methods:
        start = time.perf_counter()
        result = run_method(method, inputs, options.get(method, {}))
        ckpt = work / (f"{target}_ckpt" if method == KEPT_METHOD else f"{target}_{method}")
        write_transferred_checkpoint(work / "source", work / target,
                                     np.asarray(result.input_rows),
                                     None if result.output_rows is None
                                     else np.asarray(result.output_rows), ckpt)
        model = AutoModelForCausalLM.from_pretrained(ckpt, torch_dtype=torch.bfloat16)
        rows = model.get_input_embeddings().weight.shape[0]
        if rows < len(inputs.target_vocab) or not torch.isfinite(
                model.get_input_embeddings().weight.float()).all():
            raise SystemExit(f"{ckpt}: {rows} rows or non-finite embeddings")
        del model
        if method != KEPT_METHOD:
            shutil.rmtree(ckpt)
        notes.append(f"{method} {time.perf_counter() - start:.1f}")
        print(f"  transfer {target}: {notes[-1]} s", file=sys.stderr, flush=True)
    return notes


def stage_transfer(work: Path, args: argparse.Namespace) -> str:
    """Every catalog method on each method target (one per family) and ``heuristics`` on the
    other targets (:func:`transfer_jobs`), one worker job each."""
    jobs = transfer_jobs()
    notes = in_workers(_transfer, work, args, jobs)
    by_target: dict[str, list[str]] = {}
    for (target, _), job_notes in zip(jobs, notes, strict=True):
        by_target.setdefault(target, []).extend(job_notes)
    return "; ".join(f"{t}: " + ", ".join(n) for t, n in by_target.items())


def stage_zeroshot(work: Path, args: argparse.Namespace) -> str:
    from embtransfer.evaluation.intrinsic import evaluate_text

    out = []
    for target in TARGETS:
        lang = target.split("_")[0]
        result = evaluate_text(work / f"{target}_ckpt", work / f"{lang}_valid.txt",
                               max_length=128, max_lines=args.zeroshot_lines, device="cpu")
        out.append(f"{target} {result.get('loss'):.2f}")
    return f"held-out loss ({KEPT_METHOD}, {args.zeroshot_lines} lines): " + ", ".join(out)


def _lapt(model: Path, out: Path, work: Path, args: argparse.Namespace) -> str:
    from embtransfer.lapt.trainer import train_lapt

    cfg = {"max_length": 128, "global_batch_size": 2, "micro_batch_size": 2,
           "max_steps": args.lapt_steps, "log_every": 1, "eval_fractions": [],
           "checkpoint_every": 10_000, "threads": 2, "loss_chunk_rows": 1024}
    summary = train_lapt(model, work / "de.txt", work / "de_valid.txt", out, cfg, 0,
                         work_dir=out.with_suffix(".work"), log=lambda _msg: None)
    return (f"{summary['step']} steps, train loss {summary['final_train_loss']:.3f}, "
            f"{summary['tokens_per_s']:.0f} tokens/s, elapsed {summary['elapsed_s']:.1f} s")


def stage_lapt(work: Path, args: argparse.Namespace) -> str:
    """A few LAPT steps on the German byte-level checkpoint (the target's vocabulary)."""
    return _lapt(work / "de_bytelevel_bpe_ckpt", work / "ckpt_lapt", work, args)


def stage_lapt_source(work: Path, args: argparse.Namespace) -> str:
    """The same steps on the source model: Gemma 3's 262,208-row vocabulary."""
    return _lapt(work / "source", work / "source_lapt", work, args)


STAGES = {"vocab": stage_vocab, "targets": stage_targets, "overlap": stage_overlap,
          "source": stage_source, "fasttext": stage_fasttext, "neighbors": stage_neighbors,
          "aligned": stage_aligned, "plm": stage_plm, "regression": stage_regression,
          "transfer": stage_transfer, "zeroshot": stage_zeroshot, "lapt": stage_lapt,
          "lapt_source": stage_lapt_source}
DEFAULT_STAGES = [name for name in STAGES if name != "lapt_source"]


def _child(name: str, work: str, args: argparse.Namespace, queue: mp.Queue) -> None:
    start = time.perf_counter()
    note = STAGES[name](Path(work), args)
    # the stage's process and its workers (which run beside it)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2 + max(WORKER_PEAKS,
                                                                                default=0.0)
    queue.put((time.perf_counter() - start, peak, note))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", help="keep the artifacts here (default: a temporary folder)")
    parser.add_argument("--zeroshot-lines", type=int, default=50,
                        help="held-out lines per target in the zero-shot stage")
    parser.add_argument("--stages", default=",".join(DEFAULT_STAGES),
                        help=f"comma-separated, in order (default: all but lapt_source): "
                             f"{','.join(STAGES)}")
    parser.add_argument("--salt-max-neighbors", type=int, default=0,
                        help="cap on each token's neighbour set in the SALT regression "
                             "(default 0: uncapped, as the paper)")
    parser.add_argument("--lapt-steps", type=int, default=3)
    args = parser.parse_args()
    names = args.stages.split(",")
    unknown = sorted(set(names) - set(STAGES))
    if unknown:
        parser.error(f"unknown stage(s) {unknown}; the stages are {','.join(STAGES)}")
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        total = time.perf_counter()
        for name in names:
            queue = ctx.Queue()
            proc = ctx.Process(target=_child, args=(name, str(work), args, queue))
            proc.start()
            proc.join()
            if proc.exitcode != 0:
                raise SystemExit(f"stage {name} failed (exit {proc.exitcode})")
            seconds, peak, note = queue.get()
            print(f"{name:11s} {seconds:7.1f} s  peak {peak:5.2f} GB  {note}", flush=True)
        print(f"total       {time.perf_counter() - total:7.1f} s")


if __name__ == "__main__":
    main()

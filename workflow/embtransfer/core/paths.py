"""Every artifact path of the workflow, as a template with Snakemake wildcards.

The one place an artifact's path is written: the rules use these templates as their
outputs and inputs (``output: paths.VOCAB``, ``paths.VOCAB.fill(model=w.source)`` in an input
function), the report fills them to name the files it expects and parses them back to
read a run's identity from a path. Changing a template here moves the artifact for both.

A :class:`Template` is a ``str`` (Snakemake takes it as is, wildcards included; it is not
callable, so Snakemake never mistakes it for an input function); :meth:`Template.fill` fills
the wildcards given and leaves the others as wildcards; :meth:`Template.parse` reads
the wildcards back from a path; :meth:`Template.at` moves a ``results/`` template into
another results folder (the report's tests build theirs under a temporary directory).

Torch-free and import-light: the Snakefile imports it.
"""

from __future__ import annotations

import re
import string
from typing import Any

RESULTS = "results"
#: Job logs and Snakemake's ``benchmark:`` files of the heavy jobs (wall time, peak memory,
#: I/O as TSV): run-dependent, so beside each other (not results/benchmarks/, the world's
#: benchmark tasks).
LOGS = "results/logs"
BENCHMARKS = f"{LOGS}/benchmark"
#: Where the artifacts of the stages repeated per replicate seed (``seeds``) lie:
#: results/seed<N>/, mirroring results/ (embtransfer.core.grid.seeds). The world, the
#: corpora, the vocabularies and the pretrained models are drawn once, under results/.
SEEDED = "results/seed{seed}"
_SEED_FOLDER = re.compile(r"(?:^|/)seed(\d+)/")


def seed_of(path: Any) -> int | None:
    """The replicate seed of a path under :data:`SEEDED`; None for an artifact drawn once."""
    match = _SEED_FOLDER.search(str(path))
    return None if match is None else int(match.group(1))


class _KeepMissing(dict):
    """Format values that leave a wildcard nobody filled as the wildcard."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


class Template(str):
    """A path with ``{name}`` wildcards (Snakemake's form); the path itself when used as a str."""

    constraints: dict[str, str]

    def __new__(cls, text: str, **constraints: str) -> Template:
        # ``constraints``: a regex per wildcard where one path component is too loose
        # (two wildcards in one component); the rule uses them as its wildcard_constraints.
        self = super().__new__(cls, text)
        self.constraints = constraints
        return self

    @property
    def wildcards(self) -> tuple[str, ...]:
        return tuple(name for _, name, _, _ in string.Formatter().parse(self) if name)

    def fill(self, **values: Any) -> str:
        """The path with ``values`` filled in; wildcards not given stay wildcards (extra
        values, e.g. a rule's other wildcards, are ignored)."""
        return self.format_map(_KeepMissing({k: str(v) for k, v in values.items()}))

    def at(self, results: str) -> Template:
        """This ``results/...`` template under the results folder ``results`` instead."""
        if not self.startswith(f"{RESULTS}/"):
            raise ValueError(f"{self} is not under {RESULTS}/")
        rest = self[len(RESULTS) + 1:]
        return Template(f"{results}/{rest}" if results else rest, **self.constraints)

    def _regex(self) -> re.Pattern[str]:
        # A results/ template's leading folder matches any folder, or none (a relative path
        # inside it); each wildcard matches one path component (greedy: the longest).
        pattern = ""
        rest: str = self
        if self.startswith(f"{RESULTS}/"):
            pattern, rest = r"(?:(?P<_root>.*)/)?", self[len(RESULTS) + 1:]
        for literal, name, _, _ in string.Formatter().parse(rest):
            pattern += re.escape(literal)
            if name:
                pattern += rf"(?P<{name}>{self.constraints.get(name, '[^/]+')})"
        return re.compile(pattern + r"\Z")

    def parse(self, path: Any) -> dict[str, str] | None:
        """The wildcards of ``path`` (any str or os.PathLike) if it is this template's, else
        None. A ``results/...`` template matches under any results folder."""
        match = self._regex().fullmatch(str(path))
        if match is None:
            return None
        return {k: v for k, v in match.groupdict().items() if k != "_root"}

    def root_of(self, path: Any) -> str | None:
        """The results folder of ``path`` under this ``results/...`` template ('' when the
        path starts inside it), None if it is not this template's."""
        match = self._regex().fullmatch(str(path))
        return None if match is None else (match.group("_root") or "")


# --- corpora (data.smk) -----------------------------------------------------------------------
WORLD = Template("results/world/world.json")
CORPUS = Template("results/corpus/{lang}/{split}.txt")
MIX_CORPUS = Template("results/corpus/mix/{model}/train.txt")
#: Real running text and FreeDict dictionaries from pinned packages (embtransfer.data.real_text),
#: which config/real_text.yaml reads as local corpora and freedict dictionaries.
REAL_CORPUS = Template("resources/real/corpora/{name}.txt")
REAL_CORPUS_STATS = Template("resources/real/corpora/{name}.stats.json")
FREEDICT_INDEX = Template("resources/real/dictionaries/freedict-{pair}.index")
FREEDICT_DATA = Template("resources/real/dictionaries/freedict-{pair}.dict.dz")

# --- models (models.smk) ----------------------------------------------------------------------
MODELS_DIR = "resources/models"
MODEL = Template("resources/models/{model}")
TOKENIZER = Template("resources/tokenizers/{model}")

# --- vocabularies and overlap (vocab.smk) -----------------------------------------------------
VOCAB = Template("results/vocab/{model}.parquet")
OVERLAP = Template("results/overlap/{source}/{target}.parquet")
COVERAGE = Template("results/overlap/{source}/{target}.coverage.json")
#: The miniature world's pairs measured as the real ones (embtransfer.vocab.kinds,
#: docs/calibration.md): coverage and the kinds of shared tokens, a row per pair.
SHARED_KINDS = Template("results/overlap/shared_kinds.csv")
# ... beside the committed real figures (rule calibration_table; shown in the report)
CALIBRATION_CSV = "results/report/calibration.csv"
CALIBRATION_MD = "results/report/calibration.md"
#: The miniature world's ground truth: each target token's translation as source ids
#: (embtransfer.world.truth), and its counts.
WORLD_TRUTH = Template(SEEDED + "/truth/{lang}/{source}/{target}.parquet")
WORLD_TRUTH_COUNTS = Template(SEEDED + "/truth/{lang}/{source}/{target}.json")
#: The shared tokens held out from every method (transfer.holdout, embtransfer.vocab.holdout):
#: the overlap with each row's kind and ``held_out``, and the counts per kind.
HOLDOUT = Template(SEEDED + "/holdout/{lang}/{source}/{target}.parquet")
HOLDOUT_COUNTS = Template(SEEDED + "/holdout/{lang}/{source}/{target}.json")
#: What a held-out transfer reads in place of the overlap, the neighbour tables and SALT's
#: regression: the same built from the shared tokens not held out (rules holdout,
#: holdout_neighbors, holdout_regression) ...
HOLDOUT_OVERLAP = Template(SEEDED + "/holdout/{lang}/{source}/{target}.overlap.parquet")
HOLDOUT_NEIGHBORS = Template(
    SEEDED + "/holdout_neighbors/{lang}/{source}/{target}/{vectors}.parquet")
HOLDOUT_REGRESSION = Template(
    SEEDED + "/holdout_regression/{lang}/{source}/{target}/projected.safetensors")
HOLDOUT_REGRESSION_META = Template(
    SEEDED + "/holdout_regression/{lang}/{source}/{target}/projected.json")
#: ... and what it writes: per held-out token and side, the method's row scored against the
#: token's true source row (rule holdout_transfer, embtransfer.evaluation.heldout_rows).
HOLDOUT_SCORES = Template(SEEDED + "/holdout_scores/{lang}/{source}/{target}/{method}.parquet")
# the held-out half of a real dictionary as the alignment truth (data/dictionary_split.py)
DICTIONARY_TRUTH = Template(SEEDED + "/truth_dictionary/{lang}/{source}/{target}.parquet")
DICTIONARY_TRUTH_COUNTS = Template(SEEDED + "/truth_dictionary/{lang}/{source}/{target}.json")

# --- fastText and token vectors (fasttext.smk) ------------------------------------------------
FASTTEXT_WORD = Template(SEEDED + "/fasttext/{lang}/word.bin")
FASTTEXT_TOKEN_TEXT = Template("results/fasttext/{lang}/token/{model}.txt")
FASTTEXT_TOKEN = Template(SEEDED + "/fasttext/{lang}/token/{model}.bin")
TOKEN_VECTORS = Template(SEEDED + "/token_vectors/{lang}/{vectors}/{model}.npy")
TOKEN_VECTORS_MISSING = Template(SEEDED + "/token_vectors/{lang}/{vectors}/{model}.missing.npy")
#: TokAlign's GloVe space of a language's corpus in one model's tokenization (rule
#: tokalign_glove, embtransfer.transfer.glove): vectors and which ids have none
GLOVE = Template(SEEDED + "/glove/{lang}/{model}.safetensors")

# --- neighbours (neighbors.smk) ---------------------------------------------------------------
NEIGHBORS = Template(SEEDED + "/neighbors/{lang}/{source}/{target}/{vectors}.parquet")

# --- regression, aligned vectors, transfer, zero-shot (transfer.smk) --------------------------
REGRESSION = Template(SEEDED + "/regression/{lang}/{source}/{target}/projected.safetensors")
REGRESSION_META = Template(SEEDED + "/regression/{lang}/{source}/{target}/projected.json")
ALIGNED = Template(SEEDED + "/aligned/{lang}/{source}/{target}.safetensors")
#: WECHSEL's and OFA's top-k search in the aligned space, shared by both (aligned.share_search)
ALIGNED_SEARCH = Template(SEEDED + "/aligned/{lang}/{source}/{target}.search.safetensors")
#: omp's and omp_salt_k's fits of one pair, solved once (rule omp_solve)
OMP_SOLVE = Template(SEEDED + "/omp/{lang}/{source}/{target}.safetensors")
#: Per language WECHSEL or OFA runs in: bilingual lexicon induction in the aligned fastText
#: spaces they search, on the dictionary's held-out half (embtransfer.transfer.fasttext_bli)
FASTTEXT_BLI = Template(SEEDED + "/fasttext_bli/{lang}.json")
TRANSFER_MODEL = Template(SEEDED + "/transfer/{lang}/{source}/{target}/{method}")
ZEROSHOT = Template(SEEDED + "/zeroshot/{lang}/{source}/{target}/{method}.json")
ZEROSHOT_SOURCE = Template("results/zeroshot/{lang}/{source}/source_model.json")

# --- LAPT (lapt.smk) --------------------------------------------------------------------------
LAPT_BLOCKS = Template("results/lapt_blocks/{lang}/{source}/{target}/{text}.npy")
LAPT_BLOCKS_META = Template("results/lapt_blocks/{lang}/{source}/{target}/{text}.json")
LAPT_MODEL = Template(SEEDED + "/lapt/{lang}/{source}/{target}/{method}")
LAPT_METRICS = Template(SEEDED + "/lapt/{lang}/{source}/{target}/{method}.metrics.jsonl")
#: The trainer's resumable state (checkpoint, metrics so far) while a LAPT job runs.
LAPT_WORK = Template(SEEDED + "/lapt/{lang}/{source}/{target}/{method}.work")

# --- evaluation (evaluation.smk) --------------------------------------------------------------
WORLD_BENCHMARKS = Template("results/benchmarks/{lang}")
EVAL = Template(SEEDED + "/eval/{stage}/{lang}/{source}/{target}/{method}/{task}.json")
EVAL_SOURCE = Template("results/eval/source/{lang}/{source}/{task}.json")
#: Per token of the world's truth: retrieval hits and cosine to the oracle row of every
#: method's checkpoint of one (stage, language, source, target) (embtransfer.evaluation.alignment)
ALIGNMENT = Template(SEEDED + "/alignment/{stage}/{lang}/{source}/{target}.parquet")
#: Per target PLM of the miniature world: do its input rows carry meaning (the span and
#: class probes of embtransfer.evaluation.plm_probes)
PLM_PROBE = Template(SEEDED + "/probes/{lang}/{source}/{target}.json")
LAPT_ZEROSHOT = Template(SEEDED + "/lapt_zeroshot/{lang}/{source}/{target}/{method}.json")
TOKENIZER_STATS = Template("results/intrinsic/tokenizers/{lang}.json")
# a source LLM pretrained here on real text against count models of its tokens
SOURCE_FLOOR = Template("results/intrinsic/source_floor/{source}.json")

# --- report (report.smk) ----------------------------------------------------------------------
REPORT_DIR = "results/report"
#: Every output of the report rule by name, as a file name under REPORT_DIR: the paper's
#: tables, the comparisons table every mark and finding reads (embtransfer.report.comparisons)
#: and the summaries beside it, the tables drawn from them, the figures, the findings.
REPORT_FILES = {
    **{f"table{n}_{kind}": f"table{n}.{kind}" for n in (1, 2, 3, 4, 5, 6, 8)
       for kind in ("md", "csv")},
    "comparisons_csv": "comparisons.csv",
    "summaries_csv": "summaries.csv",
    # every seed's own tests, each decided in its seed (comparisons.csv: across seeds)
    "seeds_csv": "seeds.csv",
    **{f"{name}_md": f"{name}.md" for name in ("comparisons", "alignment", "zeroshot",
                                               "lapt_zeroshot", "heldout")},
    **{f"{name}_{kind}": f"{name}.{kind}" for name in (
        "plm_probes", "fasttext_bli", "source_floor", "salt_conditioning", "lapt_movement",
        "new_rows", "heldout_kinds", "heldout_tracking")
       for kind in ("md", "csv")},
    "figure2": "figure2.png",
    "methods": "methods.png",
    "findings": "findings.md",
    "report_md": "report.md",
    "environment": "environment.json",
}

# --- downloads (the fetch_* rules of data.smk) ------------------------------------------------
FASTTEXT_CRAWL = Template("resources/fasttext/cc.{code}.300.bin")
WIKIPEDIA_SENTENCES = Template("resources/wikipedia/{lang}/sentences.txt")
NLTK_DIR = "resources/nltk_data"
MUSE_DIR = "resources/dictionaries/muse"
MUSE_DICTIONARY = Template("resources/dictionaries/muse/{src}-{tgt}.txt", src="[a-z]+",
                           tgt="[a-z]+")


def lm_eval_index(datasets_dir: str) -> str:
    """The download rule's index of the lm-eval datasets under ``evaluation.datasets_dir``."""
    return f"{datasets_dir}/tasks.json"


#: Every template, by its name here (the round-trip test walks them).
TEMPLATES: dict[str, Template] = {
    name: value for name, value in globals().items() if isinstance(value, Template)
}

"""The miniature world: languages, fact base and corpora built from a seed."""

from __future__ import annotations

import copy
import hashlib
import json
import random
import subprocess
import sys
import time
import unicodedata
from collections import Counter

import jsonschema
import pytest

from embtransfer.world.dictionary import dictionary
from embtransfer.world.languages import (
    WorldConfigError,
    build_world,
    value_pool,
    world_config,
    world_schema,
)
from embtransfer.world.questions import fact_question
from embtransfer.world.running_text import (
    _FRAME_DRAWERS,
    FRAME_WEIGHTS,
    MAX_CLAUSES,
    PASSAGE_REMENTIONS,
    _Index,
    _person_subject,
    fact_frame,
    fact_statement,
    generate_sentences,
    passage_facts,
    passage_text,
    render,
    sample_frame,
    word_types,
    words,
)

SEED = 1234
SRC, AR, VI = "en_mini", "ar_mini", "vi_mini"


@pytest.fixture(scope="module")
def world() -> dict:
    return build_world({}, SEED)


@pytest.fixture(scope="module")
def corpora(world: dict) -> dict[str, list[str]]:
    sizes = world["config"]["sentences"]
    return {
        lang: generate_sentences(
            world, lang, sizes["source_train" if lang == SRC else "target_train"], seed=7
        )
        for lang in world["languages"]
    }


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


# --- config ---------------------------------------------------------------------------


def test_schema_describes_and_defaults_every_key():
    def walk(schema: dict, where: str) -> None:
        if schema.get("type") == "object" and "properties" in schema:
            assert schema.get("additionalProperties") is False, where
        for key, sub in schema.get("properties", {}).items():
            assert "description" in sub, f"{where}.{key} has no description"
            assert "default" in sub, f"{where}.{key} has no default"
            walk(sub, f"{where}.{key}")
        if isinstance(schema.get("additionalProperties"), dict):
            walk(schema["additionalProperties"], f"{where}.*")

    schema = world_schema()
    assert schema["additionalProperties"] is False
    walk(schema, "world")
    # The defaults themselves satisfy the schema.
    jsonschema.validate(world_config({}), schema)


def test_config_defaults_and_errors():
    cfg = world_config(
        {"n_people": 5, "languages": {"en_mini": {"script": "latin"}, "xx": {"script": "arabic"}}}
    )
    assert cfg["n_people"] == 5 and cfg["sentences"]["valid"] == 2000
    assert cfg["languages"]["xx"]["word_order"] == "auto"
    with pytest.raises(jsonschema.ValidationError):
        world_config({"n_peple": 5})
    with pytest.raises(jsonschema.ValidationError):
        world_config({"languages": {"en_mini": {"script": "cyrillic"}, "x": {"script": "latin"}}})
    with pytest.raises(WorldConfigError, match="source_language"):
        world_config({"source_language": "de"})


# --- determinism ----------------------------------------------------------------------


def test_world_is_deterministic_and_json(world: dict):
    again = build_world({}, SEED)
    assert again == world
    assert json.loads(json.dumps(world)) == world
    other = build_world({}, SEED + 1)
    assert other["languages"][AR]["lexicon"] != world["languages"][AR]["lexicon"]
    assert other["facts"] != world["facts"]


def test_world_and_corpus_are_the_same_in_a_fresh_process(world: dict):
    code = (
        "import hashlib, json\n"
        "from embtransfer.world.languages import build_world\n"
        "from embtransfer.world.running_text import generate_sentences\n"
        f"w = build_world({{}}, {SEED})\n"
        "obj = [w, generate_sentences(w, 'vi_mini', 200, 3)]\n"
        "print(hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False)"
        ".encode()).hexdigest())\n"
    )
    # A different hash seed in the child: nothing may depend on Python's hash().
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "987"},
    ).stdout.strip()
    assert out == _digest([world, generate_sentences(world, VI, 200, 3)])


def test_corpora_are_deterministic(world: dict):
    for lang in world["languages"]:
        a = generate_sentences(world, lang, 300, seed=5)
        assert a == generate_sentences(world, lang, 300, seed=5)
        assert a != generate_sentences(world, lang, 300, seed=6)
        assert len(a) == 300 and all(line and "\n" not in line for line in a)


def test_default_corpora_are_fast(world: dict):
    sizes = world["config"]["sentences"]
    start = time.perf_counter()
    for lang in world["languages"]:
        n = sizes["source_train"] if lang == SRC else sizes["target_train"]
        generate_sentences(world, lang, n, seed=1)
        generate_sentences(world, lang, sizes["valid"], seed=2)
    # A few seconds on a slow CI core; about 1 s on a laptop.
    assert time.perf_counter() - start < 20


# --- scripts ----------------------------------------------------------------------------


@pytest.mark.parametrize("lang", [SRC, AR, VI])
def test_passages_state_one_relation_a_person_and_mention_it_again(world: dict, lang: str):
    import random

    for i in range(30):
        facts = passage_facts(world, random.Random(i), 3)
        assert len({f["relation"] for f in facts}) == 3
        assert len({f["subject"] for f in facts}) == 3
        assert all(f["value"] in value_pool(world, f["value_type"]) for f in facts)
        text = passage_text(world, random.Random(i), lang)
        rng = random.Random(i)  # the passage's own draws: its size, then its facts
        stated = passage_facts(world, rng, rng.randint(2, 3))
        # Every statement, then every statement again in each re-mention round.
        sentences = Counter(text.rstrip(".").split(". "))
        assert sum(sentences.values()) == len(stated) * (1 + PASSAGE_REMENTIONS)
        for fact in stated:
            assert sentences[fact_statement(world, fact, lang).rstrip(".")] == \
                1 + PASSAGE_REMENTIONS, text


def test_passages_fill_their_share_of_the_lines(world: dict, corpora: dict):
    share = world["config"]["passage_fraction"]
    n = len(corpora[SRC])
    # Passage lines are the long ones: 2-3 statements, three times each.
    long = sum(line.count(". ") >= 5 for line in corpora[SRC])
    assert abs(long / n - share) < 0.02, (long / n, share)


def test_ar_mini_is_written_in_the_arabic_block(corpora: dict):
    text = "\n".join(corpora[AR])
    letters = [ch for ch in text if ch.isalpha()]
    arabic = [ch for ch in letters if 0x0621 <= ord(ch) <= 0x064A]
    assert len(arabic) / len(letters) > 0.9, "mostly Arabic-block letters"
    assert len(arabic) < len(letters), "some names/loanwords stay in Latin, as in real text"
    assert all(0x0621 <= ord(ch) <= 0x064A or ch.isascii() for ch in letters)
    raw = text.encode("utf-8")
    multibyte = sum(1 for b in raw if b >= 0x80)
    assert multibyte / len(raw) > 0.5


def test_vi_mini_has_combining_marks_in_nfd(corpora: dict):
    text = "\n".join(corpora[VI])
    marks = Counter(ch for ch in text if unicodedata.combining(ch))
    assert {"\u0300", "\u0301", "\u0303", "\u0309", "\u0323"} <= set(marks)
    assert unicodedata.normalize("NFD", text) == text
    assert unicodedata.normalize("NFC", text) != text, "must not be NFC-normalised"
    assert all(
        ord(ch) < 0x80 or unicodedata.combining(ch) or ch == "đ" or ch == "Đ" for ch in text
    ), "no precomposed letters"


def test_source_is_plain_latin(corpora: dict):
    assert all(line.isascii() for line in corpora[SRC])


# --- languages differ -------------------------------------------------------------------


def test_languages_have_their_own_words(world: dict):
    langs = world["languages"]
    native = [c["id"] for c in world["concepts"] if not c["loan"]]
    for a, b in [(SRC, AR), (SRC, VI), (AR, VI)]:
        same = [cid for cid in native if langs[a]["lexicon"][cid] == langs[b]["lexicon"][cid]]
        assert not same, f"{a} and {b} share native words {same[:5]}"
    for lang in langs.values():
        forms = list(lang["lexicon"].values())
        assert len(set(forms)) == len(forms), "no homonyms inside a language"
    morph = {k: v["morphology"]["type"] for k, v in langs.items()}
    assert len(set(morph.values())) == 3


def test_languages_have_different_word_order(world: dict):
    fact = next(f for f in world["facts"] if f["relation"] == "owns")
    positions = {}
    for lang, spec in world["languages"].items():
        sentence = words(fact_statement(world, fact, lang))
        name = spec["names"][fact["subject"]]
        verb_stem = spec["lexicon"]["fn_own"]
        verb_at = next(i for i, w in enumerate(sentence) if verb_stem in w)
        positions[lang] = (sentence.index(name), verb_at, len(sentence))
    assert positions[SRC][0] < positions[SRC][1] < positions[SRC][2] - 1  # S V O
    assert positions[AR][1] < positions[AR][0]  # V S O
    assert positions[VI][0] < positions[VI][1] == positions[VI][2] - 1  # S O V


def test_parallel_rendering_keeps_shared_tokens(world: dict):
    # the same 300 generic frames rendered in every language: a sentence-aligned corpus
    rng, idx = random.Random(1), _Index(world)
    frames = [sample_frame(world, rng, idx) for _ in range(300)]
    par = {lang: [render(world, f, lang) for f in frames] for lang in world["languages"]}
    for i in range(300):
        digits = [sorted(w for w in words(par[lang][i]) if w.isdigit()) for lang in par]
        assert digits[0] == digits[1] == digits[2]


def test_every_frame_kind_is_drawn(world: dict):
    # sample_frame draws each kind of FRAME_WEIGHTS with its own drawer
    rng, idx = random.Random(3), _Index(world)
    verbs = {sample_frame(world, rng, idx)["verb"] for _ in range(2000)}
    assert {"fn_go", "fn_be", "fn_live", "fn_equal"} <= verbs
    assert set(_FRAME_DRAWERS) == set(FRAME_WEIGHTS)


def test_shared_material_appears_in_every_language(world: dict, corpora: dict):
    types = {lang: word_types(lines) for lang, lines in corpora.items()}
    numbers = set.intersection(*({w for w in t if w.isdigit()} for t in types.values()))
    assert len(numbers) > 30
    names = world["names"]
    latin_names = {names[n] for n in world["entities"]["extra_names"] + world["entities"]["cities"]}
    assert len(latin_names & types[SRC] & types[VI]) > 0.8 * len(latin_names)
    kept = {names[n] for n in world["languages"][AR]["names_kept_latin"]}
    assert kept & types[AR], "some names kept in Latin in ar_mini"
    loans = [c["id"] for c in world["concepts"] if c["loan"]]
    assert loans
    for lang in (AR, VI):
        spec = world["languages"][lang]
        assert set(spec["loanwords"]) == set(loans)
        kept_loans = [c for c, how in spec["loanwords"].items() if how == "kept"]
        assert kept_loans and all(
            spec["lexicon"][c] == world["languages"][SRC]["lexicon"][c] for c in kept_loans
        )


@pytest.mark.parametrize("lang", [AR, VI])
def test_word_type_overlap_with_source_is_partial(corpora: dict, lang: str):
    # the fraction of the target corpus's word types that the source corpus has too
    target_types = word_types(corpora[lang])
    overlap = len(target_types & word_types(corpora[SRC])) / len(target_types)
    assert 0.05 < overlap < 0.8, overlap


# --- semantics --------------------------------------------------------------------------


def test_frames_respect_selectional_restrictions(world: dict):
    import random

    classes = {c["id"]: c["class"] for c in world["concepts"]}
    rng = random.Random(0)
    idx = _Index(world)
    objects_of: dict[str, Counter] = {}
    same_group = total = 0
    groups = {c["id"]: c["group"] for c in world["concepts"]}
    for _ in range(3000):
        frame = sample_frame(world, rng, idx)
        vcls = classes[frame["verb"]]
        obj = frame["obj"]
        if obj and "noun" in obj and vcls.startswith("verb_"):
            objects_of.setdefault(vcls, Counter())[classes[obj["noun"]]] += 1
            if "noun" in frame["subj"] and classes[frame["subj"]["noun"]] == "animal":
                total += 1
                same_group += groups[obj["noun"]] == groups[frame["subj"]["noun"]]
    assert set(objects_of["verb_food"]) == {"food"}
    assert set(objects_of["verb_object"]) == {"object"}
    assert set(objects_of["verb_animal"]) == {"animal"}
    assert set(objects_of["verb_place"]) == {"place"}
    # Group affinity: animals mostly eat/chase things of their own group.
    assert same_group / total > 0.6


def test_dictionary_pairs_are_aligned_by_concept(world: dict):
    for tgt in (AR, VI):
        pairs = dictionary(world, SRC, tgt)
        src_lex, tgt_lex = world["languages"][SRC]["lexicon"], world["languages"][tgt]["lexicon"]
        by_form = {v: k for k, v in src_lex.items()}
        lemma_pairs = [(s, t) for s, t in pairs if s in by_form]
        assert len(lemma_pairs) >= len(world["concepts"]) - 4
        for s, t in lemma_pairs:
            assert tgt_lex[by_form[s]] == t
        assert all(" " not in s and " " not in t for s, t in pairs)
    ar_pairs = dict(dictionary(world, SRC, AR))
    vi_pairs = dict(dictionary(world, SRC, VI))
    animal = world["languages"][SRC]["lexicon"]["animal_003"]
    assert ar_pairs[animal] == world["languages"][AR]["lexicon"]["animal_003"]
    assert vi_pairs[animal] == world["languages"][VI]["lexicon"]["animal_003"]


# --- facts ------------------------------------------------------------------------------


def test_fact_base(world: dict):
    facts = world["facts"]
    cfg = world["config"]
    assert len(facts) == 7 * cfg["n_people"] + 2 * cfg["n_companies"]
    assert len({(f["subject"], f["relation"]) for f in facts}) == len(facts)
    by = {(f["subject"], f["relation"]): f["value"] for f in facts}
    for person in world["entities"]["people"]:
        assert cfg["reference_year"] - by[(person, "born")] - by[(person, "age")] in (0, 1)
    for f in facts:
        assert f["value"] in value_pool(world, f["value_type"])


def test_every_fact_is_stated_several_times_in_the_source_corpus(world: dict, corpora: dict):
    counts = Counter(corpora[SRC])
    stated = [counts[fact_statement(world, f, SRC)] for f in world["facts"]]
    assert min(stated) >= 3
    expected = round(len(corpora[SRC]) * world["config"]["fact_sentence_fraction"])
    assert sum(stated) == expected
    # Targets get no fact statements by default.
    target = set(corpora[AR])
    assert not any(fact_statement(world, f, AR) in target for f in world["facts"])


def test_generic_sentences_never_contradict_facts(world: dict, corpora: dict):
    spec = world["languages"][SRC]
    statements = {fact_statement(world, f, SRC) for f in world["facts"]}
    people = {spec["names"][p] for p in world["entities"]["people"]}
    live = spec["lexicon"]["fn_live"]
    for line in corpora[SRC]:
        ws = words(line)
        if people & set(ws) and any(w.startswith(live) for w in ws):
            assert line in statements, line


@pytest.mark.parametrize("lang", [SRC, AR, VI])
def test_fact_questions(world: dict, lang: str):
    n_choices = world["config"]["n_choices"]
    golds = Counter()
    for fact in world["facts"]:
        q = fact_question(world, fact, lang)
        assert len(q["choices"]) == n_choices == len(set(q["values"]))
        assert q["values"][q["gold"]] == fact["value"]
        pool = value_pool(world, fact["value_type"])
        assert all(v in pool for v in q["values"]), "distractors of the same type"
        full = (q["query"] + " " + q["choices"][q["gold"]]).strip()
        assert full == fact_statement(world, fact, lang)
        for v, choice in zip(q["values"], q["choices"], strict=True):
            assert (q["query"] + " " + choice).strip() == render(
                world, fact_frame(world, fact, v), lang
            )
        golds[q["gold"]] += 1
    assert len(golds) == n_choices, "the gold position varies"
    # The same question offers the same values in every language.
    fact = world["facts"][0]
    assert fact_question(world, fact, lang)["values"] == fact_question(world, fact, SRC)["values"]


# --- more languages ---------------------------------------------------------------------


def test_a_third_target_leaves_the_others_unchanged(world: dict):
    cfg = copy.deepcopy(world["config"])
    cfg["languages"]["tr_mini"] = {"script": "latin", "morphology": "agglutinative"}
    bigger = build_world(cfg, SEED)
    assert bigger["target_languages"] == [AR, "tr_mini", VI]
    for lang in (SRC, AR, VI):
        assert bigger["languages"][lang] == world["languages"][lang]
    lines = generate_sentences(bigger, "tr_mini", 200, seed=1)
    assert len(word_types(lines)) > 100
    for fact in bigger["facts"][:10]:
        q = fact_question(bigger, fact, "tr_mini")
        assert q["values"][q["gold"]] == fact["value"]


@pytest.mark.parametrize("morphology", ["suffixing", "prefixing", "isolating", "agglutinative"])
@pytest.mark.parametrize("script", ["latin", "arabic", "latin_diacritics"])
def test_every_script_and_morphology_renders(script: str, morphology: str):
    cfg = {
        "languages": {
            "en_mini": {"script": "latin"},
            "xx": {"script": script, "morphology": morphology},
        },
        "n_people": 4,
        "n_companies": 2,
    }
    world = build_world(cfg, 3)
    assert world["languages"]["xx"]["morphology"]["type"] == morphology
    assert world["languages"]["en_mini"]["morphology"]["type"] in (
        "suffixing",
        "prefixing",
        "isolating",
        "agglutinative",
    )  # drawn from the seed
    lines = generate_sentences(world, "xx", 300, seed=1)
    assert len(word_types(lines)) > 50
    forms = list(world["languages"]["xx"]["lexicon"].values())
    assert len(set(forms)) == len(forms)
    for fact in world["facts"]:
        q = fact_question(world, fact, "xx")
        assert (q["query"] + " " + q["choices"][q["gold"]]).strip() == fact_statement(
            world, fact, "xx"
        )


@pytest.mark.parametrize("s", [0.0, 1.0])
def test_concepts_are_drawn_by_their_zipf_weight(s: float):
    """world.concept_zipf: the concept of rank r in its class is drawn with weight r^-s
    (chi-square against those weights over 30,000 draws); 0 draws them uniformly."""
    world = build_world({"concept_zipf": s}, SEED)
    idx, rng = _Index(world), random.Random(5)
    animals = idx.by_class["animal"]
    counts = Counter(idx.pick(rng, "animal")["id"] for _ in range(30_000))
    weights = [(rank + 1) ** -s for rank in range(len(animals))]
    expected = [30_000 * w / sum(weights) for w in weights]
    chi2 = sum((counts[c["id"]] - e) ** 2 / e for c, e in zip(animals, expected, strict=True))
    assert chi2 < 60  # 29 degrees of freedom: p < 1e-3 above 58
    if s:
        assert counts[animals[0]["id"]] > 10 * counts[animals[-1]["id"]]


def test_target_passage_fraction_sets_the_targets_share_only():
    """world.target_passage_fraction: the targets' passage lines at their own share, the
    source's at passage_fraction; null (the default) gives the targets passage_fraction."""
    world = build_world({"target_passage_fraction": 0.05, "passage_fraction": 0.3}, SEED)
    for lang, share in ((SRC, 0.3), (AR, 0.05), (VI, 0.05)):
        lines = generate_sentences(world, lang, 4000, seed=3)
        long = sum(line.count(". ") >= 5 for line in lines)
        assert abs(long / len(lines) - share) < 0.01, (lang, long / len(lines), share)
    default = build_world({"passage_fraction": 0.3}, SEED)
    explicit = build_world({"passage_fraction": 0.3, "target_passage_fraction": 0.3}, SEED)
    assert generate_sentences(default, AR, 500, seed=3) == generate_sentences(
        explicit, AR, 500, seed=3
    )


@pytest.mark.parametrize("more", [0.0, 0.6])
def test_generic_sentences_join_clauses_by_clause_continuation(more: float):
    """world.clause_continuation p: a generic sentence has k clauses joined by the language's
    "and" with probability p^(k-1)(1-p) (at most MAX_CLAUSES, the last taking the rest); one
    sentence, one final full stop; 0 gives single clauses."""
    world = build_world(
        {"clause_continuation": more, "passage_fraction": 0.0, "fact_sentence_fraction": 0.0},
        SEED,
    )
    for lang in (SRC, VI):
        conj = world["languages"][lang]["lexicon"]["fn_and"]
        lines = generate_sentences(world, lang, 4000, seed=11)
        assert all(line.endswith(".") and line.count(". ") == 0 for line in lines)
        clauses = Counter(1 + line.split().count(conj) for line in lines)
        expected = [more ** (k - 1) * (1 - more) for k in range(1, MAX_CLAUSES)]
        expected.append(more ** (MAX_CLAUSES - 1))
        for k, p in enumerate(expected, start=1):
            se = (p * (1 - p) / len(lines)) ** 0.5
            assert abs(clauses[k] / len(lines) - p) <= 4 * se + 1e-9, (lang, k, clauses, p)


def test_a_sentence_of_clauses_is_one_capitalised_sentence(world: dict):
    """Frames rendered together: each clause's words in order, joined by "and", one capital
    and one full stop for the sentence."""
    rng = random.Random(2)
    frames = [sample_frame(world, rng) for _ in range(3)]
    conj = world["languages"][VI]["lexicon"]["fn_and"]
    joined = render(world, frames, VI)
    expected = f" {conj} ".join(render(world, f, VI).rstrip(".") for f in frames)
    assert joined.rstrip(".").casefold() == expected.casefold()
    assert joined[0].isupper() and joined.endswith(".") and joined.count(".") == 1


@pytest.mark.parametrize("q", [0.15, 0.45])
def test_person_subjects_are_names_by_name_subject_probability(q: float):
    """world.name_subject_probability: the share of person subjects that are names."""
    world = build_world({"name_subject_probability": q}, SEED)
    idx, rng, n = _Index(world), random.Random(4), 20_000
    names = sum("name" in _person_subject(rng, idx)[0] for _ in range(n))
    assert abs(names / n - q) < 4 * (q * (1 - q) / n) ** 0.5

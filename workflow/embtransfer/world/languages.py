"""Languages, lexicons and the fact base of the miniature world, built from a seed.

:func:`build_world` turns the validated ``world:`` config section and a seed into a
plain JSON-serialisable dict: a shared concept inventory (semantic classes with
latent sub-groups), per-language phonology, lexicon, morphology and word order,
shared names (transliterated in non-Latin scripts), loanwords, and a fact base of
people and companies. Rendering sentences from it is :mod:`.running_text`'s job.

Every random choice comes from a ``random.Random`` seeded with a string derived
from (seed, purpose, language), never from ``hash()``, so the world is the same in
every process, and adding a target language leaves the others unchanged.
"""

from __future__ import annotations

import copy
import random
import unicodedata
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from embtransfer.core.schema import fill_schema_defaults

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "world.schema.yaml"
WORLD_FORMAT = 1

# Word class of each concept class: decides how the grammar inflects it.
CLASS_KIND = {
    "person": "noun",
    "profession": "noun",
    "animal": "noun",
    "food": "noun",
    "object": "noun",
    "place": "noun",
    "colour": "adj",
    "adjective": "adj",
    "verb_intransitive": "verb",
    "verb_food": "verb",
    "verb_object": "verb",
    "verb_animal": "verb",
    "verb_place": "verb",
    "time": "time",
    "number_word": "number_word",
}
# Closed-class words the grammar needs; ids carry an English gloss for readability only.
FUNCTION_WORDS = {
    "prep": ["in", "to", "at", "with"],
    "verb": ["be", "live", "like", "own", "have", "bear", "work", "make", "go", "equal"],
    "conj": ["and", "plus"],
    "noun": ["year"],
}
# Classes whose concepts may be borrowed (nouns and adjectives, as with real loanwords).
LOAN_CLASSES = ("profession", "food", "object", "animal", "place", "adjective")

WORD_ORDERS = ("SVO", "SOV", "VSO", "VOS", "OVS", "OSV")
MORPHOLOGIES = ("suffixing", "prefixing", "isolating", "agglutinative")

# --- script inventories (building blocks; the seed picks a subset and weights) ---------------
LATIN_ONSETS = [
    "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "y",
    "z", "bl", "br", "cl", "cr", "dr", "fl", "fr", "gl", "gr", "pl", "pr", "sl", "sm", "sn",
    "sp", "st", "str", "tr", "sh", "ch", "th", "wh", "",
]
LATIN_VOWELS = ["a", "e", "i", "o", "u", "ea", "ee", "oo", "ai", "ou", "oa", "ie"]
LATIN_CODAS = [
    "", "", "", "n", "t", "d", "s", "l", "r", "m", "ck", "ng", "nd", "st", "rt", "sh", "ll",
    "nt", "x", "p", "g", "mp", "lt",
]
# Arabic-block letters (U+0621-U+064A): consonants, and the long-vowel letters.
ARABIC_CONSONANTS = list("بتثجحخدذرزسشصضطظعغفقكلمنه")
ARABIC_VOWELS = ["ا", "و", "ي"]
ARABIC_FINALS = ["ة", "ى", "ء"]
VI_ONSETS = [
    "b", "c", "d", "đ", "g", "h", "k", "l", "m", "n", "ng", "nh", "ph", "th", "tr", "ch", "kh",
    "x", "v", "s", "r", "qu", "t", "gi", "",
]
VI_VOWELS = ["a", "e", "i", "o", "u", "y"]
# Vowel-quality marks: circumflex, breve, horn (combining, after the base letter).
VI_QUALITY = {"a": ["", "\u0302", "\u0306"], "e": ["", "\u0302"], "o": ["", "\u0302", "\u031b"],
              "u": ["", "\u031b"], "i": [""], "y": [""]}
# The five marked tones (grave, acute, tilde, hook above, dot below); "" is the level tone.
VI_TONES = ["", "\u0300", "\u0301", "\u0303", "\u0309", "\u0323"]
VI_CODAS = ["", "", "n", "ng", "m", "c", "t", "p", "nh", "ch", "i", "o", "u"]
# Shared names: simple "international" syllables so names look alike in every Latin language.
NAME_ONSETS = list("bdfghjklmnprstvz") + ["", "ch", "sh", "th"]
NAME_VOWELS = list("aeiou")
NAME_CODAS = ["", "", "", "n", "r", "l", "s", "m", "k", "x"]
# Latin -> Arabic-block transliteration (digraphs first); short vowels e/o fold into long ones.
TRANSLIT_DIGRAPHS = {"sh": "ش", "th": "ث", "ch": "تش", "kh": "خ", "ck": "ك", "ee": "ي",
                     "oo": "و", "ou": "و", "ea": "ي", "ai": "اي", "oa": "و", "ie": "ي"}
TRANSLIT = {
    "a": "ا", "b": "ب", "c": "ك", "d": "د", "e": "ي", "f": "ف", "g": "غ", "h": "ه", "i": "ي",
    "j": "ج", "k": "ك", "l": "ل", "m": "م", "n": "ن", "o": "و", "p": "ب", "q": "ق", "r": "ر",
    "s": "س", "t": "ت", "u": "و", "v": "ف", "w": "و", "x": "كس", "y": "ي", "z": "ز",
}


class WorldConfigError(ValueError):
    """The ``world:`` section is inconsistent in a way the schema cannot express."""


# --- config -------------------------------------------------------------------------------


@cache
def world_schema() -> dict[str, Any]:
    return yaml.safe_load(SCHEMA_PATH.read_text(encoding="utf-8"))


def world_config(cfg: dict[str, Any] | None = None) -> dict[str, Any]:
    """Return a validated copy of a ``world:`` section with every default filled in."""
    out = copy.deepcopy(cfg) if cfg else {}
    schema = world_schema()
    fill_schema_defaults(schema, out)
    jsonschema.validate(out, schema)
    if out["source_language"] not in out["languages"]:
        raise WorldConfigError(
            f"world.source_language {out['source_language']!r} is not one of world.languages "
            f"({', '.join(out['languages'])})"
        )
    lo, hi = out["age_range"]
    if lo > hi:
        raise WorldConfigError(f"world.age_range {out['age_range']} is empty")
    return out


# --- randomness and phonology ----------------------------------------------------------------


def _rng(seed: int, *purpose: object) -> random.Random:
    # String seeds are hashed with SHA-512 by random.Random: stable across processes.
    return random.Random(":".join(str(p) for p in (seed, *purpose)))


def _weighted_subset(rng: random.Random, items: list[str], keep: float) -> dict[str, float]:
    """A seed-chosen subset of an inventory with Zipf-like weights (some sounds are common)."""
    n = max(2, round(len(items) * keep))
    chosen = rng.sample(items, n)
    # Clusters and digraphs are rarer than single letters, as in natural languages.
    return {item: (0.4 if len(item) > 1 else 1.0) / (rank + 1) ** 0.7
            for rank, item in enumerate(chosen)}


def _pick(rng: random.Random, weighted: dict[str, float]) -> str:
    return rng.choices(list(weighted), weights=list(weighted.values()))[0]


def _phonology(script: str, rng: random.Random) -> dict[str, Any]:
    if script == "latin":
        return {"onsets": _weighted_subset(rng, LATIN_ONSETS, 0.7),
                "vowels": _weighted_subset(rng, LATIN_VOWELS, 0.75),
                "codas": _weighted_subset(rng, LATIN_CODAS, 0.7) | {"": 1.5},
                "syllables": [1, 1, 2, 2, 2, 3]}
    if script == "arabic":
        return {"onsets": _weighted_subset(rng, ARABIC_CONSONANTS, 0.8),
                "vowels": _weighted_subset(rng, ARABIC_VOWELS, 1.0) | {"": 1.2},
                "codas": _weighted_subset(rng, ARABIC_CONSONANTS, 0.5) | {"": 2.0},
                "finals": _weighted_subset(rng, ARABIC_FINALS, 1.0),
                "syllables": [2, 2, 3]}
    if script == "latin_diacritics":
        return {"onsets": _weighted_subset(rng, VI_ONSETS, 0.8),
                "vowels": _weighted_subset(rng, VI_VOWELS, 1.0),
                "tones": _weighted_subset(rng, VI_TONES, 1.0),
                "codas": _weighted_subset(rng, VI_CODAS, 0.8) | {"": 1.5},
                "syllables": [1, 1, 1, 2]}
    raise WorldConfigError(f"unknown script {script!r}")


def _vi_nucleus(rng: random.Random, phon: dict[str, Any]) -> str:
    base = _pick(rng, phon["vowels"])
    marks = [rng.choice(VI_QUALITY[base]), _pick(rng, phon["tones"])]
    # Canonical order of combining classes (horn 216 < dot below 220 < others 230): the
    # string is then already NFD, and it stays decomposed because we never compose it.
    marks = sorted((m for m in marks if m), key=unicodedata.combining)
    return base + "".join(marks)


def _syllable(rng: random.Random, phon: dict[str, Any], script: str) -> str:
    if script == "latin_diacritics":
        return _pick(rng, phon["onsets"]) + _vi_nucleus(rng, phon) + _pick(rng, phon["codas"])
    return _pick(rng, phon["onsets"]) + _pick(rng, phon["vowels"]) + _pick(rng, phon["codas"])


def _word(rng: random.Random, phon: dict[str, Any], script: str, n_syll: int) -> str:
    word = "".join(_syllable(rng, phon, script) for _ in range(n_syll))
    if script == "arabic" and rng.random() < 0.2:
        word += _pick(rng, phon["finals"])  # a feminine-like ending on some words
    return word


def _new_form(rng: random.Random, phon: dict[str, Any], script: str, taken: set[str],
              short: bool = False, ok: Callable[[str], bool] | None = None) -> str:
    """A fresh word form not in ``taken`` (homonyms would blur the distributional signal)."""
    for attempt in range(10_000):
        n_syll = 1 if short else rng.choice(phon["syllables"]) + attempt // 200
        form = _word(rng, phon, script, n_syll)
        if len(form) >= 2 and form not in taken and (ok is None or ok(form)):
            taken.add(form)
            return form
    raise RuntimeError("could not draw a fresh word form; the inventory is too small")


def _affix(rng: random.Random, phon: dict[str, Any], script: str, where: str,
           taken: set[str]) -> str:
    """A short bound morpheme: vowel+consonant suffixes, consonant+vowel prefixes."""
    for _ in range(10_000):
        if script == "latin_diacritics":
            form = _syllable(rng, phon, script)
        elif where == "suffix":
            coda = rng.choice([c for c in phon["codas"] if c] or ["n"])
            form = coda if rng.random() < 0.3 else _pick(rng, phon["vowels"]) + coda
        else:
            form = _pick(rng, phon["onsets"]) + _pick(rng, phon["vowels"])
        if form and form not in taken:
            taken.add(form)
            return form
    raise RuntimeError("could not draw a fresh affix")


# --- shared names and transliteration -----------------------------------------------------


def transliterate(latin: str) -> str:
    """Spell a Latin-script word in Arabic-block letters (lossy, like real transliteration)."""
    text, out, i = latin.lower(), [], 0
    while i < len(text):
        if text[i : i + 2] in TRANSLIT_DIGRAPHS:
            out.append(TRANSLIT_DIGRAPHS[text[i : i + 2]])
            i += 2
            continue
        ch = text[i]
        if ch in TRANSLIT:
            out.append(TRANSLIT[ch])
        elif ch.isalpha():
            # Letters outside ASCII (never produced by the Latin generators) keep their base.
            base = unicodedata.normalize("NFD", ch)[0]
            out.append(TRANSLIT.get(base, ""))
        i += 1
    return "".join(out)


def _names(rng: random.Random, n: int, taken: set[str], taken_ar: set[str],
           syllables: tuple[int, ...]) -> list[str]:
    """Distinct capitalised Latin names whose transliterations are distinct too."""
    names = []
    while len(names) < n:
        n_syll = rng.choice(syllables)
        name = "".join(rng.choice(NAME_ONSETS) + rng.choice(NAME_VOWELS) + rng.choice(NAME_CODAS)
                       for _ in range(n_syll)).capitalize()
        ar = transliterate(name)
        if len(name) < 3 or name in taken or ar in taken_ar:
            continue
        taken.add(name)
        taken_ar.add(ar)
        names.append(name)
    return names


# --- concepts ---------------------------------------------------------------------------


def _concepts(cfg: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    rng = _rng(seed, "concepts")
    groups = cfg["semantic_groups"]
    concepts: list[dict[str, Any]] = []
    for cls, kind in CLASS_KIND.items():
        for i in range(cfg["concepts"][cls]):
            concept = {"id": f"{cls}_{i:03d}", "class": cls, "kind": kind,
                       "group": i % groups, "loan": False}
            if kind == "number_word":
                concept["value"] = i + 1
            concepts.append(concept)
    for fn_kind, glosses in FUNCTION_WORDS.items():
        for gloss in glosses:
            concepts.append({"id": f"fn_{gloss}", "class": f"function_{fn_kind}",
                             "kind": f"function_{fn_kind}", "group": 0, "loan": False})
    candidates = [c for c in concepts if c["class"] in LOAN_CLASSES]
    for concept in rng.sample(candidates, min(cfg["n_loanwords"], len(candidates))):
        concept["loan"] = True
    return concepts


# --- one language ------------------------------------------------------------------------


def _morphology(kind: str, word_order: str, script: str, phon: dict[str, Any],
                rng: random.Random, taken: set[str]) -> dict[str, Any]:
    """Affixes and particles of a language; each cell is {prefix, suffix, particle/word}."""
    def suf() -> str:
        return _affix(rng, phon, script, "suffix", taken)

    def pre() -> str:
        return _affix(rng, phon, script, "prefix", taken)

    def word() -> str:
        return _new_form(rng, phon, script, taken, short=True)

    verb_first = word_order.index("V") < word_order.index("O")
    m: dict[str, Any] = {"type": kind, "time_position": rng.choice(["initial", "final"])}
    if kind == "suffixing":
        past = suf()
        m |= {"plural": {"suffix": suf()}, "definite": {"word": word()},
              "indefinite": {"word": word()},
              "verb": {"present_sg": {"suffix": suf()}, "present_pl": {},
                       "past_sg": {"suffix": past}, "past_pl": {"suffix": past}},
              "adposition": "pre" if verb_first else "post", "adj_position": "before",
              "adj_agree": False}
    elif kind == "prefixing":
        m |= {"plural": {"suffix": suf()}, "definite": {"prefix": pre()}, "indefinite": {},
              "verb": {"present_sg": {"prefix": pre()}, "present_pl": {"prefix": pre(),
                                                                       "suffix": suf()},
                       "past_sg": {"suffix": suf()}, "past_pl": {"suffix": suf()}},
              "adposition": "pre" if verb_first else "post", "adj_position": "after",
              "adj_agree": True}
    elif kind == "isolating":
        m |= {"plural": {"particle": word()}, "definite": {"word": word()}, "indefinite": {},
              "verb": {"present_sg": {}, "present_pl": {}, "past_sg": {"particle": (p := word())},
                       "past_pl": {"particle": p}},
              "adposition": "pre" if verb_first else "post", "adj_position": "after",
              "adj_agree": False}
    elif kind == "agglutinative":
        sg, pl, past = suf(), suf(), suf()
        m |= {"plural": {"suffix": suf()}, "definite": {"suffix": suf()}, "indefinite": {},
              "verb": {"present_sg": {"suffix": sg}, "present_pl": {"suffix": pl},
                       "past_sg": {"suffix": past + sg}, "past_pl": {"suffix": past + pl}},
              "adposition": "suffix", "adj_position": "before", "adj_agree": False}
    else:
        raise WorldConfigError(f"unknown morphology {kind!r}")
    return m


def _inflect(stem: str, cell: dict[str, str]) -> str:
    return cell.get("prefix", "") + stem + cell.get("suffix", "")


def _affix_cells(morph: dict[str, Any]) -> list[dict[str, str]]:
    """Every bound-affix combination a word can carry (plural, definite, both, verb cells)."""
    pl, de = morph["plural"], morph["definite"]
    both = {"prefix": de.get("prefix", "") + pl.get("prefix", ""),
            "suffix": pl.get("suffix", "") + de.get("suffix", "")}
    cells = [pl, de, both, *morph["verb"].values()]
    return [c for c in cells if c.get("prefix") or c.get("suffix")]


def _adapt_latin_loan(form: str, rng: random.Random, phon: dict[str, Any], script: str) -> str:
    """Fit a borrowed Latin word to the target: a tone mark on its first vowel (kept NFD,
    like native words), or in a plain Latin target a native ending."""
    if script == "latin_diacritics":
        for i, ch in enumerate(form):
            if ch in "aeiouy":
                return form[: i + 1] + rng.choice(VI_TONES[1:]) + form[i + 1 :]
        return form
    return form + _pick(rng, phon["vowels"])


def _loanword(src: str, script: str, cfg: dict[str, Any], phon: dict[str, Any],
              rng: random.Random, taken: set[str]) -> tuple[str, str]:
    """A source word borrowed into a target: (form, how) with how kept/adapted/transliterated.

    ``taken`` holds the source words, names and loans so far; an adapted form must be new,
    while the source form itself is always free (the source words are unique)."""
    candidates: list[tuple[str, str]] = []
    if script == "arabic":
        # Mostly respelled in the target script; some stay in Latin, as in real Arabic text.
        if rng.random() >= cfg["latin_in_nonlatin"]:
            candidates.append((transliterate(src), "transliterated"))
    elif rng.random() < cfg["loanword_adaptation"]:
        candidates += [(_adapt_latin_loan(src, rng, phon, script), "adapted") for _ in range(5)]
    for form, how in candidates:
        if form not in taken:
            taken.add(form)
            return form, how
    return src, "kept"


def _language(key: str, spec: dict[str, Any], cfg: dict[str, Any], seed: int,
              concepts: list[dict[str, Any]], names: dict[str, str],
              source: dict[str, Any] | None) -> dict[str, Any]:
    rng = _rng(seed, "language", key)
    script = spec["script"]
    word_order = spec["word_order"] if spec["word_order"] != "auto" else rng.choice(WORD_ORDERS)
    morph_kind = (spec["morphology"] if spec["morphology"] != "auto"
                  else rng.choice(MORPHOLOGIES))
    phon = _phonology(script, rng)
    # Native words must not collide with source words or names: overlap should come only
    # from the shared material (digits, names, loanwords), as the design intends.
    taken: set[str] = set(names.values())
    if source is not None:
        taken |= set(source["lexicon"].values()) | set(source["affixes"])
    before = set(taken)
    morph = _morphology(morph_kind, word_order, script, phon, rng, taken)
    affixes = sorted(taken - before)
    rendered_names, name_kept = _render_names(rng, names, script, cfg, taken)
    lexicon, loans = _lexicon(rng, concepts, source, script, cfg, phon, morph, taken)
    return {"key": key, "script": script, "word_order": word_order, "morphology": morph,
            "phonology": {k: v for k, v in phon.items()}, "lexicon": lexicon,
            "affixes": affixes, "loanwords": loans, "names": rendered_names,
            "names_kept_latin": name_kept}


def _render_names(rng: random.Random, names: dict[str, str], script: str, cfg: dict[str, Any],
                  taken: set[str]) -> tuple[dict[str, str], list[str]]:
    """The shared names as the language writes them, and the ids of those kept in Latin;
    a transliterated name joins ``taken``."""
    rendered_names: dict[str, str] = {}
    name_kept: list[str] = []
    for name_id, latin in names.items():
        if script == "arabic":
            # Most names are transliterated; some stay in Latin, as in real Arabic text.
            if rng.random() < cfg["latin_in_nonlatin"]:
                rendered_names[name_id] = latin
                name_kept.append(name_id)
            else:
                rendered_names[name_id] = transliterate(latin)
                taken.add(rendered_names[name_id])
        else:
            rendered_names[name_id] = latin
    return rendered_names, name_kept


def _lexicon(rng: random.Random, concepts: list[dict[str, Any]], source: dict[str, Any] | None,
             script: str, cfg: dict[str, Any], phon: dict[str, Any], morph: dict[str, Any],
             taken: set[str]) -> tuple[dict[str, str], dict[str, str]]:
    """The language's word of every concept, and how each loanword was borrowed."""
    lexicon: dict[str, str] = {}
    loans: dict[str, str] = {}
    if source is not None:
        # Loanwords first, so native words are then drawn around them (no homonyms).
        for concept in concepts:
            if concept["loan"]:
                cid = concept["id"]
                lexicon[cid], loans[cid] = _loanword(source["lexicon"][cid], script, cfg, phon,
                                                     rng, taken)
    # No word may look like an inflected form of another (plural of A == lemma of B).
    cells = _affix_cells(morph)
    surfaces = taken | {_inflect(w, c) for w in lexicon.values() for c in cells}

    def fresh(form: str) -> bool:
        variants = {_inflect(form, c) for c in cells}
        return form not in surfaces and not variants & surfaces

    for concept in concepts:
        cid = concept["id"]
        if cid in lexicon:
            continue
        is_affix = concept["kind"] == "function_prep" and morph["adposition"] == "suffix"
        if is_affix:
            lexicon[cid] = _affix(rng, phon, script, "suffix", taken)
        else:
            short = concept["kind"].startswith("function")
            lexicon[cid] = _new_form(rng, phon, script, taken, short=short, ok=fresh)
            surfaces.update({lexicon[cid]} | {_inflect(lexicon[cid], c) for c in cells})
    return lexicon, loans


# --- facts --------------------------------------------------------------------------------

# relation -> (subject type, value type); the grammar of each lives in running_text.py
# (fact_frame).
RELATIONS = {
    "lives_in": ("person", "city"),
    "profession": ("person", "profession"),
    "likes": ("person", "food"),
    "owns": ("person", "animal"),
    "age": ("person", "age"),
    "born": ("person", "year"),
    "works_for": ("person", "company"),
    "based_in": ("company", "city"),
    "makes": ("company", "object"),
}


def _facts(cfg: dict[str, Any], seed: int, entities: dict[str, list[str]],
           concepts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rng = _rng(seed, "facts")
    by_class: dict[str, list[str]] = {}
    for c in concepts:
        by_class.setdefault(c["class"], []).append(c["id"])
    lo, hi = cfg["age_range"]
    facts: list[dict[str, Any]] = []

    def add(subject: str, relation: str, value: str | int) -> None:
        subject_type, value_type = RELATIONS[relation]
        facts.append({"id": f"fact_{len(facts):04d}", "subject": subject,
                      "subject_type": subject_type, "relation": relation, "value": value,
                      "value_type": value_type})

    for person in entities["people"]:
        age = rng.randint(lo, hi)
        add(person, "lives_in", rng.choice(entities["cities"]))
        add(person, "profession", rng.choice(by_class["profession"]))
        add(person, "likes", rng.choice(by_class["food"]))
        add(person, "owns", rng.choice(by_class["animal"]))
        add(person, "age", age)
        # Birth year agrees with age (birthday maybe still to come this year).
        add(person, "born", cfg["reference_year"] - age - rng.randint(0, 1))
        add(person, "works_for", rng.choice(entities["companies"]))
    for company in entities["companies"]:
        add(company, "based_in", rng.choice(entities["cities"]))
        add(company, "makes", rng.choice(by_class["object"]))
    return facts


def value_pool(world: dict[str, Any], value_type: str) -> list[str] | list[int]:
    """Every possible value of a value type (the pool distractors are drawn from)."""
    cfg = world["config"]
    lo, hi = cfg["age_range"]
    if value_type == "age":
        return list(range(lo, hi + 1))
    if value_type == "year":
        ref = cfg["reference_year"]
        return list(range(ref - hi - 1, ref - lo + 1))
    if value_type == "city":
        return list(world["entities"]["cities"])
    if value_type == "company":
        return list(world["entities"]["companies"])
    return [c["id"] for c in world["concepts"] if c["class"] == value_type]


# --- the world ----------------------------------------------------------------------------


def build_world(cfg: dict[str, Any] | None, seed: int) -> dict[str, Any]:
    """Build the miniature world from a ``world:`` config section and a seed.

    Missing keys take the schema defaults. The result is a plain JSON-serialisable dict and
    the same (cfg, seed) always gives the same dict.
    """
    cfg = world_config(cfg)
    concepts = _concepts(cfg, seed)
    rng = _rng(seed, "names")
    taken: set[str] = set()
    taken_ar: set[str] = set()
    people = _names(rng, cfg["n_people"], taken, taken_ar, (2, 2, 3))
    extra = _names(rng, cfg["n_extra_names"], taken, taken_ar, (2, 2, 3))
    cities = _names(rng, cfg["n_cities"], taken, taken_ar, (2, 3, 3))
    companies = _names(rng, cfg["n_companies"], taken, taken_ar, (2, 3))
    names: dict[str, str] = {}
    entities: dict[str, list[str]] = {"people": [], "extra_names": [], "cities": [],
                                      "companies": []}
    for kind, prefix, forms in (("people", "person", people), ("extra_names", "name", extra),
                                ("cities", "city", cities), ("companies", "company", companies)):
        for i, form in enumerate(forms):
            names[f"{prefix}_{i:03d}"] = form
            entities[kind].append(f"{prefix}_{i:03d}")

    source_key = cfg["source_language"]
    langs = cfg["languages"]
    languages = {source_key: _language(source_key, langs[source_key], cfg, seed, concepts,
                                       names, None)}
    for key in sorted(langs):
        if key != source_key:
            languages[key] = _language(key, langs[key], cfg, seed, concepts, names,
                                       languages[source_key])
    return {
        "format": WORLD_FORMAT,
        "seed": seed,
        "config": cfg,
        "source_language": source_key,
        "target_languages": [k for k in languages if k != source_key],
        "concepts": concepts,
        "names": names,
        "entities": entities,
        "relations": {r: list(types) for r, types in RELATIONS.items()},
        "facts": _facts(cfg, seed, entities, concepts),
        "languages": languages,
    }


"""Sentences of the miniature world: semantic frames, rendered in any of its languages.

A *frame* is a language-independent clause (JSON-able dict): subject, verb, object,
adpositional phrases, time adverb, tense. :func:`sample_frame` draws frames with
selectional restrictions and group affinity, so words of a class share contexts
(that is what makes fastText neighbourhoods semantic); :func:`render` realises a
frame with a language's lexicon, morphology and word order. Rendering the same
frames in two languages gives a parallel corpus; :func:`generate_sentences` draws
frames per language (comparable, not parallel, corpora, like Wikipedia).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

from embtransfer.world.languages import value_pool

Frame = dict[str, Any]
NP = dict[str, Any]

# Relative frequency of each generic frame type.
FRAME_WEIGHTS = {
    "eat": 4, "use_object": 4, "animal": 3, "visit_place": 3, "intransitive": 4, "go": 2,
    "profession": 1, "live": 1, "colour": 2, "count": 2, "number_word": 1, "arith": 1,
}
PUNCTUATION = ".,"
#: At most this many clauses in one generic sentence (``world.clause_continuation``).
MAX_CLAUSES = 4


def _rng(*parts: object) -> random.Random:
    return random.Random(":".join(str(p) for p in parts))


# --- frame sampling ---------------------------------------------------------------------


class _Index:
    """Concept ids by class and by (class, group), for fast sampling."""

    def __init__(self, world: dict[str, Any]) -> None:
        self.affinity = world["config"]["group_affinity"]
        self.zipf = world["config"]["concept_zipf"]
        self.name_subject = world["config"]["name_subject_probability"]
        self.clause_continuation = world["config"]["clause_continuation"]
        self.by_class: dict[str, list[dict[str, Any]]] = {}
        self.by_group: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for c in world["concepts"]:
            self.by_class.setdefault(c["class"], []).append(c)
            self.by_group.setdefault((c["class"], c["group"]), []).append(c)
        ents = world["entities"]
        self.weight = {
            c["id"]: (rank + 1) ** -self.zipf
            for members in self.by_class.values()
            for rank, c in enumerate(members)
        }
        # Names safe in any frame: generic frames never use a fact relation's verb with them.
        self.names = ents["people"] + ents["extra_names"]
        # Only names outside the fact base may appear with fact-like verbs (live, be ...).
        self.free_names = ents["extra_names"]
        self.cities = ents["cities"]
        # Years of generic events: the birth-year range, so year tokens are shared material.
        self.years = value_pool(world, "year")

    def pick(self, rng: random.Random, cls: str, group: int | None = None) -> dict[str, Any]:
        if group is not None and rng.random() < self.affinity:
            same = self.by_group.get((cls, group))
            if same:
                return self._draw(rng, same)
        return self._draw(rng, self.by_class[cls])

    def _draw(self, rng: random.Random, concepts: list[dict[str, Any]]) -> dict[str, Any]:
        if not self.zipf:
            return rng.choice(concepts)
        # A concept's weight follows its rank in its class (Zipf's law), so words have the
        # long tail of real text: some frequent, most rare.
        weights = [self.weight[c["id"]] for c in concepts]
        return rng.choices(concepts, weights=weights)[0]


def _noun(rng: random.Random, concept: dict[str, Any], *, adj: str | None = None,
          definite: bool | None = None, plural: bool | None = None) -> NP:
    return {"noun": concept["id"],
            "pl": rng.random() < 0.3 if plural is None else plural,
            "def": rng.random() < 0.6 if definite is None else definite,
            "adj": adj}


def _maybe_adj(rng: random.Random, idx: _Index, group: int, p: float = 0.3) -> str | None:
    if rng.random() >= p:
        return None
    return idx.pick(rng, "colour" if rng.random() < 0.4 else "adjective", group)["id"]


def _person_subject(rng: random.Random, idx: _Index, free: bool = False) -> tuple[NP, int]:
    """A name or a person/profession noun phrase, and the semantic group it brings."""
    if rng.random() < idx.name_subject:
        names = idx.free_names if free else idx.names
        return {"name": rng.choice(names)}, rng.randrange(len(idx.by_class["profession"]))
    cls = "profession" if rng.random() < 0.7 else "person"
    concept = rng.choice(idx.by_class[cls])
    return _noun(rng, concept, adj=_maybe_adj(rng, idx, concept["group"], 0.15)), concept["group"]


def _time(rng: random.Random, idx: _Index, p: float = 0.2) -> str | None:
    return rng.choice(idx.by_class["time"])["id"] if rng.random() < p else None


def _clause(subj: NP, verb: str, tense: str, obj: NP | None = None,
            pps: list[list[Any]] | None = None, time: str | None = None) -> Frame:
    return {"subj": subj, "verb": verb, "tense": tense, "obj": obj, "pps": pps or [],
            "time": time}


def _eat_frame(rng: random.Random, idx: _Index, tense: str) -> Frame:
    if rng.random() < 0.6:
        animal = rng.choice(idx.by_class["animal"])
        subj, group = _noun(rng, animal), animal["group"]
    else:
        subj, group = _person_subject(rng, idx)
    food = idx.pick(rng, "food", group)
    verb = idx.pick(rng, "verb_food", group)["id"]
    pps = []
    if rng.random() < 0.15:
        pps.append(["fn_with", _noun(rng, idx.pick(rng, "animal", group))])
    return _clause(subj, verb, tense, _noun(rng, food, adj=_maybe_adj(rng, idx, group, 0.2)),
                   pps, _time(rng, idx))


def _use_object_frame(rng: random.Random, idx: _Index, tense: str) -> Frame:
    subj, group = _person_subject(rng, idx)
    obj = idx.pick(rng, "object", group)
    verb = idx.pick(rng, "verb_object", group)["id"]
    pps = []
    if rng.random() < 0.25:
        pps.append(["fn_in", _noun(rng, idx.pick(rng, "place", group), definite=True)])
    return _clause(subj, verb, tense, _noun(rng, obj, adj=_maybe_adj(rng, idx, group)), pps,
                   _time(rng, idx))


def _animal_frame(rng: random.Random, idx: _Index, tense: str) -> Frame:
    if rng.random() < 0.5:
        subj, group = _person_subject(rng, idx)
    else:
        animal = rng.choice(idx.by_class["animal"])
        subj, group = _noun(rng, animal), animal["group"]
    obj = idx.pick(rng, "animal", group)
    verb = idx.pick(rng, "verb_animal", group)["id"]
    return _clause(subj, verb, tense, _noun(rng, obj, adj=_maybe_adj(rng, idx, group)),
                   time=_time(rng, idx))


def _visit_place_frame(rng: random.Random, idx: _Index, tense: str) -> Frame:
    subj, group = _person_subject(rng, idx)
    place = idx.pick(rng, "place", group)
    verb = idx.pick(rng, "verb_place", group)["id"]
    pps = [["fn_in", {"num": rng.choice(idx.years)}]] if rng.random() < 0.3 else []
    return _clause(subj, verb, tense, _noun(rng, place, adj=_maybe_adj(rng, idx, group, 0.2)),
                   pps, _time(rng, idx, 0.35))


def _intransitive_frame(rng: random.Random, idx: _Index, tense: str) -> Frame:
    if rng.random() < 0.5:
        animal = rng.choice(idx.by_class["animal"])
        subj, group = _noun(rng, animal, adj=_maybe_adj(rng, idx, animal["group"])), \
            animal["group"]
    else:
        subj, group = _person_subject(rng, idx)
    verb = idx.pick(rng, "verb_intransitive", group)["id"]
    pps = []
    if rng.random() < 0.4:
        pps.append(["fn_in", _noun(rng, idx.pick(rng, "place", group), definite=True)])
    return _clause(subj, verb, tense, None, pps, _time(rng, idx, 0.3))


def _go_frame(rng: random.Random, idx: _Index, tense: str) -> Frame:
    subj, group = _person_subject(rng, idx)
    if rng.random() < 0.5:
        dest: NP = {"name": rng.choice(idx.cities)}
    else:
        dest = _noun(rng, idx.pick(rng, "place", group), definite=True, plural=False)
    pps = [["fn_to", dest]]
    if rng.random() < 0.2:
        pps.append(["fn_with", _person_subject(rng, idx)[0]])
    if rng.random() < 0.3:
        pps.append(["fn_in", {"num": rng.choice(idx.years)}])
    return _clause(subj, "fn_go", tense, None, pps, _time(rng, idx, 0.3))


def _profession_frame(rng: random.Random, idx: _Index, tense: str) -> Frame:
    prof = rng.choice(idx.by_class["profession"])
    return _clause({"name": rng.choice(idx.free_names)}, "fn_be", tense,
                   _noun(rng, prof, definite=False, plural=False))


def _live_frame(rng: random.Random, idx: _Index, tense: str) -> Frame:
    return _clause({"name": rng.choice(idx.free_names)}, "fn_live", tense, None,
                   [["fn_in", {"name": rng.choice(idx.cities)}]])


def _colour_frame(rng: random.Random, idx: _Index, tense: str) -> Frame:
    cls = rng.choice(["object", "animal", "food"])
    concept = rng.choice(idx.by_class[cls])
    colour = idx.pick(rng, "colour", concept["group"])["id"]
    return _clause(_noun(rng, concept, definite=True), "fn_be", tense, {"adj_pred": colour})


def _counted_frame(rng: random.Random, idx: _Index, tense: str, in_digits: bool) -> Frame:
    """Someone verbs several things: a count in digits, or a number word."""
    subj, group = _person_subject(rng, idx)
    cls, vcls = rng.choice([("animal", "verb_animal"), ("object", "verb_object"),
                            ("food", "verb_food")])
    obj = _noun(rng, idx.pick(rng, cls, group), definite=False, plural=True)
    if in_digits:
        obj["count"] = rng.randint(2, 20)
    else:
        word = rng.choice(idx.by_class["number_word"][1:])  # "one" takes no plural
        obj["numword"] = word["id"]
    return _clause(subj, idx.pick(rng, vcls, group)["id"], tense, obj)


def _arith_frame(rng: random.Random, idx: _Index, tense: str) -> Frame:
    # Digits are shared by every language, and their sums are consistent; always present.
    a, b = rng.randint(0, 20), rng.randint(0, 20)
    return _clause({"sum": [a, b]}, "fn_equal", "present", {"num": a + b})


#: How each kind of generic frame is drawn (after its kind and tense), by kind.
_FRAME_DRAWERS: dict[str, Callable[[random.Random, _Index, str], Frame]] = {
    "eat": _eat_frame,
    "use_object": _use_object_frame,
    "animal": _animal_frame,
    "visit_place": _visit_place_frame,
    "intransitive": _intransitive_frame,
    "go": _go_frame,
    "profession": _profession_frame,
    "live": _live_frame,
    "colour": _colour_frame,
    "count": lambda rng, idx, tense: _counted_frame(rng, idx, tense, in_digits=True),
    "number_word": lambda rng, idx, tense: _counted_frame(rng, idx, tense, in_digits=False),
    "arith": _arith_frame,
}


def sample_frame(world: dict[str, Any], rng: random.Random, idx: _Index | None = None) -> Frame:
    """Draw one generic (non-fact) frame."""
    idx = idx or _Index(world)
    kind = rng.choices(list(FRAME_WEIGHTS), weights=list(FRAME_WEIGHTS.values()))[0]
    tense = "past" if rng.random() < 0.4 else "present"
    return _FRAME_DRAWERS[kind](rng, idx, tense)


def fact_frame(world: dict[str, Any], fact: dict[str, Any], value: Any = None) -> Frame:
    """The frame stating ``fact`` (with ``value`` in place of the true value if given)."""
    value = fact["value"] if value is None else value
    subj = {"name": fact["subject"]}
    rel = fact["relation"]
    if rel == "lives_in":
        return _clause(subj, "fn_live", "present", None, [["fn_in", {"name": value}]])
    if rel == "profession":
        return _clause(subj, "fn_be", "present",
                       {"noun": value, "pl": False, "def": False, "adj": None})
    if rel == "likes":
        return _clause(subj, "fn_like", "present",
                       {"noun": value, "pl": True, "def": False, "adj": None})
    if rel in ("owns", "makes"):
        verb = "fn_own" if rel == "owns" else "fn_make"
        return _clause(subj, verb, "present",
                       {"noun": value, "pl": rel == "makes", "def": False, "adj": None})
    if rel == "age":
        return _clause(subj, "fn_have", "present",
                       {"noun": "fn_year", "pl": True, "def": False, "adj": None, "count": value})
    if rel == "born":
        return _clause(subj, "fn_bear", "past", None, [["fn_in", {"num": value}]])
    if rel == "works_for":
        return _clause(subj, "fn_work", "present", None, [["fn_at", {"name": value}]])
    if rel == "based_in":
        return _clause(subj, "fn_be", "present", None, [["fn_in", {"name": value}]])
    raise ValueError(f"unknown relation {rel!r}")


# --- rendering --------------------------------------------------------------------------


def _affixed(stem: str, cell: dict[str, str], script: str = "latin") -> str:
    if script == "arabic" and stem.isascii():
        return stem  # a word kept in Latin script takes no Arabic-script affixes, as in real text
    return cell.get("prefix", "") + stem + cell.get("suffix", "")


def _render_np(lang: dict[str, Any], np: NP) -> list[str]:
    if "name" in np:
        return [lang["names"][np["name"]]]
    if "num" in np:
        return [str(np["num"])]
    lex = lang["lexicon"]
    if "sum" in np:
        a, b = np["sum"]
        return [str(a), lex["fn_plus"], str(b)]
    if "adj_pred" in np:
        return [lex[np["adj_pred"]]]
    m = lang["morphology"]
    counted = np.get("count") is not None or np.get("numword") is not None
    plural = np["pl"]

    def inflect(stem: str) -> str:
        if plural:
            stem = _affixed(stem, m["plural"], lang["script"])
        if np["def"]:
            stem = _affixed(stem, m["definite"], lang["script"])
        return stem

    noun = inflect(lex[np["noun"]])
    words: list[str] = []
    if np["def"] and "word" in m["definite"]:
        words.append(m["definite"]["word"])
    elif not np["def"] and not plural and not counted and "word" in m["indefinite"]:
        words.append(m["indefinite"]["word"])
    if np.get("count") is not None:
        words.append(str(np["count"]))
    elif np.get("numword") is not None:
        words.append(lex[np["numword"]])
    if plural and not counted and "particle" in m["plural"]:
        words.append(m["plural"]["particle"])
    if np["adj"] is None:
        return [*words, noun]
    adj = inflect(lex[np["adj"]]) if m["adj_agree"] else lex[np["adj"]]
    return [*words, adj, noun] if m["adj_position"] == "before" else [*words, noun, adj]


def _render_pp(lang: dict[str, Any], prep: str, np: NP) -> list[str]:
    words = _render_np(lang, np)
    form = lang["lexicon"][prep]
    kind = lang["morphology"]["adposition"]
    if kind == "pre":
        return [form, *words]
    if kind == "post":
        return [*words, form]
    # A case suffix on the phrase's last word.
    return [*words[:-1], _affixed(words[-1], {"suffix": form}, lang["script"])]


def _is_plural(np: NP) -> bool:
    if "sum" in np or "name" in np or "num" in np:
        return False
    return bool(np.get("pl"))


def _clause_words(L: dict[str, Any], frame: Frame) -> list[str]:
    """One clause of language ``L`` as words, in its word order (no final punctuation)."""
    m = L["morphology"]
    cell = m["verb"][f"{frame['tense']}_{'pl' if _is_plural(frame['subj']) else 'sg'}"]
    verb = [_affixed(L["lexicon"][frame["verb"]], cell, L["script"])]
    if "particle" in cell:
        verb.insert(0, cell["particle"])
    comp: list[str] = []
    if frame["obj"] is not None:
        comp += _render_np(L, frame["obj"])
    for prep, np in frame["pps"]:
        comp += _render_pp(L, prep, np)
    parts = {"S": _render_np(L, frame["subj"]), "V": verb, "O": comp}
    words = [w for slot in L["word_order"] for w in parts[slot]]
    if frame["time"] is not None:
        t = L["lexicon"][frame["time"]]
        if m["time_position"] == "initial":
            words = [t + ",", *words]  # a fronted adverb takes a comma, as in many languages
        else:
            words.append(t)
    return words


def render(world: dict[str, Any], frame: Frame | list[Frame], lang: str) -> str:
    """Realise a frame as one sentence of ``lang`` (word order, morphology, punctuation);
    a list of frames as one sentence of their clauses joined by the language's "and"."""
    L = world["languages"][lang]
    frames = frame if isinstance(frame, list) else [frame]
    words = _clause_words(L, frames[0])
    for more in frames[1:]:
        words += [L["lexicon"]["fn_and"], *_clause_words(L, more)]
    text = " ".join(words) + "."
    if L["script"] != "arabic":
        text = text[0].upper() + text[1:]  # not str.capitalize(): it lowercases names
    return text


def _generic_frames(world: dict[str, Any], rng: random.Random, idx: _Index) -> list[Frame]:
    """The clauses of one generic sentence: one, and another while a draw falls under
    ``clause_continuation`` (up to :data:`MAX_CLAUSES`), as real sentences join clauses."""
    frames = [sample_frame(world, rng, idx)]
    more = idx.clause_continuation
    while more and len(frames) < MAX_CLAUSES and rng.random() < more:
        frames.append(sample_frame(world, rng, idx))
    return frames


# --- public API -------------------------------------------------------------------------


def fact_statement(world: dict[str, Any], fact: dict[str, Any], lang: str) -> str:
    """The fact as a sentence of ``lang`` (the exact sentence the source corpus contains)."""
    return render(world, fact_frame(world, fact), lang)


# Relations a passage states, one per person, with the type of value each takes.
PASSAGE_RELATIONS = {"lives_in": "city", "profession": "profession", "likes": "food",
                     "owns": "animal", "age": "age", "works_for": "company"}
# How often a passage mentions its statements again, each time in another order.
PASSAGE_REMENTIONS = 2


def passage_facts(world: dict[str, Any], rng: random.Random, people: int) -> list[dict[str, Any]]:
    """The content of a reading-comprehension passage: ``people`` different people outside
    the fact base, each with a different relation and a value of it.

    One relation per person, not one shared by all: a question is then answered by finding
    the statement of its relation in the passage and reading the value there. Telling apart
    the values of one relation by the person they belong to (binding a name to a value two
    words later) is beyond the miniature source LLM at any budget tried (docs/design.md).
    """
    people = min(people, len(PASSAGE_RELATIONS), len(world["entities"]["extra_names"]))
    relations = rng.sample(list(PASSAGE_RELATIONS), people)
    names = rng.sample(world["entities"]["extra_names"], people)
    facts = []
    for j, (name, relation) in enumerate(zip(names, relations, strict=True)):
        value_type = PASSAGE_RELATIONS[relation]
        facts.append({"id": f"passage_{j}", "subject": name, "subject_type": "person",
                      "relation": relation, "value": rng.choice(value_pool(world, value_type)),
                      "value_type": value_type})
    return facts


def passage_text(world: dict[str, Any], rng: random.Random, lang: str) -> str:
    """A short passage (2-3 statements about people) whose statements are mentioned again
    (:data:`PASSAGE_REMENTIONS` times, each time in another order), as running text
    re-mentions what it said: where a model learns to read its context."""
    facts = passage_facts(world, rng, rng.randint(2, min(3, world["config"]["n_choices"])))
    statements = [fact_statement(world, f, lang) for f in facts]
    again = [s for _ in range(PASSAGE_REMENTIONS)
             for s in rng.sample(statements, len(statements))]
    return " ".join([*statements, *again])


def generate_sentences(world: dict[str, Any], lang: str, n: int, seed: int,
                       fact_fraction: float | None = None) -> list[str]:
    """``n`` lines of ``lang``, deterministic in (world, lang, n, seed, fact_fraction).

    A fraction of the lines states facts of the fact base (``fact_fraction``; by default the
    source language's configured fraction, and the targets' one, 0 unless configured),
    cycling through the facts in a fresh random order each round so every fact is stated
    about equally often; a configured fraction are short passages (:func:`passage_text`);
    the rest are single generic sentences.
    """
    cfg = world["config"]
    if fact_fraction is None:
        fact_fraction = (cfg["fact_sentence_fraction"] if lang == world["source_language"]
                         else cfg["target_fact_sentence_fraction"])
    rng = _rng(seed, "sentences", lang)
    n_facts = round(n * fact_fraction) if world["facts"] else 0
    passages = cfg["passage_fraction"]
    if lang != world["source_language"] and cfg["target_passage_fraction"] is not None:
        passages = cfg["target_passage_fraction"]
    n_passages = min(n - n_facts, round(n * passages))
    kinds = ["fact"] * n_facts + ["passage"] * n_passages + ["generic"] * (n - n_facts - n_passages)
    rng.shuffle(kinds)
    idx = _Index(world)
    order: list[dict[str, Any]] = []
    out: list[str] = []
    for kind in kinds:
        if kind == "fact":
            if not order:
                order = list(world["facts"])
                rng.shuffle(order)
            out.append(fact_statement(world, order.pop(), lang))
        elif kind == "passage":
            out.append(passage_text(world, rng, lang))
        else:
            out.append(render(world, _generic_frames(world, rng, idx), lang))
    return out


def words(line: str) -> list[str]:
    """Whitespace words of a line with edge punctuation stripped (for type counts)."""
    out = []
    for w in line.split():
        w = w.strip(PUNCTUATION)
        if w:
            out.append(w)
    return out


def word_types(lines: Iterable[str]) -> set[str]:
    return {w for line in lines for w in words(line)}

"""The findings: written from the tables, claims only where the tables' own corrected tests
clear, the README's section equal to the reference run's, two runs compared claim by claim."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from embtransfer.core.paired import holm
from embtransfer.report.alignment_table import alignment_clears, alignment_frame
from embtransfer.report.findings import (
    END,
    README,
    REFERENCE_DIR,
    START,
    TABLES,
    claims,
    compare_claims,
    comparison_text,
    current_section,
    findings_claims,
    findings_markdown,
    main,
    readme_section,
    refresh_reference,
)
from embtransfer.report.zeroshot import comparison_markdown, zeroshot_clears, zeroshot_comparison

REPO = Path(__file__).resolve().parents[1]
N = 400


def alignment_tables(close_to_best: bool = True) -> pd.DataFrame:
    """Per-token scores of one held-out setting: "a" retrieves 30 % at depth 10, "c" the same
    tokens but 4 (not apart from "a" when ``close_to_best``), "b" 3 %, Random none."""
    rng = np.random.default_rng(3)
    good = (rng.random(N) < 0.3).astype(int)
    close = good.copy()
    close[: (4 if close_to_best else 80)] = 0
    hits = {"world_oracle": np.ones(N, int), "a": good, "c": close,
            "b": (rng.random(N) < 0.03).astype(int), "random": np.zeros(N, int)}
    parts = [pd.DataFrame({
        "stage": "transfer", "lang": "xx", "source": "src", "target": "gpt2_x", "side": "input",
        "method": method, "target_id": np.arange(N), "split": "held_out", "hit_1": hit * 0,
        "hit_10": hit, "cos_oracle": hit * 0.5 + rng.random(N) * 0.1,
        "cos_centred": hit * 0.3 + rng.random(N) * 0.1}) for method, hit in hits.items()]
    return alignment_frame(pd.concat(parts, ignore_index=True), seed=0)


def zeroshot_records() -> list[dict]:
    rng = np.random.default_rng(4)
    n_bytes = rng.integers(30, 200, size=300)
    base = n_bytes * rng.gamma(6.0, 0.5, size=300)

    def record(method: str, nll: np.ndarray, target: str | None = "gpt2_x") -> dict:
        rec = {"lang": "xx", "source": "src", "method": method, "loss": 1.0, "perplexity": 2.0,
               "bits_per_byte": float(nll.sum() / math.log(2) / n_bytes.sum()),
               "document_nll_nats": [float(v) for v in nll],
               "document_bytes": [int(v) for v in n_bytes]}
        return rec | ({"target": target} if target else {})

    return [record("random", base * 1.5), record("a", base + rng.normal(0, 1, 300)),
            record("c", base + rng.normal(0, 1, 300)), record("world_oracle", base * 1.1),
            record("source_model", base * 0.9, target=None),
            record("a", base * 1.2, target="bert_x")]


def tables(close_to_best: bool = True) -> dict[str, pd.DataFrame]:
    return {"alignment": alignment_tables(close_to_best),
            "zeroshot": zeroshot_comparison(zeroshot_records(), seed=1),
            "table1": pd.DataFrame(), "plm_probes": pd.DataFrame()}


def write_report(directory: Path, found: dict[str, pd.DataFrame]) -> Path:
    """The tables ``found`` as a report folder holds them (an empty one: no file)."""
    directory.mkdir()
    for name, frame in found.items():
        if len(frame):
            frame.to_csv(directory / TABLES[name], index=False)
    return directory


def test_claims_are_the_tables_own_decisions():
    found = tables()
    claimed = claims(found)
    alignment = found["alignment"]
    decided = alignment_clears(alignment)
    for line in claimed[claimed["table"] == "alignment"].itertuples():
        other = "best" if line.versus != "random" or line.method == "random" else "random"
        column = f"{line.metric}_vs_{other}_p"
        row = alignment.index[alignment["method"] == line.method][0]
        assert line.p == alignment.loc[row, column]
        assert line.clears == decided.loc[row, column]
        # a relation only where the test clears, in the difference's direction
        expect = "not apart" if not line.clears else ("better" if line.diff > 0 else "worse")
        assert line.relation == expect
    zeroshot = claimed[claimed["table"] == "zeroshot"]
    assert zeroshot["clears"].sum() == zeroshot_clears(found["zeroshot"]).to_numpy().sum()
    # lower bits per byte is better: Random is worse than the best, the best better than it
    vs = zeroshot.set_index(["method", "versus"])
    assert vs.loc[("random", "a"), "relation"] == "worse"
    assert vs.loc[("a", "random"), "relation"] == "better"


def test_a_method_is_called_best_only_where_every_other_is_apart():
    close = findings_markdown(tables(close_to_best=True))
    apart = findings_markdown(tables(close_to_best=False))
    assert "P@10: a is first (28.7 ± 2.3 %) but not apart from c (28.2 ± 2.3 %)" in close
    assert "P@10: a is best (28.7 ± 2.3 %); worse than a: c, b, random" in apart
    # against Random: a and c are better; b's 12 tokens to none (McNemar p 2**-11) do not
    # clear the correction over the table's 30 tests
    assert "better than Random: a, c; not apart from Random: b." in apart
    assert "P@1: all at 0.0 %" in apart  # no method retrieves at depth 1: none is first


def test_the_findings_count_what_clears_at_the_one_threshold():
    found = tables()
    text = findings_markdown(found)
    claimed = claims(found)
    assert f"{int(claimed['clears'].sum())} of the {len(claimed)} tested pairs clear it" in text
    # the family is each table: the zero-shot decisions are Holm's over its p-values alone
    frame = found["zeroshot"]
    together = holm(frame[["vs_best_p", "vs_random_p"]].to_numpy())
    assert together.sum() == claimed[claimed["table"] == "zeroshot"]["clears"].sum()


def test_the_oracle_is_an_upper_bound_of_the_alignment_metrics_only(tmp_path):
    found = tables()
    text = findings_markdown(found)
    before_zeroshot = text.split("### Zero-shot")[0]
    assert "upper bound" not in text.split("### Zero-shot")[1]
    assert "the upper bound of these metrics" in before_zeroshot
    assert "upper bound" not in comparison_markdown(found["zeroshot"])
    from embtransfer.report.zeroshot import write_zeroshot_table

    write_zeroshot_table(zeroshot_records(), tmp_path / "z.csv", tmp_path / "z.md")
    assert "upper bound" not in (tmp_path / "z.md").read_text()


def test_the_readme_shows_the_findings_of_the_committed_reference_run():
    """The README's "What the default run shows" is the findings of docs/reference_run/
    (`make findings-reference` rewrites both)."""
    reference = REPO / REFERENCE_DIR
    run = json.loads((reference / "run.json").read_text())
    assert set(run) == {"commit", "date"}
    readme = (REPO / README).read_text()
    assert readme.count(START) == readme.count(END) == 1
    assert current_section(readme) == readme_section(reference)
    assert f"commit {run['commit']} ({run['date']})" in current_section(readme)


def test_refresh_copies_the_tables_and_rewrites_only_the_section(tmp_path, monkeypatch):
    report = write_report(tmp_path / "report", tables())
    readme = tmp_path / "README.md"
    readme.write_text(f"# T\n\nbefore\n{START}\nold text\n{END}\nafter\n")
    monkeypatch.chdir(REPO)  # the commit is the checkout's
    refresh_reference(report, tmp_path / "ref", readme)
    text = readme.read_text()
    assert text.startswith("# T\n\nbefore\n" + START + "\n") and text.endswith(END + "\nafter\n")
    assert "old text" not in text
    assert current_section(text) == readme_section(tmp_path / "ref")
    assert not (tmp_path / "ref" / TABLES["table1"]).exists()  # the run had none
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "ref" / TABLES["alignment"]),
                                  pd.read_csv(report / TABLES["alignment"]))


def test_refreshing_the_world_reference_rewrites_the_real_section_beside_it(tmp_path, monkeypatch):
    """The real-text findings compare their leaders with the miniature world's, so a new
    world reference rewrites that section too (it would otherwise read the old world)."""
    from embtransfer.report.findings import REAL_END, REAL_REFERENCE_DIR, REAL_START

    report = write_report(tmp_path / "report", tables())
    readme = tmp_path / "README.md"
    readme.write_text(f"{START}\nold world\n{END}\n{REAL_START}\nold real\n{REAL_END}\n")
    monkeypatch.chdir(REPO)
    real = REPO / REAL_REFERENCE_DIR
    refresh_reference(report, tmp_path / "ref", readme, real_reference=real)
    text = readme.read_text()
    assert "old real" not in text
    assert current_section(text, real=True) == readme_section(real, real=True,
                                                               world=tmp_path / "ref")


def test_two_runs_are_compared_claim_by_claim(tmp_path, capsys):
    a, b = tables(close_to_best=False), tables(close_to_best=True)
    compared = compare_claims(claims(a), claims(b))
    # run A calls a better than c at P@10; run B does not (4 tokens apart): both p-values
    line = compared[(compared["table"] == "alignment") & (compared["metric"] == "p_at_10")
                    & (compared["method"] == "c") & (compared["versus_a"] == "a")].iloc[0]
    assert line["relation_a"] == "worse" and line["relation_b"] == "not apart"
    assert line["p_a"] < 1e-6 < 0.05 < line["p_b"] and not line["agrees"]
    text = comparison_text(compared)
    assert "alignment [transfer, xx, src, gpt2_x, input, held_out] p_at_10: c vs a: worse" in text
    assert "NOT in B (not apart" in text
    same = compare_claims(claims(a), claims(a))
    assert same["agrees"].all()
    for name, found in (("A", a), ("B", b)):
        write_report(tmp_path / name, found)
    assert main(["--compare", str(tmp_path / "A"), str(tmp_path / "B")]) == 1
    assert main(["--compare", str(tmp_path / "A"), str(tmp_path / "A")]) == 0
    assert "claims of run A's findings hold in run B" in capsys.readouterr().out


def _swap(frame: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """``frame`` with the names of methods x and y exchanged."""
    names = {x: y, y: x}
    out = frame.copy()
    for column in ("method", "best"):
        out[column] = out[column].map(lambda m: names.get(m, m))
    return out


def test_a_claim_against_the_best_holds_when_two_methods_not_apart_swap_first_place():
    """"b is worse than the best" holds in a run where c, not apart from a, comes first."""
    a = tables(close_to_best=True)
    b = {**a, "alignment": _swap(a["alignment"], "a", "c")}
    compared = compare_claims(claims(a), claims(b))
    line = compared[(compared["table"] == "alignment") & (compared["metric"] == "p_at_10")
                    & (compared["method"] == "b") & (compared["against"] == "best")].iloc[0]
    assert (line["versus_a"], line["versus_b"]) == ("a", "c")
    assert line["relation_a"] == line["relation_b"] == "worse" and line["agrees"]
    assert findings_claims(compared)["agrees"].all()
    text = comparison_text(compared)
    assert "p_at_10: b vs the best (A a, B c): worse" in text
    assert "NOT in B" not in text


def test_a_pair_whose_best_changed_side_is_read_from_the_other_run_reversed():
    """A: w is worse than its best o. B: w is the best and o, against it, is not apart. The
    pair is the same: B's test of it decides A's claim, and it is not listed twice."""
    from embtransfer.report.findings import CLAIM_KEY

    def claim(method: str, versus: str, relation: str, p: float) -> dict:
        where = {key: "x" for key in CLAIM_KEY}
        return {**where, "method": method, "against": "best", "versus": versus, "diff": 0.1,
                "p": p, "clears": relation != "not apart", "relation": relation, "stated": True}

    a = pd.DataFrame([claim("w", "o", "worse", 1e-9)])
    b = pd.DataFrame([claim("o", "w", "not apart", 0.004)])
    compared = compare_claims(a, b)
    assert len(compared) == 1
    line = compared.iloc[0]
    assert (line["method"], line["relation_b"], line["p_b"]) == ("w", "not apart", 0.004)
    assert "NOT in B (not apart, p 0.004)" in comparison_text(compared)
    held = compare_claims(a, pd.DataFrame([claim("o", "w", "better", 1e-8)]))
    assert len(held) == 1 and held["agrees"].all()


def test_only_the_claims_findings_md_states_are_its_claims():
    """The tables' lines the text leaves out (the dictionary half, LAPT, the oracle) are
    listed as differences, not counted as claims of the findings."""
    a = tables(close_to_best=False)
    unstated = a["alignment"].assign(split="dictionary")
    a = {**a, "alignment": pd.concat([a["alignment"], unstated], ignore_index=True)}
    found = claims(a)
    assert not found.loc[found["split"] == "dictionary", "stated"].any()
    oracle = (found["table"] == "alignment") & (found["method"] == "world_oracle")
    assert not found.loc[oracle, "stated"].any()
    headline = found[(found["table"] == "alignment") & (found["split"] == "held_out")
                     & (found["method"] != "world_oracle")]
    assert headline["stated"].all() and found[found["table"] == "zeroshot"]["stated"].all()
    # run B makes none of the dictionary half's claims: the findings' claims all hold
    b = {**a, "alignment": a["alignment"][a["alignment"]["split"] == "held_out"]}
    compared = compare_claims(found, claims(b))
    assert findings_claims(compared)["agrees"].all()
    text = comparison_text(compared)
    assert "dictionary] p_at_10: c vs a: A worse" in text and "[unstated]" in text


def test_the_report_writes_findings_md(tmp_path):
    from embtransfer.report.findings import write_findings

    report = write_report(tmp_path / "report", tables())
    text = write_findings(report, tmp_path / "findings.md")
    assert (tmp_path / "findings.md").read_text() == text
    assert text == "# What the run shows\n\n" + findings_markdown(tables())
    shutil.rmtree(report)
    report.mkdir()  # a run outside the world: no tables, a file that says only how it decides
    assert "0 of the 0 tested pairs" in write_findings(report, tmp_path / "findings.md")


def test_probes_are_decided_by_the_same_rule_with_their_sign():
    from embtransfer.report.findings import probe_decisions

    frame = pd.DataFrame({"lang": "x", "source": "s", "target": ["p1", "p2", "p3"],
                          "span_z": [10.0, 3.4, -6.0], "class_z": [10.0, 10.0, 3.45],
                          "span_diff": [1.0, 0.1, -0.5], "class_diff": [1.0, 1.0, 1.0]})
    decided = probe_decisions(frame)
    # six tests: 3.45 (p 5.6e-4) and 3.4 (p 6.7e-4) would clear alone, but the fifth
    # smallest needs 0.001 / 2: neither does; -6 clears, below its random baseline
    assert decided["span"].tolist() == ["better", "not apart", "worse"]
    assert decided["class"].tolist() == ["better", "better", "not apart"]
    assert decided["carries"].tolist() == [True, False, False]
    text = findings_markdown({"alignment": pd.DataFrame(), "zeroshot": pd.DataFrame(),
                              "table1": pd.DataFrame(), "plm_probes": frame})
    assert "Carry meaning by both probes: p1 (span z 10.0, class z 10.0)." in text
    assert "p3 (span z -6.0, class z 3.5; span below random)" in text


def test_table1_claims_are_the_tables_marks():
    from embtransfer.report.tables import Row, Table, format_score, mark_best

    rng = np.random.default_rng(6)
    n = 300
    truth = {"a": rng.random(n) < 0.6, "b": rng.random(n) < 0.3, "c": rng.random(n) < 0.58,
             "world_oracle": rng.random(n) < 0.9}
    rows = []
    for method, hits in truth.items():
        scores = hits.astype(float)
        rows.append(Row(keys={"stage": "transfer", "lang": "x", "source": "s", "target": "t",
                              "method": method, "eval language": "target"},
                        values={"Facts acc": 100 * scores.mean()}, stderr={"Facts acc": 2.0},
                        per_document={"Facts acc": list(scores)}))
    mark_best(rows, ["Facts acc"])
    table = Table(1, "knowledge", "", rows, ["Facts acc"], {}, format_score)
    found = claims({"alignment": pd.DataFrame(), "zeroshot": pd.DataFrame(),
                    "table1": table.long(), "plm_probes": pd.DataFrame()})
    marked = {row.keys["method"] for row in rows if "Facts acc" in row.clears}
    assert set(found[found["clears"]]["method"]) == marked == {"b"}
    assert "*" in table.wide().set_index("method").loc["b", "Facts acc"]
    assert "upper bound" not in table.markdown()  # the oracle is beaten on scores
    text = findings_markdown({"alignment": pd.DataFrame(), "zeroshot": pd.DataFrame(),
                              "table1": table.long(), "plm_probes": pd.DataFrame()})
    assert "Facts acc: c is first (65.7 ± 2.0) but not apart from a (57.7 ± 2.0)" in text
    assert "worse than c: b." in text and "world_oracle 89.0" in text  # shown, not ranked


def test_salt_against_omp_follows_its_tables_decisions() -> None:
    """OMP's verdicts against SALT are the salt_vs_omp table's own marks, with the sign of
    each metric (bits per byte: lower is better)."""
    from embtransfer.report.findings import claims, findings_markdown

    table = pd.DataFrame([
        {"stage": "transfer", "metric": "bits_per_byte", "lang": "ar_mini", "source": "s",
         "target": "gpt2", "method": "omp", "items": 10, "salt": 0.9, "omp": 1.2,
         "diff": 0.3, "se": 0.01, "p": 1e-9, "clears": True},
        {"stage": "alignment/transfer", "metric": "p_at_10", "lang": "ar_mini", "source": "s",
         "target": "gpt2", "method": "omp", "items": 10, "salt": 1.0, "omp": 3.0,
         "diff": 2.0, "se": 1.0, "p": 0.01, "clears": False},
    ])
    empty = {name: pd.DataFrame() for name in ("alignment", "zeroshot", "table1", "plm_probes")}
    found = claims({**empty, "salt_vs_omp": table})
    assert found["relation"].tolist() == ["worse", "not apart"]
    text = findings_markdown({**empty, "salt_vs_omp": table})
    assert "worse than SALT" in text and "not apart from SALT" in text


def floor_table() -> pd.DataFrame:
    """source_floor.csv of a source that clears its floor, and its control line."""
    from embtransfer.report.source_floor import FLOOR_COLUMNS

    return pd.DataFrame([
        ["src", "en", "held-out", 300, 40000, 1.30, 0.01, 2.21, 1.47, 0.41, 0.12, True],
        ["src", "xx", "control", 300, 30000, 2.90, 0.02, *[math.nan] * 5],
    ], columns=FLOOR_COLUMNS)


def real_tables() -> dict[str, pd.DataFrame]:
    """A real-text run's tables: the synthetic ones, the floor, and a LAPT comparison."""
    lapt = zeroshot_comparison([r for r in zeroshot_records() if r.get("target") == "gpt2_x"
                                and r["method"] != "world_oracle"], seed=2)
    return {**tables(close_to_best=False), "source_floor": floor_table(),
            "lapt_zeroshot": lapt}


def test_the_real_text_findings_state_their_limits_and_the_floor():
    text = findings_markdown(real_tables(), real=True, world=tables(close_to_best=True))
    first = text.split("\n")[0]
    for limit in ("one seed", "small models", "manual pages", "hadith"):
        assert limit in first
    assert ("src reads its held-out en at 1.300 bits per byte against 2.210 for an add-one "
            "unigram and 1.470 for a Kneser–Ney bigram") in first
    assert "(41 % below the unigram, 12 % below the bigram): it clears the floor" in first
    assert "xx 2.900 bits per byte" in first
    assert "alignment with the dictionary's held-out half" in text
    assert "world_oracle` is the world's oracle" not in text
    # the final LAPT checkpoints get the zero-shot section's sentences, from their own tests
    after = text.split("### After LAPT")[1]
    assert "bits per byte: a is" in after and "(`results/report/lapt_zeroshot.md`)" in after
    found = claims(real_tables())
    assert set(found.loc[found["table"] == "lapt_zeroshot", "stage"]) == {"lapt"}


def test_the_real_text_findings_say_where_the_leaders_differ_from_the_world():
    from embtransfer.report.findings import leaders

    world = tables(close_to_best=False)
    assert leaders(world, "alignment") == {"xx/src/gpt2_x": ("a", True)}
    same = findings_markdown(real_tables(), real=True, world=world)
    assert "- held-out P@10: real text a first in 1 of 1 (1*); the miniature world a first " \
           "in 1 of 1 (1*): the same method leads most often." in same
    swapped = {**world, "alignment": _swap(world["alignment"], "a", "b")}
    differ = findings_markdown(real_tables(), real=True, world=swapped)
    assert "the miniature world b first in 1 of 1 (1*): the verdicts differ." in differ


def test_the_readme_shows_the_findings_of_the_committed_real_reference_run():
    """The README's "What real text shows" is the findings of docs/reference_real_run/
    beside docs/reference_run/ (`make findings-real-reference` rewrites both), or says that
    no real run's tables are committed yet."""
    from embtransfer.report.findings import (
        NO_REAL_REFERENCE,
        REAL_END,
        REAL_REFERENCE_DIR,
        REAL_START,
    )

    readme = (REPO / README).read_text()
    assert readme.count(REAL_START) == readme.count(REAL_END) == 1
    reference = REPO / REAL_REFERENCE_DIR
    section = current_section(readme, real=True)
    assert section == readme_section(reference, real=True, world=REPO / REFERENCE_DIR)
    if (reference / "run.json").is_file():
        run = json.loads((reference / "run.json").read_text())
        assert f"commit {run['commit']} ({run['date']})" in section
    else:
        assert section == NO_REAL_REFERENCE


def test_refresh_of_the_real_reference_rewrites_only_its_section(tmp_path, monkeypatch):
    from embtransfer.report.findings import REAL_END, REAL_START

    report = write_report(tmp_path / "report", real_tables())
    readme = tmp_path / "README.md"
    readme.write_text(f"{START}\nworld\n{END}\n{REAL_START}\nold\n{REAL_END}\n")
    monkeypatch.chdir(REPO)  # the commit is the checkout's; the world's reference is REPO's
    refresh_reference(report, tmp_path / "ref", readme, real=True)
    text = readme.read_text()
    assert text.startswith(f"{START}\nworld\n{END}\n{REAL_START}\n") and "\nold\n" not in text
    assert current_section(text, real=True) == readme_section(tmp_path / "ref", real=True)
    assert "### Real text beside the miniature world" in current_section(text, real=True)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "ref" / TABLES["source_floor"]),
                                  pd.read_csv(report / TABLES["source_floor"]))

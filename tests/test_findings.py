"""findings.md: written from the comparisons table and the summaries alone. It opens with at
most ten lines (each kind's best or tied-best methods, SALT against OMP, every kind of
anomaly the comparisons hold, with its count), a method is called best only where every
other is apart from it, the committed pages are what the committed references give, and
two runs are compared test by test."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from embtransfer.core import paths
from embtransfer.core.paired import normal_p
from embtransfer.report.comparisons import (
    SUMMARY_COLUMNS,
    TEST_COLUMNS,
    compare_setting,
    decide,
    detectable_discordant,
    frame_of,
    given_test,
    pair_ids,
    with_decisions,
)
from embtransfer.report.findings import (
    KINDS,
    MARKERS,
    PAGES,
    README,
    REAL_REFERENCE_DIR,
    REFERENCE_DIR,
    RUN_JSON,
    findings_markdown,
    headline,
    headline_block,
    main,
    read_run,
    reference_text,
    refresh_reference,
    replace_block,
    write_pages,
)

REPO = Path(__file__).resolve().parents[1]
TOKENS = 400

# -- synthetic runs: settings scored by the spine itself -----------------------------------------


def hits(ones: int, start: int = 0, n: int = TOKENS) -> np.ndarray:
    """0/1 scores over ``n`` items: ``ones`` hits from item ``start`` on."""
    scores = np.zeros(n)
    scores[start:start + ones] = 1
    return scores


def document_bits(factors: dict[str, float], seed: int = 0, n: int = 200
                  ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per-document bits of each method (its factor times the bytes, with 5 % noise per
    document) and the documents' bytes."""
    n_bytes = np.random.default_rng(seed).integers(50, 150, n).astype(float)
    return {method: n_bytes * factor * (1 + np.random.default_rng(seed + i).normal(0, 0.05, n))
            for i, (method, factor) in enumerate(factors.items())}, n_bytes


HELD_OUT = {"family": "alignment", "stage": "transfer", "source": "src", "side": "input",
            "split": "held_out", "metric": "p_at_10"}


def alignment(lang: str, scores: dict[str, np.ndarray]) -> tuple[list, list]:
    return compare_setting({**HELD_OUT, "lang": lang, "target": f"gpt2_{lang}"}, scores, 0)


def zeroshot(lang: str, factors: dict[str, float], flags: dict[str, str] | None = None,
             family: str = "zeroshot") -> tuple[list, list]:
    bits, n_bytes = document_bits(factors)
    setting = {"family": family, "stage": "lapt" if family == "lapt_zeroshot" else "transfer",
               "lang": lang, "source": "src", "target": f"gpt2_{lang}",
               "metric": "bits_per_byte"}
    return compare_setting(setting, bits, 0, n_bytes, flags)


def paper_table(number: int, lang: str, scores: dict[str, np.ndarray]) -> tuple[list, list]:
    setting = {"family": f"table{number}", "stage": "lapt", "lang": lang, "source": "src",
               "target": f"gpt2_{lang}", "variant": "target", "metric": "Facts acc"}
    return compare_setting(setting, scores, 0)


def probe(lang: str, z: float) -> dict:
    setting = {"family": "plm_probes", "lang": lang, "source": "src",
               "target": f"gpt2_{lang}", "metric": "span_probe"}
    return given_test(setting, f"gpt2_{lang}", z, 1.0, normal_p(z), "normal")


def run(*parts: tuple[list, list], tests: tuple[dict, ...] = (), alpha: float = 0.001
        ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(comparisons, summaries) of the settings ``parts`` and the tests ``tests``, decided."""
    decided = decide(frame_of([t for _, made in parts for t in made] + list(tests),
                              TEST_COLUMNS), alpha)
    decided.attrs["alpha"] = alpha
    return decided, frame_of([s for made, _ in parts for s in made], SUMMARY_COLUMNS)


def current_block(text: str, real: bool) -> str:
    """The block between a page's markers (:data:`MARKERS`), as ``write_pages`` wrote it."""
    start_mark, end_mark = MARKERS[real]
    return text[text.index(start_mark) + len(start_mark) + 1: text.index(end_mark)]


def opening(text: str) -> list[str]:
    """The lines of findings.md between its title and the first blank line after them."""
    title, lines = text.split("\n\n")[:2]
    assert title.startswith("# ")
    return lines.split("\n")


def line_of(text: str, label: str) -> str:
    found = [line for line in opening(text) if line.startswith(f"- **{label}**")]
    assert len(found) == 1, (label, opening(text))
    return found[0]


ALIGNMENT = KINDS[0].label
ZEROSHOT = KINDS[1].label
#: Each kind of anomaly by the words that open its line.
ANOMALIES = ("Worse than Random", "Rows blown up or zero", "PLMs without measurable meaning",
             "Tests without power")


def anomalous() -> tuple[pd.DataFrame, pd.DataFrame]:
    """A run with one of every anomaly: clp's bits per byte worse than Random's and its rows
    flagged, a target PLM whose probe does not clear and one whose probe reads below its
    baseline, and a held-out setting of 15 tokens whose tests cannot clear however the
    tokens fall."""
    return run(alignment("xx", {"salt": hits(120), "ofa": hits(116, 4), "random": hits(0),
                                "world_oracle": hits(TOKENS)}),
               zeroshot("xx", {"salt": 1.0, "omp": 1.2, "random": 1.5, "clp": 2.0},
                        {"clp": "3 rows flagged"}),
               alignment("yy", {"salt": hits(3, n=15), "ofa": hits(1, n=15),
                                "random": hits(0, n=15)}),
               tests=(probe("xx", 0.5), probe("yy", 20.0), probe("zz", -20.0)))


def clean() -> tuple[pd.DataFrame, pd.DataFrame]:
    """A run without anomalies: every method better than Random, no row flagged, every
    probe clears, every held-out test could clear."""
    return run(alignment("xx", {"salt": hits(120), "ofa": hits(40, 80), "random": hits(0)}),
               zeroshot("xx", {"salt": 1.0, "omp": 1.2, "random": 1.5}),
               tests=(probe("xx", 20.0),))


# -- the opening lines --------------------------------------------------------------------------


def test_a_method_is_called_best_only_where_every_other_is_apart():
    """salt leads ofa by 4 tokens of 400 (McNemar p 0.125): both are tied for best; 80
    tokens apart, salt alone is best and ofa is not named."""
    random = {"random": hits(0), "world_oracle": hits(TOKENS)}
    close = findings_markdown(*run(alignment("xx", {"salt": hits(120), "ofa": hits(116, 4),
                                                    **random})))
    apart = findings_markdown(*run(alignment("xx", {"salt": hits(120), "ofa": hits(40, 80),
                                                    **random})))
    tied = line_of(close, ALIGNMENT)
    assert "salt tied for best in 1" in tied and "ofa tied for best in 1" in tied
    assert "salt best" not in tied
    alone = line_of(apart, ALIGNMENT)
    assert alone.endswith("(1 setting × 3 methods): salt best in 1.")
    # the oracle is shown, never ranked: not one of the methods counted
    assert "world_oracle" not in tied + alone
    # no test separates any method: all are tied, none is called best
    same = findings_markdown(*run(alignment("xx", {"salt": hits(3), "ofa": hits(3, 1),
                                                   "random": hits(2)})))
    assert line_of(same, ALIGNMENT).endswith(
        "all 3 methods tied for best: no test separates them.")


def test_each_kinds_line_names_its_best_or_tied_best_methods():
    """Per kind, over its settings: a method best alone where every other is worse than it
    (the decided tests against the best), tied where some other is not apart; the counts
    add up to the settings."""
    decided, summaries = run(
        alignment("xx", {"salt": hits(120), "ofa": hits(40, 80), "random": hits(0)}),
        alignment("yy", {"salt": hits(120), "ofa": hits(118, 2), "random": hits(0)}),
        zeroshot("xx", {"salt": 1.0, "lstsq": 0.8, "random": 1.5}),
        zeroshot("yy", {"salt": 1.0, "lstsq": 0.8, "random": 1.5}),
        paper_table(1, "xx", {"salt": hits(100), "ofa": hits(100, 1), "random": hits(90)}))
    text = findings_markdown(decided, summaries)
    assert line_of(text, ALIGNMENT).endswith(
        "(2 settings × 3 methods): salt best in 1 and tied in 1; ofa tied for best in 1.")
    assert line_of(text, ZEROSHOT).endswith("(2 settings × 3 methods): lstsq best in 2.")
    # the paper tables share one line
    assert line_of(text, "Benchmarks").endswith(
        "Table 1, Facts acc (1 setting × 3 methods): all 3 methods tied for best: no test "
        "separates them.")
    # each "best" is the decided table's: every other method worse than it there
    best = decided[decided["versus"] == "best"]
    apart = best.groupby(["family", "lang", "other"])["relation"].apply(
        lambda r: bool((r == "worse").all()))
    assert apart.to_dict() == {
        ("alignment", "xx", "salt"): True, ("alignment", "yy", "salt"): False,
        ("table1", "xx", "ofa"): False, ("zeroshot", "xx", "lstsq"): True,
        ("zeroshot", "yy", "lstsq"): True}


def test_every_kind_of_anomaly_is_counted_and_none_is_invented():
    text = findings_markdown(*anomalous())
    for kind in ANOMALIES:
        line_of(text, kind)
    assert re.search(r"\(1 checkpoints?: xx gpt2_xx clp in zeroshot\)",
                     line_of(text, "Worse than Random"))
    assert "(1 checkpoint: xx gpt2_xx clp)" in line_of(text, "Rows blown up or zero")
    assert "(2 of 3: xx gpt2_xx, zz gpt2_zz)" in line_of(text, "PLMs without measurable meaning")
    power = line_of(text, "Tests without power")
    assert "(1 of the held-out settings' metrics)" in power
    # 15 tokens, where the family's strictest Holm step (0.001 over its 8 tests: each
    # setting's 4 pairs, a pair tested against the best and against SALT counted once)
    # needs 14 discordant ones; the largest difference there is 3 tokens
    assert detectable_discordant(0.001 / 8) == 14
    assert "≥ 14 discordant tokens" in power
    calm = findings_markdown(*clean())
    for kind in ANOMALIES:
        assert f"**{kind}**" not in calm
    assert len(opening(calm)) == 3  # two kinds' leaders and SALT against OMP


def test_a_run_without_paired_tests_says_so():
    """A run whose report holds no paired test (no per-item scores: the report rule on
    results without them) still has findings: no opening line, 0 of 0 tests."""
    decided, summaries = run()
    assert decided.empty
    text = findings_markdown(decided, summaries)
    assert text.startswith("# What the run shows\n")
    assert "0 of the 0 tests clear it" in text
    assert headline(decided, with_decisions(summaries, decided)) == [
        "No paired test in this run: nothing to rank (see the tables below)."]


def test_salt_against_omp_counts_the_decided_tests_from_salts_side():
    decided, summaries = clean()
    line = line_of(findings_markdown(decided, summaries), "SALT against OMP")
    versus = decided[(decided["versus"] == "salt") & (decided["method"] == "omp")]
    assert len(versus) == 1 and versus["relation"].iloc[0] == "worse"
    assert re.search(r"\(1 paired tests? over zeroshot\): SALT better in 1, worse in 0, "
                     r"not apart in 0\.$", line)


def test_the_findings_open_with_at_most_ten_lines():
    for text in (findings_markdown(*anomalous()), findings_markdown(*clean()),
                 (REPO / PAGES[False]).read_text(),
                 current_block((REPO / PAGES[True]).read_text(), real=True)):
        assert 1 <= len(opening(text)) <= 10
        assert all(line.startswith("- **") for line in opening(text))


def test_every_anomaly_stays_in_the_opening_when_every_kind_has_a_leader():
    """A run with all seven kinds (alignment, zero-shot, after LAPT, Tables 1-4), SALT
    against OMP and all four anomalies has twelve candidate lines: the opening keeps ten,
    and the anomalies are what it must not drop."""
    decided, summaries = anomalous()
    more = run(zeroshot("xx", {"salt": 1.0, "omp": 1.2, "random": 1.5}, family="lapt_zeroshot"),
               *(paper_table(n, "xx", {"salt": hits(100), "ofa": hits(60), "random": hits(50)})
                 for n in (1, 2, 3, 4)))
    decided = decide(pd.concat([decided[TEST_COLUMNS], more[0][TEST_COLUMNS]],
                               ignore_index=True))
    summaries = pd.concat([summaries, more[1]], ignore_index=True)
    lines = headline(decided, with_decisions(summaries, decided))
    assert len(lines) <= 10
    for kind in ANOMALIES:
        assert any(line.startswith(f"**{kind}**") for line in lines), kind


def test_the_count_of_clearing_tests_is_the_comparisons_tables():
    for alpha in (0.001, 0.5):
        decided, summaries = run(
            alignment("xx", {"salt": hits(120), "ofa": hits(112, 8), "random": hits(115, 5)}),
            alpha=alpha)
        text = findings_markdown(decided, summaries)
        # a pair held twice (against the best and against SALT) is one test
        once = decided[~pair_ids(decided).duplicated()]
        assert len(once) < len(decided)
        assert f"{int(once['clears'].sum())} of the {len(once)} tests clear it" in text
        assert f"family-wise α = {alpha} " in text
    assert decide(decided, 0.5)["clears"].sum() > decide(decided, 0.001)["clears"].sum()


def test_a_real_text_run_states_its_limits_and_stands_beside_the_world():
    world = run(alignment("xx", {"salt": hits(120), "ofa": hits(40, 80), "random": hits(0)}),
                zeroshot("xx", {"salt": 1.0, "lstsq": 0.8, "random": 1.5}))
    real = run(alignment("de", {"salt": hits(40, 80), "ofa": hits(120), "random": hits(0)}),
               zeroshot("de", {"salt": 1.0, "lstsq": 0.8, "random": 1.5}))
    text = findings_markdown(*real, real=True, world=world)
    assert text.startswith("# What real text shows\n")
    assert "A real-text run holds for its own models and text" in text
    beside = line_of(text, "Beside the miniature world")
    assert f"{ALIGNMENT} over 3 common methods: ofa here, salt in the world (they differ)" \
        in beside
    assert f"{ZEROSHOT} over 3 common methods: lstsq here, lstsq in the world (the same)" \
        in beside
    assert "real-text run holds" not in findings_markdown(*real)


# -- the committed references and the pages written from them ----------------------------------


def test_the_committed_pages_are_what_the_committed_references_give():
    """The README's two blocks, docs/findings.md and docs/real_text.md's block are the
    findings of docs/reference_run/ and docs/reference_real_run/ (`--pages` rewrites them)."""
    readme = (REPO / README).read_text()
    for real in (False, True):
        start, end = MARKERS[real]
        assert readme.count(start) == readme.count(end) == 1
        reference = REPO / (REAL_REFERENCE_DIR if real else REFERENCE_DIR)
        run_json = json.loads((reference / RUN_JSON).read_text())
        assert {"commit", "date"} <= set(run_json) <= {"commit", "date", "note"}
        text = reference_text(reference, real, REPO / REFERENCE_DIR)
        assert f"of the run of commit {run_json['commit']} ({run_json['date']}" in text
        assert run_json.get("note", "") in text  # what run a re-reported reference is of
        assert current_block(readme, real) == headline_block(text, PAGES[real])
        page = (REPO / PAGES[real]).read_text()
        assert (current_block(page, real=True) if real else page) == text


def test_the_readme_block_is_the_headline_and_a_link():
    decided, summaries = anomalous()
    text = findings_markdown(decided, summaries)
    block = headline_block(text, PAGES[False])
    lines = headline(decided, with_decisions(summaries, decided))
    assert block == "\n".join(f"- {line}" for line in lines) + (
        f"\n\nEvery setting's table: [{PAGES[False]}]({PAGES[False]}).\n")


def write_run(directory: Path, decided: pd.DataFrame, summaries: pd.DataFrame,
              mtime: float | None = None) -> Path:
    """A report folder with the two tables the findings read."""
    directory.mkdir(parents=True)
    for name, frame in (("comparisons_csv", decided), ("summaries_csv", summaries)):
        path = directory / paths.REPORT_FILES[name]
        frame.to_csv(path, index=False)
        if mtime is not None:
            os.utime(path, (mtime, mtime))
    return directory


def checkout(root: Path) -> str:
    """A git checkout at ``root`` with one commit; its short hash."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for command in (["init", "-q"], ["add", "README.md"], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git", *command], cwd=root, env=env, check=True)
    return subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=root, check=True,
                          capture_output=True, text=True).stdout.strip()


def pages_root(root: Path) -> Path:
    """A checkout's README (both blocks between other text) and docs/real_text.md (its
    block between other text)."""
    (root / "docs").mkdir(parents=True)
    readme = root / "README.md"
    readme.write_text("# T\n\nbefore\n{}\nold world\n{}\nbetween\n{}\nold real\n{}\nafter\n"
                      .format(*MARKERS[False], *MARKERS[True]))
    (root / PAGES[True]).write_text("# Real\n\nabove\n{}\nold page\n{}\nbelow\n"
                                    .format(*MARKERS[True]))
    return readme


def outside(text: str, real: bool) -> tuple[str, str]:
    start, end = MARKERS[real]
    return text.split(start)[0], text.split(end)[1]


def test_refresh_copies_the_tables_and_rewrites_only_the_blocks(tmp_path):
    root = tmp_path / "checkout"
    readme = pages_root(root)
    commit = checkout(root)
    before = readme.read_text()
    when = 1_600_000_000.0  # 2020-09-13
    report = write_run(tmp_path / "report", *anomalous(), mtime=when)
    refresh_reference(report, readme=readme, root=root)
    reference = root / REFERENCE_DIR
    for name in ("comparisons_csv", "summaries_csv"):
        file = paths.REPORT_FILES[name]
        assert (reference / file).read_bytes() == (report / file).read_bytes()
    assert json.loads((reference / RUN_JSON).read_text()) == {"commit": commit,
                                                              "date": "2020-09-13"}
    text = reference_text(reference)
    assert (root / PAGES[False]).read_text() == text
    after = readme.read_text()
    assert current_block(after, False) == headline_block(text, PAGES[False])
    assert "old world" not in after
    assert outside(after, False) == outside(before, False)  # the real block is untouched
    assert current_block(after, True) == "old real\n"
    assert "old page" in (root / PAGES[True]).read_text()  # no real reference: not rewritten


def test_a_new_world_reference_rewrites_the_real_pages_beside_it(tmp_path, monkeypatch):
    """The real-text findings set their leaders beside the world's: refreshing the world
    reference rewrites the real block of the README and docs/real_text.md as well."""
    root = tmp_path / "checkout"
    readme = pages_root(root)
    checkout(root)
    real = write_run(tmp_path / "real", *clean())
    refresh_reference(real, real=True, readme=readme, root=root)
    page = (root / PAGES[True]).read_text()
    assert current_block(page, True) == reference_text(root / REAL_REFERENCE_DIR, True,
                                                       root / REFERENCE_DIR)
    assert page.startswith("# Real\n\nabove\n") and page.endswith("\nbelow\n")
    assert "Beside the miniature world" not in page  # no world reference yet
    refresh_reference(write_run(tmp_path / "world", *anomalous()), readme=readme, root=root)
    text = reference_text(root / REAL_REFERENCE_DIR, True, root / REFERENCE_DIR)
    assert "Beside the miniature world" in text
    assert current_block((root / PAGES[True]).read_text(), True) == text
    after = readme.read_text()
    assert current_block(after, True) == headline_block(text, PAGES[True])
    assert after.startswith("# T\n\nbefore\n") and after.endswith("\nafter\n")
    assert "\nbetween\n" in after
    # --pages rewrites the same from the committed tables: nothing changes
    page = (root / PAGES[True]).read_text()
    write_pages(False, readme, root)
    monkeypatch.chdir(root)  # --pages works on the checkout it runs in
    assert main(["--pages"]) == 0
    assert readme.read_text() == after and (root / PAGES[True]).read_text() == page


def test_replacing_a_block_keeps_what_is_around_it():
    text = "a\n{}\nold\n{}\nb\n".format(*MARKERS[True])
    new = replace_block(text, "new\n", real=True)
    assert new == "a\n{}\nnew\n{}\nb\n".format(*MARKERS[True])
    assert current_block(new, real=True) == "new\n"
    with pytest.raises(ValueError):
        replace_block(text, "new\n", real=False)  # no world markers in it


# -- two runs compared ----------------------------------------------------------------------------


def test_two_runs_are_compared_test_by_test(tmp_path, capsys):
    decided, summaries = anomalous()
    a = write_run(tmp_path / "A", decided, summaries)
    assert main(["--compare", str(a), str(a)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and re.fullmatch(r"(\d+) of \1 tests shared by the two runs agree\.",
                                          out[0])
    shared = int(out[0].split()[0])
    flipped = decided.copy()
    line = flipped.index[(flipped["family"] == "zeroshot") & (flipped["method"] == "salt")
                         & (flipped["versus"] == "random")][0]
    assert flipped.loc[line, "relation"] == "better"
    flipped.loc[line, "relation"] = "worse"
    b = write_run(tmp_path / "B", flipped, summaries)
    assert main(["--compare", str(a), str(b)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{shared - 1} of {shared} tests shared by the two runs agree.",
                   "- zeroshot transfer xx/src/gpt2_xx   bits_per_byte: salt against random: "
                   "better in A, worse in B"]
    # a test only one run made is not compared
    one = pair_ids(decided) == pair_ids(decided).loc[line]  # both lines of the pair
    c = write_run(tmp_path / "C", decided[~one], summaries)
    assert main(["--compare", str(a), str(c)]) == 0
    assert capsys.readouterr().out.startswith(f"{shared - 1} of {shared - 1} tests")


def test_a_report_folder_reads_back_as_it_was_written(tmp_path):
    decided, summaries = anomalous()
    again = read_run(write_run(tmp_path / "r", decided, summaries))
    assert findings_markdown(*again) == findings_markdown(decided, summaries)
    assert re.search(r"\d+ of the \d+ tests clear it", findings_markdown(*again))

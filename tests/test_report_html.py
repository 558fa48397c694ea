"""The HTML report's front page (workflow/report/workflow.rst): rendered as Snakemake renders
it (Jinja2 with the report's result files and categories, then docutils), it opens with the
headline of findings.md, then the report's guide, then the findings' per-setting tables.
tests/test_report_workflow.py builds a whole report with `snakemake --report`."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
from docutils.core import publish_parts
from jinja2 import Environment

FRONT_PAGE = Path(__file__).parents[1] / "workflow" / "report" / "workflow.rst"

FINDINGS = """\
# What the run shows

- **Zero-shot bits per byte** (2 settings × 3 methods): lstsq best in 2.
- **Worse than Random** (1 checkpoint: xx gpt2_xx clp): `!` below; a <b> stays text.

Written from the comparisons table: 3 of the 9 tests clear it.

## Per setting

`▲` best of the setting; `▽` apart from the best (worse).

### Zero-shot bits per byte

#### transfer: xx, source src, target gpt2_xx (n = 20)

| method | bits per byte | flags |
|---|---|---|
| lstsq | 1.0253 ± 0.0059 (1) ▲ʳ |  |
| clp | 18.1007 ± 0.0844 (3) ▽! | a \\| b |

- a setting:
  - nested under it
"""


@dataclass(frozen=True)
class Category:
    name: str


@dataclass
class Result:
    """What the front page's template reads of one of Snakemake's report file records."""

    path: Path
    target: str


def render(workdir: Path, names: list[str], categories: list[str]) -> str:
    """The front page's HTML as Snakemake's report makes it: the template rendered with
    ``files`` and ``categories`` and the reference targets Snakemake appends (a link per
    category and per result, URL-encoded), then read as reStructuredText; the lines joined."""
    files = [Result(workdir / "results" / "report" / name, name) for name in names]
    cats = {Category(name): {} for name in categories}
    links = "\n\n" + "\n".join(
        [f".. _{c}: javascript:app.showCategory('{quote(c)}')" for c in categories]
        + [f".. _{f.target}: javascript:app.showResultInfo('{quote(str(f.path))}')"
           for f in files])
    env = Environment(trim_blocks=True, lstrip_blocks=True)
    text = env.from_string(FRONT_PAGE.read_text() + links).render(
        snakemake=None, categories=cats, files=files)
    html = publish_parts(text, writer="html")["html_body"]
    return re.sub(r"\s*\n\s*", " ", html).replace("> <", "><")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "results" / "report").mkdir(parents=True)
    (tmp_path / "results" / "report" / "findings.md").write_text(FINDINGS)
    return tmp_path


def test_the_front_page_opens_with_the_findings_headline(workdir):
    html = render(workdir, ["findings.md", "comparisons.md", "comparisons.csv",
                            "methods.png", "figure2.png"],
                  ["Methods compared", "Paper figures", "Paper tables",
                   "Alignment with the world's truth"])
    assert "system-message" not in html and "problematic" not in html  # no rst error
    title = html.index("Cross-lingual embedding transfer (SALT and baselines)")
    headline = html.index("<strong>Zero-shot bits per byte</strong> (2 settings")
    guide = html.index(">The report</h")
    tables = html.index("<table>")
    # the headline first, the guide to the report, then the per-setting tables
    assert title < headline < guide < tables
    assert html.index("<h3>Per setting</h3>") > guide
    # the table: its header, a row per method, an escaped pipe kept in its cell
    assert "<th>method</th><th>bits per byte</th><th>flags</th>" in html
    assert "<td>lstsq</td><td>1.0253 ± 0.0059 (1) ▲ʳ</td><td></td>" in html
    assert "<td>a | b</td>" in html
    # Markdown's code, its nested lists, and text that is not HTML
    assert "<code>!</code> below; a &lt;b&gt; stays text." in html
    assert re.search(r"<li>a setting: ?<ul><li>nested under it ?</li></ul></li></ul>", html)
    # the results and categories it names are links into the report
    for name in ("findings.md", "comparisons.md", "comparisons.csv", "methods.png"):
        path = quote(f"{workdir}/results/report/{name}")
        assert f"javascript:app.showResultInfo('{path}')" in html
    assert "javascript:app.showCategory('Paper%20tables')" in html


def test_a_report_without_findings_says_so(workdir):
    html = render(workdir, ["methods.png"], ["Real text"])
    assert "system-message" not in html and "problematic" not in html
    assert "This report has no findings" in html and "<table>" not in html
    # results and categories this report lacks are named, not linked
    assert '<tt class="docutils literal">comparisons.md</tt>' in html
    assert "<strong>Paper tables</strong>" in html
    assert "javascript:app.showCategory('Real%20text')" in html


def test_findings_without_sections_are_all_headline(workdir):
    (workdir / "results" / "report" / "findings.md").write_text(textwrap.dedent("""\
        # What real text shows

        - **ar, llama_en, gpt2_ar**: lstsq is best.
        """))
    html = render(workdir, ["findings.md"], ["Real text"])
    assert "system-message" not in html
    assert html.index("<strong>ar, llama_en, gpt2_ar</strong>") < html.index(
        ">The report</h")

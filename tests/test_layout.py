"""The layout leads the way: a stage's rule file, scripts and package share its name.

A newcomer holding an artifact path finds its code through the design page's artifact
table (results/<dir>/ -> stage), then rules/<stage>.smk, scripts/<stage>/ and
embtransfer/<stage>/.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from embtransfer.core import paths

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "workflow" / "rules"
SCRIPTS = ROOT / "workflow" / "scripts"
PACKAGE = ROOT / "workflow" / "embtransfer"
# Subpackages that are no stage of their own: the plumbing every stage uses, the config's
# validation (above the stages: it asks their catalogs what is valid), and the miniature
# world (built by the data stage, pretrained by the models stage).
NOT_STAGES = {"core", "config", "world"}
SCRIPT = re.compile(r'"\.\./scripts/([\w/]+\.py)"')
RULE = re.compile(r"^[ \t]*rule (\w+):\n(.*?)(?=^[ \t]*(?:use )?rule |^\S|\Z)", re.M | re.S)
USE_RULE = re.compile(r"^[ \t]*use rule (\w+) as (\w+)", re.M)


def stages() -> list[str]:
    return sorted(p.stem for p in RULES.glob("*.smk") if p.stem != "common")


def rule_scripts() -> dict[str, str]:
    """Every rule's script, a ``use rule A as B`` inheriting A's."""
    texts = [p.read_text() for p in RULES.glob("*.smk")]
    scripts = {name: found[0] for text in texts for name, body in RULE.findall(text)
               if (found := SCRIPT.findall(body))}
    for text in texts:
        for parent, child in USE_RULE.findall(text):
            if parent in scripts:
                scripts[child] = scripts[parent]
    return scripts


def scripts_of(stage: str) -> list[str]:
    """The scripts the rules of ``rules/<stage>.smk`` run, inherited ones included."""
    text = (RULES / f"{stage}.smk").read_text()
    names = [name for name, _ in RULE.findall(text)] + [c for _, c in USE_RULE.findall(text)]
    return sorted({rule_scripts()[n] for n in names if n in rule_scripts()})


def test_every_stage_has_its_scripts_dir_and_package() -> None:
    for stage in stages():
        assert scripts_of(stage), f"rules/{stage}.smk runs no script"
        for script in scripts_of(stage):
            assert script.startswith(f"{stage}/"), (
                f"rules/{stage}.smk runs scripts/{script}: a stage's scripts live in "
                f"workflow/scripts/{stage}/")
            assert (SCRIPTS / script).is_file(), f"rules/{stage}.smk: no scripts/{script}"
        assert (PACKAGE / stage / "__init__.py").is_file(), (
            f"stage {stage!r} (rules/{stage}.smk) has no package workflow/embtransfer/{stage}/")


def test_every_script_is_run_by_its_stage() -> None:
    used = {script for stage in stages() for script in scripts_of(stage)}
    on_disk = {str(p.relative_to(SCRIPTS)) for p in SCRIPTS.rglob("*.py")}
    assert on_disk == used, f"scripts no rule runs: {sorted(on_disk - used)}"


def test_the_package_top_level_reads_as_the_pipeline() -> None:
    top = [p for p in PACKAGE.iterdir() if p.name not in {"__init__.py", "__pycache__"}]
    modules = sorted(p.name for p in top if p.suffix == ".py")
    assert not modules, f"loose modules at the top of embtransfer/: {modules}"
    packages = {p.name for p in top if (p / "__init__.py").is_file()}
    assert packages - NOT_STAGES == set(stages()), (
        f"subpackages {sorted(packages - NOT_STAGES)} are not the stages {stages()}")
    for name in packages:
        doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text()))
        assert doc, f"embtransfer/{name}/__init__.py does not say what the package is"


def test_every_artifact_directory_is_mapped_to_its_stage_in_the_design() -> None:
    templates = [v for v in vars(paths).values() if isinstance(v, paths.Template)]
    # a seeded artifact's directory is the one below results/seed<N>/
    seeded = {t.removeprefix(paths.SEEDED + "/").split("/")[0] for t in templates
              if t.startswith(paths.SEEDED + "/")}
    dirs = {t.split("/")[1] for t in templates if t.startswith("results/")} - {
        paths.SEEDED.split("/")[1]} | seeded
    assert len(dirs) > 10, "found too few artifact directories in embtransfer.core.paths"
    design = (ROOT / "docs" / "design.md").read_text()
    rows = dict(re.findall(r"^\| `results/(\w+)/` \| (\w+) \|", design, flags=re.M))
    missing = sorted(dirs - rows.keys())
    assert not missing, f"docs/design.md's artifact table lacks results/{missing}/"
    for directory, stage in rows.items():
        assert stage in stages(), f"docs/design.md maps results/{directory}/ to {stage!r}"


def test_the_design_lists_the_seeded_artifact_directories() -> None:
    templates = [v for v in vars(paths).values() if isinstance(v, paths.Template)]
    seeded = {t.removeprefix(paths.SEEDED + "/").split("/")[0] for t in templates
              if t.startswith(paths.SEEDED + "/")}
    design = " ".join((ROOT / "docs" / "design.md").read_text().split())
    listed = re.search(r"`results/seed<N>/`: seeded: ([\w, ]+)", design)
    assert listed, "docs/design.md does not list the seeded artifact directories"
    assert set(listed.group(1).replace(" ", "").split(",")) == seeded

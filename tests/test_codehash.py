"""The code hash follows package imports transitively and nothing else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from embtransfer.core import codehash


@pytest.fixture()
def fake_package(tmp_path, monkeypatch):
    pkg = tmp_path / "embtransfer"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from embtransfer import b\nimport numpy\n")
    (pkg / "b.py").write_text("from .sub import c\n")
    (pkg / "sub" / "c.py").write_text("from ..d import thing\n")
    (pkg / "d.py").write_text("thing = 1\n")
    (pkg / "e.py").write_text("import embtransfer.a\n")
    monkeypatch.setattr(codehash, "PACKAGE_DIR", pkg)
    codehash.package_imports.cache_clear()
    yield pkg
    codehash.package_imports.cache_clear()


def test_closure_follows_absolute_relative_and_parent_imports(fake_package):
    # `from embtransfer import b` runs the package __init__ too, so it counts.
    assert codehash.module_closure("embtransfer.a") == [
        "embtransfer",
        "embtransfer.a",
        "embtransfer.b",
        "embtransfer.d",
        "embtransfer.sub",
        "embtransfer.sub.c",
    ]
    assert "embtransfer.e" not in codehash.module_closure("embtransfer.a")
    assert "embtransfer.a" in codehash.module_closure("embtransfer.e")


def test_editing_a_dependency_changes_the_hash_of_dependents_only(fake_package):
    before_a = codehash.code_hash("embtransfer.a")
    before_d = codehash.code_hash("embtransfer.d")
    (fake_package / "sub" / "c.py").write_text("from ..d import thing  # edited\n")
    codehash.package_imports.cache_clear()
    assert codehash.code_hash("embtransfer.a") != before_a
    assert codehash.code_hash("embtransfer.d") == before_d


def test_unknown_module_is_refused(fake_package):
    with pytest.raises(ValueError, match="no source file"):
        codehash.code_hash("embtransfer.nope")
    with pytest.raises(ValueError, match="not a module"):
        codehash.code_hash("numpy")


def test_real_package_hash_is_stable():
    module = "embtransfer.core.atomic"
    assert codehash.code_hash(module) == codehash.code_hash(module)
    assert Path(codehash.module_path("embtransfer.core.atomic")).exists()


def test_script_hash_follows_the_script_imports(fake_package, tmp_path):
    script = tmp_path / "job.py"
    script.write_text("from embtransfer.e import x\nimport numpy\n")
    before = codehash.script_hash(script)
    (fake_package / "d.py").write_text("thing = 2\n")  # e -> a -> b -> sub.c -> d
    codehash.package_imports.cache_clear()
    assert codehash.script_hash(script) != before
    unrelated = tmp_path / "other.py"
    unrelated.write_text("from embtransfer import d\n")
    before = codehash.script_hash(unrelated)
    (fake_package / "b.py").write_text("from .sub import c  # edited\n")
    codehash.package_imports.cache_clear()
    assert codehash.script_hash(unrelated) == before


def _kept_parses(monkeypatch, path: Path) -> None:
    """A fresh process's state: no parses in memory, then those kept in ``path``."""
    monkeypatch.setattr(codehash, "_PARSES", codehash._Parses())
    codehash.package_imports.cache_clear()
    codehash.keep_parses_in(path)


def test_kept_parses_give_the_same_closures_and_follow_edits(fake_package, tmp_path,
                                                            monkeypatch):
    kept = tmp_path / "state" / "code_imports.json"
    modules = ["embtransfer.a", "embtransfer.b", "embtransfer.e", "embtransfer.sub.c"]
    _kept_parses(monkeypatch, kept)
    fresh = {m: codehash.module_closure(m) for m in modules}
    codehash._PARSES.save()
    assert kept.is_file()

    # the next invocation reads the parses and parses nothing
    _kept_parses(monkeypatch, kept)
    with monkeypatch.context() as patch:
        patch.setattr(codehash.ast, "parse", lambda *a, **k: pytest.fail("parsed again"))
        assert {m: codehash.module_closure(m) for m in modules} == fresh

    # an edited file is parsed again: b no longer imports sub.c
    (fake_package / "b.py").write_text("from . import d\n")
    _kept_parses(monkeypatch, kept)
    assert codehash.module_closure("embtransfer.b") == ["embtransfer", "embtransfer.b",
                                                        "embtransfer.d"]
    # a module that appears later counts at once (`from embtransfer import f` names it)
    (fake_package / "a.py").write_text("from embtransfer import f\n")
    codehash._PARSES.save()
    (fake_package / "f.py").write_text("")
    _kept_parses(monkeypatch, kept)
    assert "embtransfer.f" in codehash.module_closure("embtransfer.a")


def test_an_unreadable_parse_file_is_made_again(fake_package, tmp_path, monkeypatch):
    kept = tmp_path / "code_imports.json"
    kept.write_text("{not json")
    _kept_parses(monkeypatch, kept)
    assert codehash.module_closure("embtransfer.e")[-1] == "embtransfer.sub.c"
    codehash._PARSES.save()
    assert any(key.startswith("embtransfer.e:") for key in json.loads(kept.read_text()))

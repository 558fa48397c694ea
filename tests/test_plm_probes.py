"""The target-PLM probes (embtransfer.evaluation.plm_probes): against slow, obviously correct
references on small random inputs, and on built PLMs whose answer is known (rows made from
their neighbours or their concept score high, random rows score about zero)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from embtransfer.core import paths
from embtransfer.core.atomic import write_json
from embtransfer.core.paired import normal_p
from embtransfer.evaluation.plm_probes import (
    class_probe,
    common_direction,
    concept_classes,
    geometry,
    paired_summary,
    probe_plm,
    random_sets,
    span_probe,
    span_shares,
)
from embtransfer.models.pretrain import build_model
from embtransfer.neighbors.search import Neighbors
from embtransfer.report.comparisons import SUMMARY_COLUMNS, TEST_COLUMNS, decide, frame_of
from embtransfer.report.diagnostics import (
    PROBE_COLUMNS,
    probe_frame,
    probe_tests,
    write_probes,
)

RCOND = 1e-6
#: Rows without meaning stay within this many standard errors of their baseline.
NOISE_Z = 3.0


def neighbors_of(sets: dict[int, list[int]]) -> Neighbors:
    """A neighbour table of target id -> neighbour target ids (source ids: the same)."""
    target_ids = np.array(sorted(sets), np.int64)
    flat = np.array([n for t in target_ids for n in sets[int(t)]], np.int64)
    k = [len(sets[int(t)]) for t in target_ids]
    offsets = np.concatenate([[0], np.cumsum(k)]).astype(np.int64)
    weights = np.concatenate([np.full(n, 1.0 / n, np.float32) for n in k if n] + [np.empty(0)])
    return Neighbors(
        target_ids=target_ids,
        offsets=offsets,
        neighbor_target_ids=flat,
        neighbor_source_ids=flat.copy(),
        similarities=np.ones(flat.size, np.float32),
        weights=weights.astype(np.float32),
        missing=np.array([n == 0 for n in k]),
    )


def brute_share(rows: np.ndarray, t: int, ids: list[int]) -> float:
    """1 - the relative squared residual of least squares of rows[t] on rows[ids]."""
    a = rows[ids].astype(np.float64).T
    e = rows[t].astype(np.float64)
    coef, *_ = np.linalg.lstsq(a, e, rcond=None)
    return 1.0 - float(np.sum((e - a @ coef) ** 2) / np.sum(e**2))


def world_truth(groups: dict[str, list[int]], shared: list[int] = ()) -> pd.DataFrame:
    lines = [
        {
            "target_id": t,
            "text": f"w{t}",
            "kind": "word",
            "meaning": f"concept:{c}",
            "source_ids": np.array([1]),
            "shared": False,
        }
        for c, ids in groups.items()
        for t in ids
    ]
    lines += [
        {
            "target_id": t,
            "text": f"s{t}",
            "kind": "word",
            "meaning": "concept:shared",
            "source_ids": np.array([1]),
            "shared": True,
        }
        for t in shared
    ]
    lines.append(
        {
            "target_id": 999,
            "text": "N",
            "kind": "name",
            "meaning": "name:n0",
            "source_ids": np.array([2]),
            "shared": False,
        }
    )
    return pd.DataFrame(lines)


# --- the span probe ---------------------------------------------------------------------------


def test_span_shares_equal_least_squares_token_by_token():
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(60, 8)).astype(np.float32)
    sets = {
        t: sorted(rng.choice(np.arange(20), size=int(rng.integers(1, 12)), replace=False))
        for t in range(20, 60)
    }
    sets[59] = list(range(10))  # more neighbours than dimensions: the whole space
    table = neighbors_of(sets)
    shares = span_shares(rows, table.target_ids, table.offsets, table.neighbor_target_ids, RCOND)
    expected = [brute_share(rows, int(t), sets[int(t)]) for t in table.target_ids]
    np.testing.assert_allclose(shares, expected, atol=1e-9)
    assert shares[-1] == pytest.approx(1.0)


def test_span_shares_without_a_direction_equal_least_squares_on_the_projected_rows():
    rng = np.random.default_rng(12)
    rows = rng.normal(size=(40, 6)) + 2.0 * rng.normal(size=6)  # one shared direction
    sets = {t: sorted(rng.choice(20, size=3, replace=False)) for t in range(20, 40)}
    table = neighbors_of(sets)
    u = common_direction(rows, np.arange(20))
    top = np.linalg.svd(rows[:20], full_matrices=False)[2][0]  # uncentred, as SVD finds it
    assert abs(u @ top) == pytest.approx(1.0)
    projected = rows - np.outer(rows @ u, u)
    shares = span_shares(rows, table.target_ids, table.offsets, table.neighbor_target_ids,
                         RCOND, u)
    expected = [brute_share(projected, int(t), sets[int(t)]) for t in table.target_ids]
    np.testing.assert_allclose(shares, expected, atol=1e-9)


def test_span_shares_drop_dependent_neighbours_like_pinv():
    rng = np.random.default_rng(1)
    rows = rng.normal(size=(5, 6))
    rows[1] = 2 * rows[0]  # a duplicated direction adds nothing to the span
    shares = span_shares(rows, np.array([4]), np.array([0, 3]), np.array([0, 1, 2]), RCOND)
    assert shares[0] == pytest.approx(brute_share(rows, 4, [0, 2]))


def test_random_sets_draw_distinct_pool_ids_of_each_size_and_are_seeded():
    pool = np.arange(100, 130)
    sizes = np.array([3, 0, 30, 40])
    offsets, ids = random_sets(sizes, pool, np.random.default_rng(5))
    assert np.diff(offsets).tolist() == [3, 0, 30, 30]  # capped at the pool
    for start, stop in itertools.pairwise(offsets):
        drawn = ids[start:stop]
        assert np.isin(drawn, pool).all() and np.unique(drawn).size == drawn.size
    again = random_sets(sizes, pool, np.random.default_rng(5))
    assert np.array_equal(again[1], ids)


def test_rows_made_from_their_neighbours_clear_the_span_probe_and_random_rows_do_not():
    rng = np.random.default_rng(2)
    h, shared = 64, np.arange(200)
    sets = {
        t: sorted(rng.choice(shared, size=int(rng.integers(3, 8)), replace=False))
        for t in range(200, 500)
    }
    random_rows = rng.normal(size=(500, h))
    built = random_rows.copy()
    for t, ids in sets.items():
        built[t] = rng.normal(size=len(ids)) @ built[ids]
    table = neighbors_of(sets)
    made = span_probe(built, table, shared, np.random.default_rng(3), RCOND)
    assert made["neighbors"].to_numpy() == pytest.approx(1.0)
    assert paired_summary(made["neighbors"], made["random"])["z"] > 20
    noise = span_probe(random_rows, table, shared, np.random.default_rng(3), RCOND)
    summary = paired_summary(noise["neighbors"], noise["random"])
    assert abs(summary["z"]) < NOISE_Z
    # the random baseline explains about k/h of a row either way
    assert summary["random"] == pytest.approx(made["k"].mean() / h, rel=0.2)


def test_the_common_direction_is_projected_out_so_the_baseline_drops_and_meaning_shows():
    """Rows along one shared direction, each at its own distance (as trained rows lie): on
    the rows as they are, any k random rows explain most of a row; with the direction
    projected out the baseline falls to about k / h, rows built from their neighbours'
    deviations stand further out, and rows without meaning stay at z about 0."""
    rng = np.random.default_rng(2)
    h, shared = 64, np.arange(300)
    sets = {
        t: sorted(rng.choice(shared, size=int(rng.integers(3, 8)), replace=False))
        for t in range(300, 700)
    }
    common = rng.normal(size=h)
    common /= np.linalg.norm(common)
    deviation = 0.5 * rng.normal(size=(700, h)) / np.sqrt(h)
    plain = rng.uniform(0.5, 1.5, size=(700, 1)) * common + deviation
    meaning = plain.copy()
    for t, ids in sets.items():
        meaning[t] += rng.dirichlet(np.ones(len(ids))) @ deviation[ids] - 0.5 * deviation[t]
    table = neighbors_of(sets)
    assert np.abs(common_direction(meaning, shared) @ common) > 0.999
    assert geometry(meaning)["pairwise_cosine"] > 0.7

    def as_they_are(rows):  # the same probe without the projection
        k, t = np.diff(table.offsets), table.target_ids
        ours = span_shares(rows, t, table.offsets, table.neighbor_target_ids, RCOND)
        offsets, ids = random_sets(k, shared, np.random.default_rng(3))
        return paired_summary(ours, span_shares(rows, t, offsets, ids, RCOND))

    def projected(rows):
        probe = span_probe(rows, table, shared, np.random.default_rng(3), RCOND)
        return paired_summary(probe["neighbors"], probe["random"])

    before, after = as_they_are(meaning), projected(meaning)
    assert before["random"] > 0.6 and after["random"] < 0.15  # about k / h = 0.08
    assert after["z"] > 1.1 * before["z"] and after["diff"] > 2 * before["diff"]
    assert abs(projected(plain)["z"]) < NOISE_Z


def test_tokens_without_neighbours_are_left_out_of_the_span_probe():
    rows = np.random.default_rng(4).normal(size=(10, 4))
    table = neighbors_of({5: [0, 1], 6: [], 7: [2]})
    result = span_probe(rows, table, np.arange(5), np.random.default_rng(0), RCOND)
    assert result["target_id"].tolist() == [5, 7] and result["k"].tolist() == [2, 1]


# --- the class probe --------------------------------------------------------------------------


CLASSES = {
    "concept:a": "animal",
    "concept:b": "animal",
    "concept:c": "food",
    "concept:d": "food",
    "concept:e": "verb",
}


def test_concept_classes_read_the_worlds_concepts():
    world = {
        "concepts": [
            {"id": "animal_000", "class": "animal"},
            {"id": "fn_in", "class": "function_prep"},
        ]
    }
    assert concept_classes(world) == {
        "concept:animal_000": "animal",
        "concept:fn_in": "function_prep",
    }


def test_class_probe_equals_a_brute_force_on_random_rows():
    rng = np.random.default_rng(6)
    rows = rng.normal(size=(30, 5))
    groups = {"a": [0, 4], "b": [9], "c": [2, 5], "d": [7], "e": [11]}
    truth = world_truth(groups, shared=[12])
    result = class_probe(rows, truth, CLASSES)

    def cos(i, j):
        return rows[i] @ rows[j] / np.linalg.norm(rows[i]) / np.linalg.norm(rows[j])

    meaning = {t: f"concept:{c}" for c, ids in groups.items() for t in ids}
    expected = {}
    for t, m in meaning.items():
        same = [u for u, n in meaning.items() if CLASSES[n] == CLASSES[m] and n != m]
        other = [u for u, n in meaning.items() if CLASSES[n] != CLASSES[m]]
        if same and other:
            expected[t] = (np.mean([cos(t, u) for u in same]), np.mean([cos(t, u) for u in other]))
    assert result["target_id"].tolist() == sorted(expected)  # the verb has no classmate
    for line in result.itertuples():
        assert (line.same, line.other) == pytest.approx(expected[line.target_id])


def test_rows_near_their_class_clear_the_class_probe_and_random_rows_do_not():
    rng = np.random.default_rng(9)
    n_classes, per_class = 8, 30
    classes = {f"concept:k{c}_{i}": f"k{c}" for c in range(n_classes) for i in range(per_class)}
    groups = {m.split(":")[1]: [t] for t, m in enumerate(classes)}
    truth = world_truth(groups)
    centres = rng.normal(size=(n_classes, 32))
    built = np.repeat(centres, per_class, axis=0) + 2.0 * rng.normal(size=(len(classes), 32))
    made = class_probe(built, truth, classes)
    assert paired_summary(made["same"], made["other"])["z"] > 20
    noise = class_probe(rng.normal(size=(len(classes), 32)), truth, classes)
    assert abs(paired_summary(noise["same"], noise["other"])["z"]) < NOISE_Z


# --- the record -------------------------------------------------------------------------------


def test_geometry_equals_the_mean_over_pairs_of_rows():
    rows = np.random.default_rng(10).normal(size=(7, 3)) + 1.0
    unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    pairs = [unit[i] @ unit[j] for i in range(7) for j in range(7) if i != j]
    result = geometry(rows)
    assert result["pairwise_cosine"] == pytest.approx(np.mean(pairs))
    assert result["row_norm"] == pytest.approx(np.linalg.norm(rows, axis=1).mean())


def test_paired_summary_is_the_mean_difference_over_its_standard_error():
    ours, base = np.array([1.0, 2.0, 4.0]), np.array([0.0, 1.0, 1.0])
    d = ours - base
    result = paired_summary(ours, base)
    assert result["diff"] == pytest.approx(d.mean())
    assert result["se"] == pytest.approx(d.std(ddof=1) / np.sqrt(3))
    assert result["z"] == pytest.approx(result["diff"] / result["se"])
    assert paired_summary(ours[:1], base[:1])["z"] is None


def test_probe_plm_is_seeded_and_reports_both_probes():
    rng = np.random.default_rng(11)
    rows = rng.normal(size=(40, 6)).astype(np.float32)
    table = neighbors_of({t: [0, 1, 2, t % 10] for t in range(20, 40)})
    truth = world_truth({"a": [20, 21], "b": [22, 23, 24], "c": [25], "d": [26]})
    args = (rows, table, np.arange(20), truth, CLASSES)
    first = probe_plm(*args, seed=3, rcond=RCOND)
    assert first == probe_plm(*args, seed=3, rcond=RCOND)
    assert first["span"]["items"] == 20 and first["class"]["items"] == 7
    assert first["class"]["classes"] == 2
    other_seed = probe_plm(*args, seed=4, rcond=RCOND)
    assert other_seed["span"] != first["span"] and other_seed["class"] == first["class"]
    # real text: no truth and no concept classes, the same span probe and no class probe
    real = probe_plm(rows, table, np.arange(20), None, None, seed=3, rcond=RCOND)
    assert real["class"] is None and real["span"] == first["span"]
    assert real["geometry"] == first["geometry"]


def probe_table(files: list[str], tmp_path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(written probe table, decided comparisons) of probe records, as the report makes them."""
    frame = probe_frame(files)
    decided = decide(frame_of(probe_tests(frame), TEST_COLUMNS))
    return write_probes(frame, decided, tmp_path / "p.csv", tmp_path / "p.md"), decided


def _records_of(tmp_path: Path, z_by_target: dict[str, tuple[float | None, float]]
                ) -> list[str]:
    """World probe records (span and class) with the given z."""
    files = []
    for target, (span_z, class_z) in z_by_target.items():
        stats = {"items": 10, "mean": 0.5, "random": 0.1, "diff": 0.4, "se": 0.1}
        path = tmp_path / paths.PLM_PROBE.fill(lang="xx", source="src", target=target)
        write_json(path, {"span": stats | {"z": span_z, "mean_k": 4.0},
                          "class": stats | {"z": class_z, "classes": 12},
                          "geometry": {"row_norm": 1.5, "pairwise_cosine": 0.25},
                          "rcond": RCOND, "seed": 1})
        files.append(str(path))
    return files


def test_the_probe_table_reads_each_record_by_its_path_and_marks_the_plms_that_clear(tmp_path):
    files = _records_of(tmp_path, {"t5_x": (5.0, 1.0), "bert_x": (4.0, 3.5),
                                   "gpt2_x": (9.5, 9.0)})
    frame, decided = probe_table(files, tmp_path)
    assert frame["target"].tolist() == ["bert_x", "gpt2_x", "t5_x"]
    # six tests: 3.5 (p 4.7e-4) clears Holm's fifth step (0.001 / 2), 1.0 nothing
    assert len(decided) == 6 and set(decided["family"]) == {"plm_probes"}
    assert frame["carries"].tolist() == [True, True, False]
    tests = decided.set_index(["target", "metric"])
    assert tests.loc[("bert_x", "class_probe"), "p"] == pytest.approx(normal_p(3.5))
    assert tests.loc[("t5_x", "class_probe"), "relation"] == "not apart"
    assert (decided["versus"] == "chance").all() and (decided["method"] == decided["target"]).all()
    assert list(pd.read_csv(tmp_path / "p.csv").columns) == PROBE_COLUMNS
    assert frame["span_neighbors_share"].tolist() == [0.5] * 3
    assert frame["span_random_share"].tolist() == [0.1] * 3
    text = (tmp_path / "p.md").read_text()
    assert "0.500 vs 0.100: +0.400 ± 0.100 (z 4.0, n 10)" in text
    with pytest.raises(ValueError, match="not a PLM probe record"):
        probe_frame([str(tmp_path / "p.csv")])


def test_a_plm_without_a_measured_probe_of_the_table_does_not_carry_meaning(tmp_path):
    files = _records_of(tmp_path, {"gpt2_x": (None, 9.0), "bert_x": (9.0, 9.0)})
    frame, decided = probe_table(files, tmp_path)
    text = (tmp_path / "p.md").read_text()
    assert "| —" in text  # the span cell of gpt2_x: not measured
    assert frame.set_index("target")["carries"].to_dict() == {"bert_x": True, "gpt2_x": False}


def _span_only_records(tmp_path: Path, z_by_target: dict[str, float]) -> list[str]:
    """Real-text probe records (the span probe only) of German PLMs with the given z."""
    files = []
    for target, z in z_by_target.items():
        path = tmp_path / paths.PLM_PROBE.fill(lang="de", source="llama_en", target=target)
        stats = {"items": 50, "mean": 0.4, "random": 0.2, "diff": 0.2, "se": 0.2 / z}
        write_json(path, {"span": stats | {"z": z, "mean_k": 8.0}, "class": None,
                          "geometry": {"row_norm": 1.0, "pairwise_cosine": 0.01},
                          "rcond": RCOND, "seed": 1})
        files.append(str(path))
    return files


def test_a_table_of_span_probes_alone_has_no_class_columns_and_says_why(tmp_path):
    """A real-text run's records have no class probe: the table keeps the span probe's
    columns only, a PLM clears by the span probe, and the findings decide by it alone."""
    from embtransfer.report.findings import findings_markdown

    files = _span_only_records(tmp_path, {"gpt2_de": 12.0, "bert_de": 0.5})
    frame, decided = probe_table(files, tmp_path)
    assert not [c for c in frame.columns if c.startswith("class")]
    assert frame["span_z"].tolist() == [0.5, 12.0] and frame["carries"].tolist() == [False, True]
    assert set(decided["metric"]) == {"span_probe"}
    text = (tmp_path / "p.md").read_text()
    assert "span: neighbours vs random" in text and "class: same class" not in text
    assert "not measured on real text" in text and "| carries meaning |" in text
    findings = findings_markdown(decided, frame_of([], SUMMARY_COLUMNS), real=True)
    assert "| lang | source | target | span_probe | carries meaning |" in findings
    assert "| de | llama_en | bert_de | 0.5 | no |" in findings
    assert "| de | llama_en | gpt2_de | 12.0 | yes |" in findings
    assert "class_probe" not in findings


def test_one_rule_decides_carrying_meaning_in_the_table_and_the_findings(tmp_path):
    """z 3.2 is 3 standard errors, but its normal p (0.0014) is not below the family-wise
    0.001: by the report's rule (Holm over the table's probes) no PLM of one z 3.2 carries
    meaning, in the table and in the findings alike."""
    from embtransfer.report.findings import findings_markdown

    files = _span_only_records(tmp_path, {"gpt2_de": 12.0, "bert_de": 3.2})
    frame, decided = probe_table(files, tmp_path)
    assert frame["carries"].tolist() == [False, True]
    assert pd.read_csv(tmp_path / "p.csv")["carries"].tolist() == [False, True]
    findings = findings_markdown(decided, frame_of([], SUMMARY_COLUMNS))
    assert "| de | llama_en | bert_de | 3.2 | no |" in findings
    assert "| de | llama_en | gpt2_de | 12.0 | yes |" in findings
    assert ("**PLMs without measurable meaning** (1 of 2: de bert_de): SALT's rows from them "
            "say nothing about SALT.") in findings


@pytest.mark.parametrize("std", [None, 0.05])
def test_embedding_init_std_redraws_only_the_input_rows(std):
    def built(architecture):
        special = {"eos": 1, "pad": 0, "bos": None}
        return build_model("t5", 300, architecture, True, special, seed=1)

    plain = built({"hidden_size": 32, "intermediate_size": 64})
    model = built({"hidden_size": 32, "intermediate_size": 64, "embedding_init_std": std})
    rows = model.get_input_embeddings().weight.detach().numpy()
    assert rows.std() == pytest.approx(1.0 if std is None else std, rel=0.05)
    assert model.get_output_embeddings().weight.data_ptr() == model.shared.weight.data_ptr()
    layer = "encoder.block.0.layer.0.SelfAttention.q.weight"
    assert np.array_equal(model.state_dict()[layer], plain.state_dict()[layer])

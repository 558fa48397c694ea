"""benchmarks/bench_workflow.py: parsing Snakemake 9.27's log, and the run wrapper's CPU split.

The synthetic log copies the format of a real `snakemake --cores 2 --configfile
.test/config.yaml` run with Snakemake 9.27.1 (its header, "Job stats:" table, job blocks,
"Select jobs to execute..." / "Execute N jobs..." rounds, "Finished jobid: N (Rule: X)"),
plus what a run can also print: a job's own output between the lines, a rule with
`message:` (its block names only the jobid), a non-local rule and an error block.
"""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import bench_workflow as bench  # noqa: E402

LOG = textwrap.dedent("""\
    Assuming unrestricted shared filesystem usage.

    SNAKEMAKE
    =========
      Date: 2026-11-23 17:52:34
      Workflow ID: 08a0a436-76de-4e3c-a0b0-3db59fb7e64c
      Platform: Linux-6.18.44-fc-v782-x86_64-with-glibc2.36
      Host: vm
      User: root
      Snakemake version: 9.27.1
      Python version: 3.11.7 (main, May  9 2026, 07:35:25) [GCC 12.2.0]
      Command: snakemake --cores 2 --configfile .test/config.yaml
      Snakefile: {workdir}/Snakefile
      Base directory: {workdir}
      Run directory: {workdir}
      Working directory: {workdir}
      Config file(s): [PosixPath('{workdir}/.test/config.yaml')]
      Config MD5: 7f3e2f7c2882c4a7b82c0236dfa13109

    Building DAG of jobs...
    Using shell: /usr/bin/bash
    Provided cores: 2
    Rules claiming more threads will be scaled down.
    Conda environments: ignored
    Job stats:
    job               count
    --------------  -------
    world                 1
    pretrain_model        2
    report                1
    zeroshot              1
    all                   1
    total                 6

    Select jobs to execute...
    Execute 1 jobs...
    [Mon Nov 23 17:52:36 2026]
    localrule world:
        output: results/world/world.json
        log: results/logs/world.log
        jobid: 6
        reason: Missing output files: results/world/world.json
        resources: tmpdir=/tmp
    2026-11-23 17:52:36,770 INFO embtransfer: world with languages ['ar_mini'] written
    [Mon Nov 23 17:52:38 2026]
    Finished jobid: 6 (Rule: world)
    1 of 6 steps (17%) done
    Select jobs to execute...
    Execute 2 jobs...
    [Mon Nov 23 17:52:39 2026]
    localrule pretrain_model:
        input: resources/tokenizers/bert_ar_mini, results/corpus/ar_mini/train.txt
        output: resources/models/bert_ar_mini
        log: results/logs/models/bert_ar_mini.log
        jobid: 30
        benchmark: results/logs/benchmark/pretrain_model/bert_ar_mini.tsv
        reason: Missing output files: resources/models/bert_ar_mini
        wildcards: model=bert_ar_mini
        threads: 2
        resources: tmpdir=/tmp, runtime=30, mem_mb=4000, mem=4 GB, mem_mib=3815
    [Mon Nov 23 17:52:40 2026]
    rule pretrain_model:
        input: resources/tokenizers/llama_mini, results/corpus/en_mini/train.txt
        output: resources/models/llama_mini
        log: results/logs/models/llama_mini.log
        jobid: 27
        benchmark: results/logs/benchmark/pretrain_model/llama_mini.tsv
        reason: Missing output files: resources/models/llama_mini
        wildcards: model=llama_mini
        threads: 2
        resources: tmpdir=/tmp, runtime=30, mem_mb=4000, mem=4 GB, mem_mib=3815
    Select jobs to execute...
    [Mon Nov 23 17:53:04 2026]
    Finished jobid: 30 (Rule: pretrain_model)
    2 of 6 steps (33%) done
    Execute 1 jobs...
    [Mon Nov 23 17:53:06 2026]
    Job 12: Writing the report
    Reason: Missing output files: results/report/report.md
    [Mon Nov 23 17:53:10 2026]
    Finished jobid: 27 (Rule: pretrain_model)
    3 of 6 steps (50%) done
    Select jobs to execute...
    Execute 1 jobs...
    [Mon Nov 23 17:53:11 2026]
    localrule zeroshot:
        input: results/transfer/ar_mini/llama_mini/bert_ar_mini/random
        output: results/zeroshot/ar_mini/llama_mini/bert_ar_mini/random.json
        jobid: 40
        reason: Missing output files: results/zeroshot/ar_mini/llama_mini/bert_ar_mini/random.json
        wildcards: lang=ar_mini, source=llama_mini, target=bert_ar_mini, method=random
        resources: tmpdir=/tmp
    [Mon Nov 23 17:53:15 2026]
    Error in rule zeroshot:
        message: None
        jobid: 40
        input: results/transfer/ar_mini/llama_mini/bert_ar_mini/random
        output: results/zeroshot/ar_mini/llama_mini/bert_ar_mini/random.json
    [Mon Nov 23 17:53:20 2026]
    Finished jobid: 12 (Rule: report)
    4 of 6 steps (67%) done
    Select jobs to execute...
    Execute 1 jobs...
    [Mon Nov 23 17:53:21 2026]
    localrule all:
        input: results/report/report.md
        jobid: 0
        reason: Input files updated by another job: results/report/report.md
        resources: tmpdir=/tmp
    [Mon Nov 23 17:53:21 2026]
    Finished jobid: 0 (Rule: all)
    5 of 6 steps (83%) done
    Complete log(s): {workdir}/.snakemake/log/2026-11-23T175234.824528.snakemake.log
    Elapsed time: 0:00:47.021456
    """)


def at(clock: str) -> float:
    return bench.asctime_seconds(f"Mon Nov 23 {clock} 2026")


def write_run(tmp_path: Path) -> Path:
    """The log under workdir/.snakemake/log/, and both pretraining jobs' benchmark files:
    bert's written during its job, llama's by a later run (a day after)."""
    log = tmp_path / ".snakemake" / "log" / "2026-11-23T175234.824528.snakemake.log"
    log.parent.mkdir(parents=True)
    log.write_text(LOG.format(workdir=tmp_path))
    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    bench_dir = tmp_path / "results" / "logs" / "benchmark" / "pretrain_model"
    bench_dir.mkdir(parents=True)
    for model, seconds, mtime in (("bert_ar_mini", 24.61, at("17:53:03")),
                                  ("llama_mini", 7.5, at("17:53:10") + 86400)):
        tsv = bench_dir / f"{model}.tsv"
        tsv.write_text(header + f"{seconds}\t0:00:24\t426.50\t1146.12\t303.81\t361.09\t0.03"
                       "\t0.02\t59.55\t15.14\n")
        os.utime(tsv, (mtime, mtime))
    return log


def test_parse_log_reads_jobs_times_and_plan(tmp_path):
    run = bench.parse_log(bench.read_log(write_run(tmp_path)))
    assert run.resolution == 1.0 and run.planned == 6 and not run.nothing_to_be_done
    assert run.started == time.mktime(time.strptime("2026-11-23 17:52:34", "%Y-%m-%d %H:%M:%S"))
    assert run.workdir == str(tmp_path)
    got = {j.jobid: (j.rule, j.start, j.end, j.threads, j.benchmark, j.failed)
           for j in run.jobs.values()}
    assert got == {
        6: ("world", at("17:52:36"), at("17:52:38"), 1, None, False),
        30: ("pretrain_model", at("17:52:39"), at("17:53:04"), 2,
             "results/logs/benchmark/pretrain_model/bert_ar_mini.tsv", False),
        27: ("pretrain_model", at("17:52:40"), at("17:53:10"), 2,
             "results/logs/benchmark/pretrain_model/llama_mini.tsv", False),
        12: ("report", at("17:53:06"), at("17:53:20"), 1, None, False),  # named by Finished
        40: ("zeroshot", at("17:53:11"), None, 1, None, True),
        0: ("all", at("17:53:21"), at("17:53:21"), 1, None, False),
    }
    assert run.rounds == []  # the log's lines carry no stamps of their own
    assert run.elapsed == pytest.approx(47.021456)
    one_day = bench.parse_log([(None, "Elapsed time: 1 day, 2:03:04.5")])
    assert one_day.elapsed == pytest.approx(26 * 3600 + 3 * 60 + 4.5)


def test_job_seconds_take_fresh_benchmark_files_else_the_log(tmp_path):
    run = bench.parse_log(bench.read_log(write_run(tmp_path)))
    seconds, stale = bench.job_seconds(run, tmp_path)
    assert seconds == {6: (2.0, "log"), 30: (24.61, "benchmark"), 27: (30.0, "log"),
                       12: (14.0, "log"), 0: (0.0, "log")}  # failed job 40 has none
    assert stale == 1  # llama's file is another run's
    totals = bench.rule_totals(run, seconds)
    assert {rule: (t.jobs, t.seconds, t.sources) for rule, t in totals.items()} == {
        "world": (1, [2.0], {"log"}),
        "pretrain_model": (2, [24.61, 30.0], {"benchmark", "log"}),
        "report": (1, [14.0], {"log"}),
        "zeroshot": (1, [], set()),
        "all": (1, [0.0], {"log"}),
    }
    # without the directory, every time comes from the log
    assert bench.job_seconds(run, None)[0][30] == (25.0, "log")


def test_dispatch_gaps_and_busy_cores(tmp_path):
    run = bench.parse_log(bench.read_log(write_run(tmp_path)))
    # each start minus the last other job's finish at or before it; the first job
    # (no finish before it) belongs to the start-up
    assert sorted(bench.dispatch_gaps(run)) == [1.0, 1.0, 1.0, 2.0, 2.0]
    # threads x seconds of the finished jobs (2 + 2*25 + 2*30 + 14 + 0) over 17:52:36..17:53:21
    assert bench.busy_cores(run) == pytest.approx(126 / 45)


def test_stamped_lines_give_rounds_and_subsecond_gaps(tmp_path):
    t0 = 1_800_000_000.0
    lines = [(t0, ""), (t0 + 0.9, "Job stats:"), (t0 + 0.9, "job      count"),
             (t0 + 0.9, "-----  -------"), (t0 + 0.9, "world        1"),
             (t0 + 0.9, "report       1"), (t0 + 0.9, "total        2"),
             (t0 + 1.0, "Select jobs to execute..."), (t0 + 1.25, "Execute 1 jobs..."),
             (t0 + 1.3, "[Mon Nov 23 17:52:36 2026]"), (t0 + 1.3, "localrule world:"),
             (t0 + 1.3, "    jobid: 6"), (t0 + 2.0, "[Mon Nov 23 17:52:37 2026]"),
             (t0 + 2.0, "Finished jobid: 6 (Rule: world)"), (t0 + 2.0, "1 of 2 steps (50%) done"),
             (t0 + 2.05, "Select jobs to execute..."), (t0 + 2.1, "Execute 1 jobs..."),
             (t0 + 2.1, "[Mon Nov 23 17:52:37 2026]"), (t0 + 2.1, "localrule report:"),
             (t0 + 2.1, "    jobid: 3"), (t0 + 2.2, "Select jobs to execute..."),
             (t0 + 2.5, "Nothing\tbut a tab")]
    path = tmp_path / "stamped.log"
    bench.write_stamped(path, lines)
    assert bench.read_log(path) == lines
    run = bench.parse_log(bench.read_log(path))
    assert run.resolution == 0.0 and run.started == t0 and run.planned == 2
    # a round runs from the first "Select jobs" line, or from the job finish that woke
    # the scheduler, to the "Execute N jobs" line
    assert run.rounds == [(t0 + 1.0, t0 + 1.25, 1), (t0 + 2.0, t0 + 2.1, 1)]
    job = run.jobs[6]
    assert (job.rule, job.start, job.end) == ("world", t0 + 1.3, t0 + 2.0)
    # the first job's gap runs from the first "Select jobs" line
    assert bench.dispatch_gaps(run) == [pytest.approx(0.3), pytest.approx(0.1)]
    path.write_text(bench.STAMPED_HEADER + "\nnot a stamp\tline\n")
    with pytest.raises(SystemExit, match="line 2: not '<epoch seconds><TAB><line>'"):
        bench.read_log(path)


def test_bracket_timestamps_of_any_day():
    stamp = time.mktime((2026, 11, 3, 9, 5, 1, 0, 0, -1))  # a one-digit day: "Nov  3"
    text = f"[{time.asctime(time.localtime(stamp))}]"
    assert "  3 " in text
    assert bench.asctime_seconds(bench.BRACKET_TIME.match(text).group(1)) == stamp


def test_from_log_prints_the_figures(tmp_path, capsys):
    write_run(tmp_path)
    bench.from_log(tmp_path, None)  # the directory: its latest .snakemake/log/ file
    out = capsys.readouterr().out
    assert "jobs: 6 started, 5 finished, 1 failed, 6 planned" in out
    assert "start-up (Snakemake started -> first job started): 2.00 s" in out
    pretrain = next(line for line in out.splitlines() if line.startswith("pretrain_model"))
    assert pretrain.split() == ["pretrain_model", "2", "54.6", "27.30", "30.00", "benchmark+log"]
    assert "1 benchmark files ignored" in out
    assert "minus its benchmark seconds): total 0.39 s" in out  # bert: 25 s logged, 24.61 s ran
    assert "scheduling rounds" not in out  # needs stamped lines
    total = next(line for line in out.splitlines() if line.startswith("(all rules)"))
    assert total.split() == ["(all", "rules)", "6", "70.6"]
    assert "wall (Snakemake's 'Elapsed time'): 47.0 s" in out
    assert "dispatch gap (job start - last job finish before it): total 7.00 s" in out
    with pytest.raises(SystemExit, match="no .snakemake/log/"):
        bench.from_log(tmp_path / "results", None)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc")
def test_run_stamped_splits_snakemakes_own_cpu_from_its_jobs(tmp_path):
    """A parent that burns 0.3 s of CPU itself and runs a child that burns 0.6 s: the
    wrapper reports the parent's own CPU apart from its waited-for children's."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < {}: pass\n"
    child = burn.format(0.6)
    parent = (burn.format(0.3) + "import subprocess, sys\nprint('parent burnt', flush=True)\n"
              f"subprocess.run([sys.executable, '-c', {child!r}], check=True)\nprint('done')\n")
    done = bench.run_stamped([sys.executable, "-c", parent], tmp_path, dict(os.environ),
                             tmp_path / "out.log")
    assert done.returncode == 0
    assert [line for _, line in done.lines] == ["", "parent burnt", "done"]
    stamps = [stamp for stamp, _ in done.lines]
    assert stamps[2] - stamps[1] >= 0.6  # stamped as they arrive: the child ran between
    assert 0.3 <= done.own_cpu < 0.6
    assert 0.6 <= done.children_cpu < 1.2
    again = bench.read_log(tmp_path / "out.log")  # stamps kept to the microsecond
    assert [line for _, line in again] == [line for _, line in done.lines]
    assert [stamp for stamp, _ in again] == pytest.approx(stamps, abs=1e-6)

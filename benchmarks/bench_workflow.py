"""Time a fresh run of the workflow: wall time, jobs, per-rule totals, Snakemake's own time.

The repository's Snakefile, package, config and reference tables are copied to a new
temporary directory and the workflow runs there (nothing of the checkout's results/ is
read or written); it is deleted afterwards unless --keep. Printed, per scheduler:

* the fresh plan: `snakemake -n` wall time and planned jobs;
* the run: wall time, jobs run, start-up (Snakemake started -> first job started: parsing
  the Snakefile and building the DAG), the end (last job finished -> Snakemake exited);
* per rule: jobs, summed, mean and max job seconds, from the rule's `benchmark:` TSV
  (results/logs/benchmark/...) where it has one, else from the log's job start/finish;
* the scheduler: its rounds (from the job finish that woke it, else the first "Select
  jobs to execute...", to "Execute N jobs..."), the dispatch gap of each job (its start
  minus the last job finish before it, i.e. the last moment a core was freed or an input
  became ready), a job's logged time beyond its benchmark seconds (start-up and
  post-processing outside the job's process), and the CPU seconds of Snakemake's main
  process itself (its /proc record, read when it has exited but is not yet reaped) apart
  from the jobs' processes (its waited-for children).

The run's output is read as it arrives and each line is stamped (sub-second); the log
Snakemake writes (.snakemake/log/) only has whole-second `[timestamp]`s. --from-log parses
an existing log (or a directory holding .snakemake/log/) of a run already done, with
whole-second times; the stamped log this script keeps (bench_workflow.<scheduler>.log in
the run directory with --keep) gives the sub-second figures again.

    python benchmarks/bench_workflow.py [--configfile config/config.yaml] [--cores 2]
        [--scheduler ilp greedy] [--keep] [--rerun-check] [--offline] [--skip-run]
        [--plans N] [TARGET ...]
    python benchmarks/bench_workflow.py --from-log DIR_OR_LOG [--workdir DIR]

--rerun-check: after the run, `snakemake -n` and a plain rerun in the same directory must
plan 0 jobs (their wall times are printed; otherwise the exit status is 1). --skip-run only
plans (`--configfile config/paper_salt.yaml --skip-run --offline` times the paper grid's
offline dry run; `--skip-run --offline --plans 3` the default config's three times).
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import bisect
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))
from embtransfer.core.workflow_copy import copy_workflow, job_stats  # noqa: E402

STAMPED_HEADER = "# bench_workflow: snakemake output, each line as <epoch seconds>\\t<line>"
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "EMBTRANSFER_OFFLINE": "1"}

# Snakemake 9's log lines (snakemake/logging.py, scheduling/job_scheduler.py); the
# "Finished job N." form is Snakemake <= 8's.
BRACKET_TIME = re.compile(r"^\s*\[(\w{3} \w{3} +\d{1,2} \d\d:\d\d:\d\d \d{4})\]\s*$")
HEADER_DATE = re.compile(r"^\s*Date: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\s*$")
HEADER_WORKDIR = re.compile(r"^\s*Working directory: (.+?)\s*$")
JOB_START = re.compile(r"^\s*(?:local)?(?:rule|checkpoint) (\w+):\s*$")
JOB_MESSAGE = re.compile(r"^\s*Job (\d+): ")  # a rule with `message:` hides its name
JOB_ERROR = re.compile(r"^\s*Error in rule (\w+):\s*$")
FIELD = re.compile(r"^\s+(jobid|benchmark|threads): (.+?)\s*$")
FINISHED = re.compile(r"^\s*Finished job(?:id:)? (\d+)(?:\.| \(Rule: (\w+)\))")
SELECT = re.compile(r"^\s*Select jobs to execute\.\.\.\s*$")
EXECUTE = re.compile(r"^\s*Execute (\d+) jobs\.\.\.\s*$")
NOTHING = re.compile(r"^\s*Nothing to be done")
ELAPSED = re.compile(r"^\s*Elapsed time: (?:(\d+) days?, )?(\d+):(\d\d):(\d\d(?:\.\d+)?)\s*$")
ILP_FALLBACK = re.compile(r"falling back to\s+greedy", re.IGNORECASE)


@dataclass
class Job:
    jobid: int
    rule: str | None
    start: float
    end: float | None = None
    benchmark: str | None = None
    threads: int = 1
    failed: bool = False


@dataclass
class LogRun:
    """What one Snakemake run's output says; times are epoch seconds."""

    resolution: float  # 1.0 for the log's whole-second timestamps, 0.0 for stamped lines
    started: float | None = None  # Snakemake started (header "Date:", or the first stamp)
    workdir: str | None = None
    planned: int | None = None  # the "Job stats:" total
    nothing_to_be_done: bool = False
    jobs: dict[int, Job] = field(default_factory=dict)
    # scheduling rounds: (the round's start, its "Execute N jobs..." line, N)
    rounds: list[tuple[float, float, int]] = field(default_factory=list)
    first_select: float | None = None
    ilp_fallbacks: int = 0
    elapsed: float | None = None  # Snakemake's closing "Elapsed time:"


def cpu_line() -> str:
    """The CPU a figure was measured on: its model, cores, whether it has AMX (oneDNN's
    bfloat16 products run ~5x faster there) and a cap on oneDNN's instruction set where
    one is set (``ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16`` runs as a CPU without AMX)."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"^model name\s*:\s*(.+)$", info, re.M)
    flags = re.search(r"^flags\s*:\s*(.+)$", info, re.M)
    amx = "amx_bf16" in (flags.group(1).split() if flags else [])
    line = (f"CPU: {model.group(1) if model else 'unknown'}, {os.cpu_count()} cores, "
            f"{'AMX' if amx else 'no AMX'}")
    if cap := os.environ.get("ONEDNN_MAX_CPU_ISA"):
        line += f", oneDNN capped at {cap}"
    return line


def asctime_seconds(text: str) -> float:
    return time.mktime(time.strptime(text, "%a %b %d %H:%M:%S %Y"))


def read_log(path: Path) -> list[tuple[float | None, str]]:
    """(stamp, line) pairs of a plain Snakemake log (stamp None) or of a stamped one."""
    text = path.read_text(errors="replace")
    if not text.startswith(STAMPED_HEADER + "\n"):
        return [(None, line) for line in text.splitlines()]
    stamped = []
    for number, line in enumerate(text.rstrip("\n").split("\n")[1:], start=2):
        stamp, _, rest = line.partition("\t")
        try:
            stamped.append((float(stamp), rest))
        except ValueError:
            raise SystemExit(f"{path}, line {number}: not '<epoch seconds><TAB><line>' "
                             "though the file starts as a stamped log") from None
    return stamped


def write_stamped(path: Path, lines: list[tuple[float | None, str]]) -> None:
    path.write_text("\n".join([STAMPED_HEADER, *(f"{t:.6f}\t{s}" for t, s in lines)]) + "\n")


def parse_log(lines: Iterable[tuple[float | None, str]]) -> LogRun:
    """Jobs with start/finish times, scheduling rounds and the plan of one Snakemake run.

    An event's time is its line's stamp where the lines are stamped, else the last
    `[timestamp]` line before it (whole seconds).
    """
    lines = list(lines)
    stamped = bool(lines) and all(stamp is not None for stamp, _ in lines)
    run = LogRun(resolution=0.0 if stamped else 1.0)
    if stamped:
        run.started = lines[0][0]
    text = "\n".join(line for _, line in lines)
    if "Job stats:" in text:
        run.planned = sum(job_stats(text).values())
    clock: float | None = None
    # the block being read: ("start", rule and start) until its jobid, then ("job", Job);
    # ("error", rule) for an error report
    block: tuple[str, Any] | None = None
    round_start: float | None = None
    for stamp, line in lines:
        match = BRACKET_TIME.match(line)
        if match:
            clock = asctime_seconds(match.group(1))
            block = None
            continue
        now = stamp if stamped else clock
        if (match := HEADER_DATE.match(line)) and run.started is None:
            run.started = time.mktime(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S"))
        elif (match := HEADER_WORKDIR.match(line)) and run.workdir is None:
            run.workdir = match.group(1)
        elif match := ELAPSED.match(line):
            days, hours, minutes, secs = match.groups()
            hours = int(days or 0) * 24 + int(hours)
            run.elapsed = hours * 3600 + int(minutes) * 60 + float(secs)
        elif NOTHING.match(line):
            run.nothing_to_be_done = True
        elif ILP_FALLBACK.search(line):
            run.ilp_fallbacks += 1
        elif SELECT.match(line):
            # a round: the last finish since the previous "Execute" line (a finish wakes
            # the scheduler), else the first "Select jobs" line since it
            round_start = now if round_start is None else round_start
            if run.first_select is None:
                run.first_select = now
        elif match := EXECUTE.match(line):
            if stamped and round_start is not None:
                run.rounds.append((round_start, now, int(match.group(1))))
            round_start = None
        elif match := JOB_START.match(line):
            block = ("start", {"rule": match.group(1), "start": now})
        elif match := JOB_MESSAGE.match(line):
            jobid = int(match.group(1))
            run.jobs[jobid] = Job(jobid, None, now)
            block = ("job", run.jobs[jobid])
        elif match := JOB_ERROR.match(line):
            block = ("error", match.group(1))
        elif match := FINISHED.match(line):
            job = run.jobs.get(int(match.group(1)))
            round_start = now
            if job is not None:
                job.end = now
                job.rule = job.rule or match.group(2)
            block = None
        elif (match := FIELD.match(line)) and block is not None:
            key, value = match.groups()
            kind, data = block
            if kind == "start" and key == "jobid":
                job = Job(int(value), data["rule"], data["start"])
                run.jobs[job.jobid] = job
                block = ("job", job)
            elif kind == "job" and key == "benchmark":
                data.benchmark = value
            elif kind == "job" and key == "threads":
                data.threads = int(value)
            elif kind == "error" and key == "jobid" and int(value) in run.jobs:
                run.jobs[int(value)].failed = True
        elif line.strip() and not line[:1].isspace():
            block = None  # an unindented line ends a job's block
    return run


def benchmark_seconds(path: Path) -> float | None:
    """The `s` column of a Snakemake benchmark TSV (summed over repeats)."""
    try:
        rows = path.read_text().splitlines()
    except OSError:
        return None
    if len(rows) < 2 or rows[0].split("\t")[0] != "s":
        return None
    return sum(float(row.split("\t")[0]) for row in rows[1:] if row.strip())


@dataclass
class RuleTotal:
    jobs: int = 0
    seconds: list[float] = field(default_factory=list)
    sources: set[str] = field(default_factory=set)


def job_seconds(run: LogRun, workdir: Path | None) -> tuple[dict[int, tuple[float, str]], int]:
    """Jobid -> (seconds, "benchmark" or "log") of the finished jobs, and how many
    benchmark files were ignored as older or newer than the job (another run's)."""
    seconds: dict[int, tuple[float, str]] = {}
    stale = 0
    slack = 2.0 + run.resolution
    for job in run.jobs.values():
        if job.end is None or job.failed:
            continue
        if job.benchmark and workdir is not None:
            path = workdir / job.benchmark
            value = benchmark_seconds(path)
            if value is not None:
                mtime = path.stat().st_mtime
                if job.start - slack <= mtime <= job.end + slack:
                    seconds[job.jobid] = (value, "benchmark")
                    continue
                stale += 1
        seconds[job.jobid] = (job.end - job.start, "log")
    return seconds, stale


def rule_totals(run: LogRun, seconds: dict[int, tuple[float, str]]) -> dict[str, RuleTotal]:
    totals: dict[str, RuleTotal] = {}
    for job in run.jobs.values():
        total = totals.setdefault(job.rule or "?", RuleTotal())
        total.jobs += 1
        if job.jobid in seconds:
            value, source = seconds[job.jobid]
            total.seconds.append(value)
            total.sources.add(source)
    return totals


def dispatch_gaps(run: LogRun) -> list[float]:
    """Each job's start minus the last job finish at or before it (the first jobs: minus
    the first "Select jobs" line, where lines are stamped; unstamped they are start-up)."""
    finishes = sorted((job.end, job.jobid) for job in run.jobs.values() if job.end is not None)
    gaps = []
    for job in run.jobs.values():
        # the last finish at or before the start, not the job's own (same whole second)
        before = bisect.bisect_right(finishes, (job.start, float("inf")))
        while before and finishes[before - 1][1] == job.jobid:
            before -= 1
        trigger = (finishes[before - 1][0] if before
                   else run.first_select if run.resolution == 0 else None)
        if trigger is not None:
            gaps.append(max(0.0, job.start - trigger))
    return gaps


def busy_cores(run: LogRun) -> float | None:
    """Mean threads in use between the first job start and the last job finish."""
    done = [job for job in run.jobs.values() if job.end is not None]
    if not done:
        return None
    span = max(job.end for job in done) - min(job.start for job in done)
    if span <= 0:
        return None
    return sum((job.end - job.start) * job.threads for job in done) / span


def stats(values: list[float]) -> str:
    if not values:
        return "-"
    return (f"total {sum(values):.2f} s, mean {sum(values) / len(values):.3f} s, "
            f"max {max(values):.2f} s over {len(values)}")


def report_run(run: LogRun, workdir: Path | None) -> dict[str, float | None]:
    """Print one run's figures; return the ones the scheduler comparison shows."""
    unit = "whole seconds, from the log's timestamps" if run.resolution else "stamped lines"
    started = [job.start for job in run.jobs.values()]
    ended = [job.end for job in run.jobs.values() if job.end is not None]
    failed = sum(job.failed for job in run.jobs.values())
    print(f"jobs: {len(run.jobs)} started, {len(ended)} finished, {failed} failed"
          + (f", {run.planned} planned" if run.planned is not None else "")
          + ("; nothing to be done" if run.nothing_to_be_done else ""))
    print(f"times: {unit}")
    if run.started is not None and started:
        print(f"start-up (Snakemake started -> first job started): "
              f"{min(started) - run.started:.2f} s")
    if run.started is not None and ended:
        print(f"Snakemake started -> last job finished: {max(ended) - run.started:.2f} s")
    seconds, stale = job_seconds(run, workdir)
    totals = rule_totals(run, seconds)
    if totals:
        width = max(len("(all rules)"), *(len(rule) for rule in totals))
        print(f"{'rule':<{width}}  jobs  total s   mean s    max s  from")
        order = sorted(totals.items(), key=lambda item: -sum(item[1].seconds))
        for rule, total in order:
            values = total.seconds
            if not values:  # none finished
                print(f"{rule:<{width}}  {total.jobs:4d}  {'-':>7}  {'-':>7}  {'-':>7}")
                continue
            print(f"{rule:<{width}}  {total.jobs:4d}  {sum(values):7.1f}  "
                  f"{sum(values) / len(values):7.2f}  {max(values):7.2f}  "
                  f"{'+'.join(sorted(total.sources))}")
        every = [value for value, _ in seconds.values()]
        print(f"{'(all rules)':<{width}}  {len(run.jobs):4d}  {sum(every):7.1f}")
    if stale:
        print(f"{stale} benchmark files ignored: written outside their job's time "
              "(another run's); the log's times used instead")
    if workdir is None and any(job.benchmark for job in run.jobs.values()):
        print("benchmark files not read: the run's directory is unknown (--workdir)")
    gaps = dispatch_gaps(run)
    print(f"dispatch gap (job start - last job finish before it): {stats(gaps)}")
    selection = [execute - start for start, execute, _ in run.rounds]
    if run.rounds:
        print("scheduling rounds (last job finish, else first 'Select jobs', -> 'Execute N "
              f"jobs'): {stats(selection)}")
    outside = [run.jobs[jobid].end - run.jobs[jobid].start - value
               for jobid, (value, source) in seconds.items() if source == "benchmark"]
    if outside:
        print(f"outside the job's process (log start -> finish minus its benchmark seconds): "
              f"{stats(outside)} jobs")
    if run.ilp_fallbacks:
        print(f"ILP scheduler fell back to greedy {run.ilp_fallbacks} times")
    cores = busy_cores(run)
    if cores is not None:
        print(f"busy cores (job threads x seconds / first start..last finish): {cores:.2f}")
    return {"gaps": sum(gaps), "selection": sum(selection) if run.rounds else None}


@dataclass
class Finished:
    wall: float
    returncode: int
    lines: list[tuple[float | None, str]]
    own_cpu: float | None  # Snakemake's main process (user + sys), None without /proc
    children_cpu: float  # its waited-for descendants: the jobs (all of them without /proc)
    end: float  # when the process exited (epoch)


def zombie_cpu(pid: int) -> tuple[float, float] | None:
    """(own, children) CPU seconds of an exited, not yet reaped child, from /proc."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    # after "(comm)": state is field 3, utime..cstime are fields 14..17 (proc(5))
    utime, stime, cutime, cstime = (int(value) / tick for value in fields[11:15])
    return utime + stime, cutime + cstime


def run_stamped(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> Finished:
    """Run a command, stamping each output line as it arrives, and write the stamped log."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1)
    lines: list[tuple[float | None, str]] = [(time.time(), "")]  # the launch
    for line in proc.stdout:
        lines.append((time.time(), line.rstrip("\n")))
    cpu = zombie_cpu(proc.pid)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    total = usage.ru_utime + usage.ru_stime
    write_stamped(log, lines)
    return Finished(wall, proc.returncode, lines, cpu[0] if cpu else None,
                    cpu[1] if cpu else total, time.time())


def snakemake_cmd(work: Path, config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--snakefile", str(work / "Snakefile"),
            "--directory", str(work), "--configfile", str(config), *args]


def planned(finished: Finished) -> int | None:
    run = parse_log(finished.lines)
    return 0 if run.nothing_to_be_done else run.planned


def bench_scheduler(work: Path, args: argparse.Namespace, scheduler: str,
                    env: dict[str, str]) -> tuple[dict[str, float | None], bool]:
    """Plan, run (and check the rerun of) the workflow in the fresh directory `work`."""
    copy_workflow(work)
    config = work / "bench_config.yaml"
    shutil.copy(args.configfile, config)
    print(f"\n=== scheduler {scheduler}, --cores {args.cores}, {args.configfile}"
          f"{' ' + ' '.join(args.targets) if args.targets else ''}; directory {work}")
    for _ in range(args.plans):
        plan = run_stamped(snakemake_cmd(work, config, "-n", *args.targets), work, env,
                           work / f"bench_workflow.{scheduler}.plan.log")
        if plan.returncode != 0:
            print("\n".join(line for _, line in plan.lines[-40:]))
            raise SystemExit(f"snakemake -n failed (exit {plan.returncode})")
        print(f"fresh plan (snakemake -n): {planned(plan)} jobs in {plan.wall:.2f} s wall, "
              f"{(plan.own_cpu or 0) + plan.children_cpu:.2f} s CPU")
    if args.skip_run:
        return {"wall": None}, True
    log = work / f"bench_workflow.{scheduler}.log"
    done = run_stamped(snakemake_cmd(work, config, "--cores", str(args.cores), "--scheduler",
                                     scheduler, *args.targets), work, env, log)
    if done.returncode != 0:
        print("\n".join(line for _, line in done.lines[-60:]))
        raise SystemExit(f"the workflow failed (exit {done.returncode}); its output: {log}"
                         + ("" if args.keep else " (deleted: rerun with --keep)"))
    run = parse_log(done.lines)
    print(f"wall: {done.wall:.1f} s")
    figures = report_run(run, work)
    ended = [job.end for job in run.jobs.values() if job.end is not None]
    if ended:
        print(f"end (last job finished -> Snakemake exited): {done.end - max(ended):.2f} s")
    if done.own_cpu is not None:
        print(f"CPU: Snakemake's main process {done.own_cpu:.1f} s (user + sys), "
              f"the jobs {done.children_cpu:.1f} s")
    else:
        print(f"CPU: Snakemake and its jobs {done.children_cpu:.1f} s (no /proc: not split)")
    figures.update(wall=done.wall, jobs=len(run.jobs), own_cpu=done.own_cpu)
    clean = True
    if args.rerun_check:
        for what, extra, name in (("snakemake -n", ["-n"], "dryrun"),
                                  ("rerun", ["--cores", str(args.cores)], "rerun")):
            again = run_stamped(snakemake_cmd(work, config, *extra, *args.targets), work, env,
                                work / f"bench_workflow.{scheduler}.{name}.log")
            jobs = planned(again)
            ok = again.returncode == 0 and jobs == 0
            clean &= ok
            print(f"{what} after the run: {jobs} jobs, {again.wall:.2f} s wall"
                  + ("" if ok else f"  <-- expected 0 jobs (exit {again.returncode})"))
            if not ok:
                reasons = [line.strip() for _, line in again.lines if "reason:" in line]
                print("\n".join(sorted(set(reasons))[:20]))
    return figures, clean


def from_log(path: Path, workdir: Path | None) -> None:
    if path.is_dir():
        logs = sorted((path / ".snakemake" / "log").glob("*.snakemake.log"))
        if not logs:
            raise SystemExit(f"{path} holds no .snakemake/log/*.snakemake.log: "
                             "give a log file or a directory Snakemake ran in")
        workdir = workdir or path
        path = logs[-1]
    elif not path.is_file():
        raise SystemExit(f"--from-log {path}: no such file or directory")
    run = parse_log(read_log(path))
    if workdir is None and run.workdir:
        workdir = Path(run.workdir)
    if workdir is None and path.parent.name == "log" and path.parent.parent.name == ".snakemake":
        workdir = path.parents[2]
    print(f"log: {path}\nbenchmark files under: {workdir or 'unknown'}")
    report_run(run, workdir if workdir and workdir.is_dir() else None)
    if run.elapsed is not None:
        print(f"wall (Snakemake's 'Elapsed time'): {run.elapsed:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("targets", nargs="*", help="Snakemake targets (default: rule all)")
    parser.add_argument("--configfile", type=Path, default=REPO / "config" / "config.yaml")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--scheduler", nargs="+", choices=["ilp", "greedy"], default=["greedy"],
                        help="one fresh run per scheduler named (default: greedy, as "
                        "profiles/default sets)")
    parser.add_argument("--keep", action="store_true", help="keep the run directories")
    parser.add_argument("--rerun-check", action="store_true",
                        help="after the run, `snakemake -n` and a rerun must plan 0 jobs")
    parser.add_argument("--skip-run", action="store_true", help="only time the fresh plan")
    parser.add_argument("--plans", type=int, default=1,
                        help="time the fresh plan this many times (a dry run writes nothing)")
    parser.add_argument("--offline", action="store_true",
                        help="set HF_HUB_OFFLINE, HF_DATASETS_OFFLINE, EMBTRANSFER_OFFLINE")
    parser.add_argument("--from-log", type=Path, metavar="PATH",
                        help="only parse this Snakemake log, or the latest under "
                             "PATH/.snakemake/log/, of a run already done")
    parser.add_argument("--workdir", type=Path,
                        help="with --from-log: the directory the run's benchmark paths are "
                             "relative to (default: the log's 'Working directory')")
    args = parser.parse_args()
    if args.from_log:
        from_log(args.from_log, args.workdir)
        return
    if not args.configfile.is_file():
        raise SystemExit(f"--configfile {args.configfile}: no such file")
    env = dict(os.environ, **(OFFLINE if args.offline else {}))
    print(cpu_line())
    root = Path(tempfile.mkdtemp(prefix="bench_workflow_"))
    results: dict[str, dict[str, float | None]] = {}
    clean = True
    try:
        for scheduler in args.scheduler:
            work = root / scheduler
            # the run's own package first, as tests/test_workflow.py runs it
            env["PYTHONPATH"] = str(work / "workflow")
            results[scheduler], ok = bench_scheduler(work, args, scheduler, env)
            clean &= ok
    finally:
        if args.keep:
            print(f"\nkept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    if len(results) > 1 and not args.skip_run:
        print("\nscheduler  wall s  jobs  main CPU s  selection s  dispatch gaps s")
        for name, fig in results.items():
            cells = [fig.get(key) for key in ("wall", "jobs", "own_cpu", "selection", "gaps")]
            print(f"{name:<9}  " + "  ".join(
                "-" if c is None else str(c) if isinstance(c, int) else f"{c:.1f}" for c in cells))
    if not clean:
        raise SystemExit("the rerun check failed: a finished run plans jobs again")


if __name__ == "__main__":
    main()

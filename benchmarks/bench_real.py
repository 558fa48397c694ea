"""`make bench-real`: real text at real scale through the workflow, and each rule's figures.

Runs ``config/real_text.yaml`` (real corpora and FreeDict dictionaries, the real Gemma 3
tokenizer in a source at Gemma 3's embedding shapes, target PLMs of three families trained
on the real text; docs/real_text.md) with the rules users run: ``snakemake --configfile
config/real_text.yaml --cores 2`` in a fresh directory holding a copy of the workflow and a
link to the checkout's ``resources/real`` (``make real-data`` builds it). Prints:

* per rule: jobs, summed and longest wall seconds (the rules' ``benchmark:`` files; for a
  rule without one, the job's start and finish in Snakemake's output) and the largest peak
  memory of a job (RSS, sampled here: in a local run jobs run in forks of the
  job server, which Snakemake's own benchmark does not see);
* the run: wall time and the peak memory of the whole run (the summed proportional set size
  of Snakemake, the job server and every job, sampled every second);
* the goals: <= 15 minutes, <= 16 GB, SALT's regression uncapped over >= 30,000 tokens, no
  degenerate neighbour table, every method's checkpoint written and reloaded (its
  zero-shot record, which reads the checkpoint back, exists and is finite).

``--run real_small`` times ``config/real_small.yaml`` instead, with the command `make
real-run` runs (:data:`RUNS`): the methods compared on real text from a source pretrained
here; its goals: <= 60 minutes, <= 8 GB, the source below its quality floor, every
checkpoint written and reloaded, SALT in its regime (median k/h <= 0.5, 99th percentile
<= 0.8 in every setting), every recycled PLM carrying measurable meaning (the report's probe
verdict), no SALT checkpoint worse than Random or flagged by the row check, LAPT scored in
every language (degenerate neighbour rows are shown: on its small corpora they are a
property of the fastText vectors, not a goal).

    nice python benchmarks/bench_real.py [--run real_text|real_small] [--work DIR [--summary]]
        [--cores 2] [--jobs] [--methods]

``--work`` keeps the run's directory (default: a temporary one, deleted); a directory that
holds a run already reruns only what is missing. ``--summary`` prints the figures of the run
in ``--work`` again (its stamped log ``bench_real.log`` and ``bench_real.memory.json``).
``--jobs`` prints every job's figures too; ``--methods`` each method's transfer jobs, mean
seconds per setting over the seeds and the largest peak RSS (:func:`method_costs`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "workflow"))
from bench_workflow import (  # noqa: E402
    OFFLINE,
    copy_workflow,
    job_seconds,
    parse_log,
    read_log,
    run_stamped,
    snakemake_cmd,
)

REAL = REPO / "resources" / "real"
#: What each run times: its config, the arguments its make target adds, and its goals (the
#: real_small arguments are `make real-run`'s: tests/test_bench_real.py checks the Makefile).
RUNS = {
    "real_text": {"config": "config/real_text.yaml", "args": [],
                  "goals": {"wall_s": 15 * 60, "peak_gb": 16.0, "salt_tokens": 30_000,
                            "no_degenerate": True}},
    "real_small": {"config": "config/real_small.yaml",
                   "args": ["--resources", "mem_mb=8000", "--prioritize",
                            "resources/models/llama_en"],
                   "goals": {"wall_s": 60 * 60, "peak_gb": 8.0, "salt_regime": (0.5, 0.8),
                             "sound_plms": True, "lapt_everywhere": True}},
}
JOB_FIELD = re.compile(r"^\s+(log|jobid): (.+?)\s*$")
RULE_LINE = re.compile(r"^\s*(?:local)?rule (\w+):\s*$")


class MemorySampler(threading.Thread):
    """Every second: the summed PSS of a process and its descendants (the run's peak), and
    each descendant's RSS by the job log it has open (a job's peak)."""

    def __init__(self, root_pid: int, interval: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.root_pid, self.interval = root_pid, interval
        self.peak_bytes = 0
        self.job_peak: dict[str, int] = defaultdict(int)
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.interval):
            total = 0
            for pid in descendants(self.root_pid):
                total += proc_kib(pid, "smaps_rollup", "Pss:") * 1024
                log = job_log(pid)
                if log:
                    rss = proc_kib(pid, "status", "VmRSS:") * 1024
                    self.job_peak[log] = max(self.job_peak[log], rss)
            self.peak_bytes = max(self.peak_bytes, total)


def descendants(root: int) -> list[int]:
    """``root`` and every process below it (from /proc/*/stat's parent ids)."""
    children: dict[int, list[int]] = defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children[ppid].append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def proc_kib(pid: int, name: str, key: str) -> int:
    """A kB field of /proc/PID/NAME (0 once the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def job_log(pid: int) -> str | None:
    """The ``results/logs/...log`` file a job's process has open, naming its job."""
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if "/results/logs/" in target and target.endswith(".log"):
                return target.split("/results/", 1)[1]
    except OSError:
        pass
    return None


def job_logs(lines: list[str]) -> dict[int, str]:
    """Each job's log (``logs/...``, as :func:`job_log` names it) by jobid, from Snakemake's
    output."""
    logs: dict[int, str] = {}
    log = None
    for line in lines:
        if RULE_LINE.match(line):
            log = None
        elif field := JOB_FIELD.match(line):
            if field.group(1) == "log":
                log = field.group(2).removeprefix("results/")
            elif log is not None:
                logs[int(field.group(2))] = log
    return logs


def rule_figures(
    work: Path, stamped: list[tuple[float | None, str]], job_peak: dict[str, int]
) -> dict[str, dict]:
    """Per rule: its jobs' wall seconds (their ``benchmark:`` file, else the log's start and
    finish: bench_workflow.job_seconds), names and the largest job RSS (bytes)."""
    run = parse_log(stamped)
    seconds, _ = job_seconds(run, work)
    logs = job_logs([line for _, line in stamped])
    rules: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"jobs": 0, "seconds": [], "rss": 0, "names": [], "job_rss": [],
                 "sources": set()}
    )
    for jobid, job in run.jobs.items():
        figures = rules[job.rule or "?"]
        figures["jobs"] += 1
        rss = job_peak.get(logs.get(jobid, ""), 0)
        figures["rss"] = max(figures["rss"], rss)
        if jobid in seconds:
            figures["seconds"].append(seconds[jobid][0])
            figures["sources"].add(seconds[jobid][1])
            figures["names"].append(logs.get(jobid, "?").removeprefix("logs/"))
            figures["job_rss"].append(rss)
    return dict(rules)


#: A transfer job's log (rules transfer and holdout_transfer): its seed, setting and method.
# a setting's target is a PLM, or a PLM in a vocabulary mode (gpt2_de@extend)
METHOD_LOG = re.compile(r"^seed\d+/(transfer|holdout_transfer)/(\w+)/\w+/([\w@]+)/(\w+)\.log$")


def method_costs(rules: dict[str, dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (method, stage) (``transfer``, ``holdout_transfer``): each setting's (language,
    target) mean wall seconds over its seeds, and the largest peak RSS of a job (bytes).
    A method's shared inputs are jobs of their own rules (``omp_solve``, ``aligned_search``,
    ``tokalign_glove``, ``salt_regression``), printed per rule."""
    costs: dict[tuple[str, str], dict[str, Any]] = defaultdict(
        lambda: {"seconds": defaultdict(list), "rss": 0})
    for rule in ("transfer", "holdout_transfer"):
        fig = rules.get(rule, {"names": [], "seconds": [], "job_rss": []})
        for name, secs, rss in zip(fig["names"], fig["seconds"], fig["job_rss"], strict=True):
            match = METHOD_LOG.match(name)
            if match is None:
                continue
            stage, lang, target, method = match.groups()
            cost = costs[(method, stage)]
            cost["seconds"][f"{lang} {target}"].append(secs)
            cost["rss"] = max(cost["rss"], rss)
    return {key: {"seconds": {s: sum(v) / len(v) for s, v in sorted(c["seconds"].items())},
                  "rss": c["rss"]} for key, c in sorted(costs.items())}


def print_method_costs(rules: dict[str, dict[str, Any]]) -> None:
    costs = method_costs(rules)
    settings = sorted({s for c in costs.values() for s in c["seconds"]})
    print("\nper method: mean wall s of a job over seeds, per setting; peak RSS of a job")
    print(f"{'method':20s} {'stage':16s} " + " ".join(f"{s:>12s}" for s in settings)
          + f" {'peak RSS':>9s}")
    for (method, stage), cost in costs.items():
        cells = " ".join(f"{cost['seconds'][s]:12.1f}" if s in cost["seconds"] else f"{'-':>12s}"
                         for s in settings)
        print(f"{method:20s} {stage:16s} {cells} {cost['rss'] / 1e9:7.2f} GB")


def print_rules(rules: dict[str, dict[str, Any]], per_job: bool) -> None:
    print(f"\n{'rule':22s} {'jobs':>4s} {'sum s':>8s} {'max s':>8s} {'peak RSS':>9s}  from")
    for rule in sorted(rules, key=lambda r: -sum(rules[r]["seconds"])):
        fig = rules[rule]
        secs = fig["seconds"] or [math.nan]
        print(
            f"{rule:22s} {fig['jobs']:4d} {sum(secs):8.1f} {max(secs):8.1f} "
            f"{fig['rss'] / 1e9:7.2f} GB  {'+'.join(sorted(fig['sources']))}"
        )
        if per_job:
            for name, s in sorted(
                zip(fig["names"], fig["seconds"], strict=True), key=lambda x: -x[1]
            ):
                print(f"    {s:8.1f} s  {name}")


def salt_figures(work: Path) -> list[tuple[str, int, int]]:
    """(target, tokens solved, tokens whose neighbour set was capped) of every regression."""
    out = []
    for meta in sorted((work / "results").glob("seed*/regression/*/*/*/projected.json")):
        stats = json.loads(meta.read_text())["stats"]
        out.append((meta.parent.name, int(stats["n_tokens"]), int(stats["n_capped"])))
    return out


def tables_methods_read(config: dict[str, Any]) -> set[str]:
    """The neighbour tables a method (or SALT's regression) of the run reads: the goal's.
    ``rule all`` builds every target's tables, also those only Heuristics targets have."""
    from embtransfer.core import paths
    from embtransfer.core.grid import transfer_runs
    from embtransfer.transfer.method_catalog import method_needs

    read = set()
    for run in transfer_runs(config):
        needs = method_needs(run.method, config["transfer"]["options"].get(run.method))
        for need in needs & {"neighbors_word", "neighbors_token", "projected"}:
            vectors = "token" if need == "neighbors_token" else "word"
            read.add(paths.NEIGHBORS.fill(**run._asdict(), vectors=vectors))
    return read


def neighbor_figures(work: Path, read: set[str]) -> list[tuple[str, int, int, bool]]:
    """(table, rows with neighbours, degenerate rows, whether a method reads it) of every
    neighbour table of the run."""
    from embtransfer.neighbors.search import read_neighbors

    out = []
    for path in sorted((work / "results").glob("seed*/neighbors/*/*/*/*.parquet")):
        stats = read_neighbors(path)[1]
        name = path.relative_to(work).as_posix()
        out.append((name, int(stats["n_with_neighbors"]), int(stats["degenerate"]), name in read))
    return out


def checkpoint_figures(work: Path, config: dict[str, Any]) -> tuple[int, list[str]]:
    """How many transferred checkpoints were reloaded and scored, and the runs that were not
    (every planned transfer's zero-shot record reads its checkpoint back)."""
    from embtransfer.core import paths
    from embtransfer.core.grid import transfer_runs

    bad = []
    runs = transfer_runs(config)
    for run in runs:
        record = work / paths.ZEROSHOT.fill(**run._asdict())
        loss = json.loads(record.read_text()).get("loss") if record.is_file() else None
        if loss is None or not math.isfinite(loss):
            bad.append("/".join(map(str, run)))
    return len(runs), bad


def regime_figures(work: Path) -> list[tuple[str, float, float]]:
    """(setting, median k/h, 99th percentile k/h) of SALT's least squares in every setting
    (the regression records' conditioning)."""
    out = []
    for meta in sorted((work / "results").glob("seed*/regression/*/*/*/projected.json")):
        k_over_h = json.loads(meta.read_text())["stats"]["conditioning"]["k_over_h"]
        seed, _, lang, source, target = meta.relative_to(work / "results").parts[:5]
        out.append((f"{lang}/{source}/{target}/{seed}", float(k_over_h["median"]),
                    float(k_over_h["p99"])))
    return out


def soundness_figures(work: Path) -> tuple[list[str], list[str]]:
    """(the PLMs whose rows carry no measurable meaning, SALT's checkpoints that read worse
    than Random or whose rows the row check flags), from the run's report."""
    import pandas as pd

    report = work / "results" / "report"
    probes = pd.read_csv(report / "plm_probes.csv")
    meaningless = [f"{r.lang}/{r.target}" for r in probes.itertuples() if not r.carries]
    tests = pd.read_csv(report / "comparisons.csv", keep_default_na=False)
    worse = tests[(tests["method"] == "salt") & (tests["versus"] == "random")
                  & (tests["relation"] == "worse")]
    lines = pd.read_csv(report / "summaries.csv", keep_default_na=False)
    flagged = lines[(lines["method"] == "salt") & lines["flags"].str.contains("rows flagged")]
    unsound = sorted({f"{r.lang}/{r.target} ({r.family}: worse than Random)"
                      for r in worse.itertuples()}
                     | {f"{r.lang}/{r.target} ({r.family}: rows flagged)"
                        for r in flagged.itertuples()})
    return meaningless, unsound


def lapt_languages(work: Path, config: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(the languages with a final LAPT checkpoint scored on held-out text, the run's
    languages)."""
    from embtransfer.core import paths

    scored = {paths.LAPT_ZEROSHOT.parse(p.relative_to(work).as_posix())["lang"]
              for p in (work / "results").glob("seed*/lapt_zeroshot/*/*/*/*.json")}
    return sorted(scored), sorted(config["targets"])


def floor_figures(work: Path) -> list[tuple[str, dict[str, Any]]]:
    """(source, rule source_floor's record) of every source pretrained here on real text."""
    return [(path.stem, json.loads(path.read_text()))
            for path in sorted((work / "results" / "intrinsic" / "source_floor").glob("*.json"))]


def print_goals(work: Path, wall: float, peak: int, name: str) -> bool:
    from embtransfer.config.validation import load_config_file

    spec = RUNS[name]
    config, limits = load_config_file(REPO / spec["config"]), spec["goals"]
    tables = neighbor_figures(work, tables_methods_read(config))
    n_runs, bad = checkpoint_figures(work, config)
    read = [(n, d) for _, n, d, used in tables if used]
    degenerate, rows = sum(d for _, d in read), sum(n for n, _ in read)
    goals = {
        f"wall {wall / 60:.1f} min (<= {limits['wall_s'] / 60:g})": wall <= limits["wall_s"],
        f"peak {peak / 1e9:.2f} GB (<= {limits['peak_gb']:g})": peak / 1e9 <= limits["peak_gb"],
        f"checkpoints written and reloaded: {n_runs - len(bad)} of {n_runs}"
        + (f" (not: {', '.join(bad)})" if bad else ""): not bad,
    }
    degenerate_goal = (
        f"degenerate rows {degenerate} of {rows} in the {len(read)} tables methods read")
    if limits.get("no_degenerate"):
        goals[degenerate_goal] = bool(read) and degenerate == 0
    else:  # a property of the run's corpora (fastText vectors), shown, not a goal
        print(f"info {degenerate_goal}")
    if "salt_tokens" in limits:
        salt = salt_figures(work)
        goals["SALT uncapped over >= 30,000 tokens: "
              + ", ".join(f"{t} {n} ({c} capped)" for t, n, c in salt)] = (
            bool(salt) and all(c == 0 for _, _, c in salt)
            and max(n for _, n, _ in salt) >= limits["salt_tokens"])
    if "salt_regime" in limits:
        median, p99 = limits["salt_regime"]
        regime = regime_figures(work)
        goals[f"SALT's k/h at most {median:g} (median) and {p99:g} (p99) in every setting: "
              + ", ".join(f"{s} {m:.2f}/{q:.2f}" for s, m, q in regime)] = bool(regime) and all(
            m <= median and q <= p99 for _, m, q in regime)
    if limits.get("sound_plms"):
        meaningless, unsound = soundness_figures(work)
        goals["every recycled PLM carries measurable meaning"
              + (f" (not: {', '.join(meaningless)})" if meaningless else "")] = not meaningless
        goals["no SALT checkpoint worse than Random or flagged"
              + (f" (but: {'; '.join(unsound)})" if unsound else "")] = not unsound
    if limits.get("lapt_everywhere"):
        scored, languages = lapt_languages(work, config)
        goals[f"LAPT scored in {', '.join(scored) or 'no language'} of "
              f"{', '.join(languages)}"] = scored == languages
    for source, record in floor_figures(work):
        goals[f"{source} below its floor: {record['model_bits_per_byte']:.3f} bits per byte, "
              f"add-one unigram {record['unigram_bits_per_byte']:.3f}, Kneser-Ney bigram "
              f"{record['kn_bigram_bits_per_byte']:.3f}"] = bool(record["clears_floor"])
    print("\nneighbour tables (rows, degenerate; * = a method reads it):")
    for name, n, d, used in tables:
        share = 100 * d / max(n, 1)
        print(f"  {'*' if used else ' '} {name}: {n} rows, {d} degenerate ({share:.1f} %)")
    print()
    for text, met in goals.items():
        print(f"{'ok  ' if met else 'MISS'} {text}")
    return all(goals.values())


def summary(work: Path, per_job: bool, name: str, per_method: bool = False) -> bool:
    """Print the figures of the run in ``work`` (its stamped log and memory samples)."""
    stamped = read_log(work / "bench_real.log")
    memory = json.loads((work / "bench_real.memory.json").read_text())
    wall = memory["wall_s"]
    rules = rule_figures(work, stamped, memory["job_peak"])
    print_rules(rules, per_job)
    if per_method:
        print_method_costs(rules)
    print(
        f"\nwall {wall:.1f} s, peak memory of the run {memory['peak_bytes'] / 1e9:.2f} GB "
        f"(summed PSS), {len(job_logs([line for _, line in stamped]))} jobs"
    )
    return print_goals(work, wall, memory["peak_bytes"], name)


def run(work: Path, cores: int, name: str) -> None:
    """Run the config of :data:`RUNS` ``name`` in ``work``; keep the stamped log and the
    memory samples there."""
    if not (REAL / "corpora").is_dir():
        raise SystemExit(f"{REAL} is missing: run make real-data first")
    copy_workflow(work)
    (work / "resources").mkdir(exist_ok=True)
    if not (work / "resources" / "real").exists():
        (work / "resources" / "real").symlink_to(REAL, target_is_directory=True)
    env = dict(os.environ, PYTHONPATH=str(work / "workflow"), **OFFLINE)
    spec = RUNS[name]
    cmd = snakemake_cmd(work, work / spec["config"], "--cores", str(cores), *spec["args"])
    sampler = MemorySampler(os.getpid())
    sampler.start()
    print(f"{spec['config']} in {work}, --cores {cores} {' '.join(spec['args'])}", flush=True)
    done = run_stamped(cmd, work, env, work / "bench_real.log")
    sampler.done.set()
    memory = {
        "wall_s": done.wall,
        "peak_bytes": sampler.peak_bytes,
        "job_peak": dict(sampler.job_peak),
    }
    (work / "bench_real.memory.json").write_text(json.dumps(memory, indent=1) + "\n")
    if done.returncode != 0:
        print("\n".join(line for _, line in done.lines[-60:]))
        raise SystemExit(f"the workflow failed (exit {done.returncode}): {work}/bench_real.log")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, help="keep the run here (default: a temporary one)")
    parser.add_argument("--run", choices=sorted(RUNS), default="real_text",
                        help="which real-text config to time (default: real_text)")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--jobs", action="store_true", help="print every job's seconds too")
    parser.add_argument("--methods", action="store_true",
                        help="print each method's transfer seconds per setting and peak RSS")
    parser.add_argument(
        "--summary",
        action="store_true",
        help="print the figures of the run already in --work, run nothing",
    )
    args = parser.parse_args()
    if args.summary and not args.work:
        parser.error("--summary reads the run in --work DIR")
    with tempfile.TemporaryDirectory(prefix="bench_real.") as tmp:
        work = args.work.resolve() if args.work else Path(tmp)
        if not args.summary:
            run(work, args.cores, args.run)
        ok = summary(work, args.jobs, args.run, args.methods)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

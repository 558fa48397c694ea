"""The SLURM profile on a real (single-node) SLURM cluster started here.

Debian's slurm-wlm and munge are installed with apt-get (the test is skipped,
with the reason, when that is impossible: not root, no apt-get, the install
fails). A private munged and a one-node cluster (this machine, no accounting,
no cgroups) are started in a temporary directory on free ports and stopped at
the end. A small miniature world (one language, one source, one target PLM,
salt + focus + random) is pretrained locally; from a copy of that directory it then runs
to its end twice, side by side: through `snakemake --profile slurm` (a copy of the shipped
profile with the site keys filled in, GPU rules mapped to `gpu: 0` because this node has no
GPU) and locally with `--cores 2`. The test asserts that every non-local job went through
sbatch and finished on the cluster, that the cluster redid none of the local jobs, and that
the artifacts of both runs are identical.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from test_workflow import REPO, copy_workflow, job_stats, small_config, snakemake

from embtransfer.core.cluster import check_slurm_run, find_placeholders, placeholder_message

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol")
PARTITION = "debug"
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")
MARKER = "# written by embtransfer tests/test_slurm.py; removed when the test ends"
ACCOUNT = "testaccount"
# Everything up to the zero-shot table (SALT regression included); LAPT and lm-eval
# are left out to keep the test within minutes on two cores.
# The transfer part of the DAG and one LAPT run: both GPU-declared rules go through sbatch.
TARGETS = ("zeroshot_only",
           "results/seed1234/lapt/ar_mini/gemma_mini/gpt2_ar_mini/salt.metrics.jsonl")
#: The rules run locally before the cluster's run (`--until`, with what they need): the
#: world, the corpora, the tokenizers and models, the vocabularies and their overlap, the
#: word and token fastText models.
UPSTREAM = ("pretrain_model", "fasttext_word", "fasttext_token", "overlap")
GPU_RULES = ("salt_regression", "lapt", "evaluate", "evaluate_source")


def _which(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(p) for d in ("/usr/sbin", "/sbin") if (p := Path(d) / name).exists()), None
    )


SETUP = "`sudo make slurm` (apt-get install slurm-wlm munge), which `make test` runs as root"


def _install_slurm() -> str | None:
    """Install slurm-wlm and munge when missing (as `make slurm` does); the reason to skip,
    naming the command that sets SLURM up, or None."""
    if all(_which(d) for d in DAEMONS):
        return None
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return f"SLURM is not installed and installing it needs root: run {SETUP}"
    if shutil.which("apt-get") is None:
        return f"SLURM is not installed and there is no apt-get: install it ({SETUP})"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "slurm-wlm", "munge"]
    try:
        proc = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True,
                           timeout=600)
            proc = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return f"apt-get install slurm-wlm munge timed out; retry with {SETUP}"
    if proc.returncode != 0:
        return (f"apt-get install slurm-wlm munge failed: {proc.stderr.strip()[-500:]}; "
                f"retry with {SETUP}")
    missing = [d for d in DAEMONS if not _which(d)]
    return f"after installing slurm-wlm and munge, {missing} are missing" if missing else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mem_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(int(line.split()[1]) / 1024 * 0.9)
    raise RuntimeError("no MemTotal in /proc/meminfo")


def slurm_conf(root: Path, node: str, cpus: int, mem_mb: int, munge_socket: Path) -> str:
    return f"""\
ClusterName=embtransfer-test
SlurmctldHost={node}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
StateSaveLocation={root}/spool/ctld
SlurmdSpoolDir={root}/spool/d
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
MinJobAge=3600
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN
PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    reason = _install_slurm()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("slurm")
    for sub in ("spool/ctld", "spool/d", "log", "run", "munge"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    # A private munged (own key and socket): nothing of the system's munge is touched.
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    munge_socket = root / "munge" / "munge.socket"
    node = socket.gethostname().split(".")[0]
    # The config must sit at the compiled-in default path: the plugin's job step
    # strips SLURM_* variables (SLURM_CONF too) before its nested `srun`.
    conf = SYSTEM_CONF
    conf.parent.mkdir(parents=True, exist_ok=True)
    lock = open(conf.parent / ".embtransfer-test.lock", "w")  # noqa: SIM115
    fcntl.flock(lock, fcntl.LOCK_EX)  # one test cluster on this machine at a time
    if conf.exists() and MARKER not in conf.read_text(errors="replace"):
        lock.close()
        pytest.skip(f"{conf} belongs to a real SLURM installation; not replacing it")
    conf.write_text(MARKER + "\n" + slurm_conf(root, node, os.cpu_count() or 1, _mem_mb(),
                                                munge_socket))
    env = dict(os.environ, SLURM_CONF=str(conf))
    procs: list[subprocess.Popen] = []
    jobs_log = root / "log"

    def start(*cmd: str) -> subprocess.Popen:
        out = open(jobs_log / f"{Path(cmd[0]).name}.out", "w")  # noqa: SIM115
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    try:
        start(_which("munged"), "-F", "--force", f"--socket={munge_socket}",
              f"--key-file={key}", f"--pid-file={root}/munge/munged.pid",
              f"--log-file={root}/log/munged.log", f"--seed-file={root}/munge/seed")
        _wait(lambda: munge_socket.exists(), 20, "munged did not start", root)
        start(_which("slurmctld"), "-D", "-i", "-f", str(conf))
        start(_which("slurmd"), "-D", "-f", str(conf))
        _wait(lambda: _node_state(env) == "idle", 60, "the SLURM node did not become idle", root)
        yield {"root": root, "env": env, "conf": conf}
    finally:
        with contextlib.suppress(Exception):
            subprocess.run(["scancel", "--full", "-p", PARTITION], env=env, timeout=20,
                           capture_output=True)
        for proc in reversed(procs):
            _stop(proc)
        conf.unlink(missing_ok=True)
        lock.close()


def _node_state(env) -> str:
    proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=env, capture_output=True,
                          text=True, timeout=20)
    return proc.stdout.strip()


def _wait(predicate, seconds: float, what: str, root: Path) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if predicate():
                return
        time.sleep(0.5)
    logs = "\n".join(
        f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
        for p in sorted((root / "log").glob("*")) if p.is_file()
    )
    pytest.fail(f"{what}\n{logs}")


def cluster_config() -> dict:
    """test_workflow's small config, shrunk to one language, source and target PLM."""
    config = small_config()
    config["sources"] = ["gemma_mini"]
    config["models"]["gemma_mini"]["mix"] = {"ar_mini": 0.03}
    config["targets"] = {"ar_mini": ["gpt2_ar_mini"]}
    config["transfer"] = {"methods": ["salt", "focus", "random"]}
    config["lapt"]["select"] = [{"methods": ["salt"]}]
    return config


def test_profile_placeholder_check():
    """Placeholders name the file and the key; filled-in values pass."""
    jobs = [("world", {"slurm_account": "FILL_IN_ACCOUNT", "slurm_partition": "gpu"}),
            ("salt_regression", {"slurm_account": "FILL_IN_ACCOUNT", "gpu_model": "a100"})]
    found = find_placeholders(jobs)
    assert found == {("slurm_account", "FILL_IN_ACCOUNT"): ["salt_regression", "world"]}
    message = placeholder_message(found)
    assert "slurm/config.yaml" in message and "slurm_account" in message
    assert find_placeholders([("world", {"slurm_account": "lab", "mem_mb": 100})]) == {}

    class Plugin:
        name = "local"

    class Workflow:
        executor_plugin = Plugin()

    check_slurm_run(Workflow())  # another executor: no check, no DAG needed

    shipped = yaml.safe_load((REPO / "slurm" / "config.yaml").read_text())
    assert shipped["executor"] == "slurm"
    assert shipped["default-resources"]["slurm_account"] == "FILL_IN_ACCOUNT"
    assert shipped["default-resources"]["slurm_partition"] == "FILL_IN_PARTITION"
    for rule in GPU_RULES:
        assert shipped["set-resources"][rule]["slurm_partition"] == "FILL_IN_GPU_PARTITION"


def test_profile_placeholders_stop_the_run(tmp_path):
    """With the shipped profile unchanged, nothing is submitted (no cluster needed)."""
    workdir = copy_workflow(tmp_path)
    shutil.copytree(REPO / "slurm", workdir / "slurm")
    (workdir / "test_config.yaml").write_text(yaml.safe_dump(cluster_config()))
    reason = _install_slurm()  # the slurm executor plugin needs the SLURM client commands
    if reason:
        pytest.skip(reason)
    proc = snakemake(workdir, "--profile", "slurm", "world", check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "slurm/config.yaml" in text and "slurm_account: FILL_IN_ACCOUNT" in text, text
    assert not (workdir / ".snakemake" / "slurm_logs").exists()


def _test_profile(workdir: Path) -> None:
    """The shipped profile with this cluster's site keys, sized for a 2-core test node."""
    profile = yaml.safe_load((REPO / "slurm" / "config.yaml").read_text())
    profile["default-resources"].update(
        slurm_account=ACCOUNT, slurm_partition=PARTITION, mem_mb=1500, runtime=30
    )
    for rule, res in profile["set-resources"].items():
        res.pop("gpu_model", None)
        res.update(mem_mb=1500, runtime=30)
        if rule in GPU_RULES:
            # No GPU on this node: the GPU rules run on its CPUs (as on a CPU-only cluster).
            res.update(gpu=0, slurm_partition=PARTITION)
    profile.update({
        "jobs": 4,
        "retries": 0,
        "latency-wait": 5,
        "slurm-status-command": "squeue",  # no accounting, so no sacct
        # The plugin checks this long after a submission, then 10 s further apart each time
        # no job had finished. A job here takes 8-25 s (Snakemake starting in the job, then
        # the rule): at 4 s the checks come 4, 18 and 42 s in, and most levels of the chain
        # end at 18 s (at 1 s: 1, 12 and 33 s in; the cluster's run took 207-234 s, at 4 s
        # 145-147 s).
        "slurm-init-seconds-before-status-checks": 4,
        "slurm-keep-successful-logs": True,
    })
    (workdir / "slurm").mkdir()
    (workdir / "slurm" / "config.yaml").write_text(yaml.safe_dump(profile))


def _finished_jobs(env) -> dict[str, str]:
    """SLURM job id -> state of every job the controller remembers (MinJobAge 3600)."""
    proc = subprocess.run(["squeue", "-h", "--states=all", "-o", "%i %T"], env=env,
                          capture_output=True, text=True, timeout=30, check=True)
    return dict(line.split() for line in proc.stdout.splitlines() if line.strip())


def _compare_runs(local: Path, cluster: Path, config: dict) -> int:
    from safetensors.numpy import load_file

    compared = 0
    for path in sorted((local / "results").rglob("*")):
        rel = path.relative_to(local)
        other = cluster / rel
        if not path.is_file() or "logs" in rel.parts:
            continue
        assert other.exists(), f"{rel} is missing from the SLURM run"
        if path.suffix == ".parquet":
            pd.testing.assert_frame_equal(pd.read_parquet(path), pd.read_parquet(other))
        elif path.suffix == ".safetensors":
            a, b = load_file(str(path)), load_file(str(other))
            assert a.keys() == b.keys(), rel
            for name in a:
                np.testing.assert_array_equal(a[name], b[name], err_msg=f"{rel}:{name}")
        elif path.suffix == ".npy":
            np.testing.assert_array_equal(np.load(path), np.load(other), err_msg=str(rel))
        elif path.suffix == ".txt":
            assert path.read_bytes() == other.read_bytes(), rel
        elif rel.parts[1] == "zeroshot" and path.suffix == ".json":
            a, b = json.loads(path.read_text()), json.loads(other.read_text())
            for key, value in a.items():
                if isinstance(value, float):
                    assert np.isclose(value, b[key], rtol=1e-6, atol=0), (rel, key)
        else:
            continue
        compared += 1
    return compared


def test_workflow_runs_through_sbatch_like_locally(slurm_cluster, tmp_path):
    env = slurm_cluster["env"]
    config = cluster_config()
    local = copy_workflow(tmp_path / "local")
    # Also as config/config.yaml, so that no run can see the default's languages.
    for name in ("test_config.yaml", "config/config.yaml"):
        (local / name).write_text(yaml.safe_dump(config, allow_unicode=True))
    # The models are pretrained once, locally; the cluster's run resumes from a copy of that
    # directory (Snakemake's records with it), as a run moved to a cluster does. Each job
    # through sbatch costs a status check or two (4-14 s apart), so this takes 14 of its 27
    # jobs (8 steps of the chain) off the cluster and still sends it 13, every GPU rule among
    # them.
    proc = snakemake(local, "--cores", "2", *TARGETS, "--until", *UPSTREAM)
    upstream = set(job_stats(proc.stdout + proc.stderr))
    assert set(UPSTREAM) <= upstream and "salt_regression" not in upstream, upstream
    cluster = tmp_path / "cluster"
    shutil.copytree(local, cluster, symlinks=True)
    _test_profile(cluster)

    def local_run() -> float:
        started = time.monotonic()
        snakemake(local, "--cores", "2", *TARGETS)
        return time.monotonic() - started

    # The local run goes side by side with the cluster's, which mostly waits on SLURM's
    # status checks, so the two take little longer than the cluster's alone.
    before = set(_finished_jobs(env))
    with ThreadPoolExecutor(1) as pool:
        local_done = pool.submit(local_run)
        started = time.monotonic()
        proc = snakemake(cluster, "--profile", "slurm", *TARGETS, check=False,
                         env={"SLURM_CONF": env["SLURM_CONF"]})
        cluster_s = time.monotonic() - started
        local_s = local_done.result()
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-6000:]

    # Every job went through sbatch and completed.
    # SLURM job id -> rule, from "... submitted with SLURM jobid 7 (log: .../rule_x/...".
    rule_of = {
        m.group(1): m.group(2)
        for m in re.finditer(r"SLURM jobid (\d+) \(log: \S*/slurm_logs/rule_(\w+)/", text)
    }
    submitted = set(rule_of)
    states = {k: v for k, v in _finished_jobs(env).items() if k not in before}
    assert submitted and submitted == set(states), (submitted, states)
    assert set(states.values()) == {"COMPLETED"}, states
    stats = text.split("Job stats:", 1)[1]
    n_jobs = int(stats.split("total", 1)[1].split()[0])
    # the target rule zeroshot_only (no output, nothing to run) stays on the local node
    assert len(submitted) == n_jobs - len(re.findall(r"^zeroshot_only\s+1$", stats, re.M))
    slurm_logs = list((cluster / ".snakemake" / "slurm_logs").rglob("*.log"))
    assert len(slurm_logs) == len(submitted)
    assert any("rule_salt_regression" in str(p) for p in slurm_logs)
    # The site keys reached sbatch; the GPU rule asked for no GPU (gpu: 0 on this node).
    for job_id, rule in rule_of.items():
        info = subprocess.run(["scontrol", "show", "job", job_id], env=env, text=True,
                              capture_output=True, timeout=30, check=True).stdout
        assert f"Partition={PARTITION}" in info and f"Account={ACCOUNT}" in info, info
        assert "gpu" not in info.lower(), (rule, info)
    assert {"salt_regression", "lapt"} <= set(rule_of.values())
    assert not upstream & set(rule_of.values()), "the cluster redid the local jobs"

    compared = _compare_runs(local, cluster, config)
    assert compared > 15
    for method in config["transfer"]["methods"]:
        ckpt = Path("results/seed1234/transfer/ar_mini/gemma_mini/gpt2_ar_mini") / method
        assert (cluster / ckpt / "model.safetensors").exists()
    print(f"\nSLURM run {cluster_s:.0f} s ({len(submitted)} sbatch jobs), "
          f"local run {local_s:.0f} s, {compared} artifacts identical")

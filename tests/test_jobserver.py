"""The job server (embtransfer/core/jobserver.py): a job run in a fork behaves as one run in
its own process (streams, directory, environment, exit status, errors, signals, the job's
own code), and a job falls back to its own process wherever no server is usable."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from embtransfer.core import jobserver

WORKFLOW = Path(__file__).resolve().parents[1] / "workflow"

SCRIPT = '''"""A job script."""

from embtransfer.core.jobserver import delegate

delegate()

import gc, json, os, sys
from pathlib import Path

import embtransfer.core.jobserver as js

mode = sys.argv[1]
Path("report.json").write_text(json.dumps({
    "pid": os.getpid(), "cwd": os.getcwd(), "argv": sys.argv,
    "flag": os.environ.get("JOB_FLAG"), "child": os.environ.get(js.CHILD_ENV),
    "torch_loaded": "torch" in sys.modules, "package": js.__file__,
    "frozen": gc.get_freeze_count(),
}))
print("to stdout")
print("to stderr", file=sys.stderr)
if mode == "fail":
    import atexit
    atexit.register(lambda: Path("atexit_ran").write_text(""))
    sys.excepthook = lambda t, e, tb: Path("hook_saw").write_text(str(e))  # as job_logger's
    raise ValueError("the job's own error")
if mode == "exit":
    import threading, time
    def late():
        time.sleep(0.5)
        Path("thread_done").write_text("")
    threading.Thread(target=late).start()  # non-daemon: the exit waits for it
    sys.exit(3)
if mode == "sleep":
    Path("started").write_text("")
    import time
    time.sleep(60)
'''


def _wait(condition, seconds: float) -> bool:
    """Poll ``condition`` until it holds or ``seconds`` pass; whether it held."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server preloading one small module (the mechanism does not depend on which)."""
    directory = tmp_path_factory.mktemp("server")
    path = str(directory / "s.sock")
    env = {**os.environ, "PYTHONPATH": str(WORKFLOW)}
    proc = subprocess.Popen(
        [sys.executable, "-c",
         f"from embtransfer.core import jobserver; jobserver.serve({path!r}, ('json',))"],
        env=env)
    if not _wait(Path(path).is_socket, 10):
        proc.kill()
        pytest.fail("the server did not start")
    yield f"{socket.gethostname()}:{path}"
    proc.terminate()
    proc.wait(timeout=10)


def _run(tmp_path: Path, mode: str, server_env: str | None, extra_env=None, **popen):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != jobserver.ENV}
    env.update(PYTHONPATH=str(WORKFLOW), JOB_FLAG="set-by-job")
    if server_env is not None:
        env[jobserver.ENV] = server_env
    env.update(extra_env or {})
    return subprocess.Popen([sys.executable, str(script), mode], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **popen)


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's reaper may be slow to collect it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _report(tmp_path: Path) -> dict:
    import json

    return json.loads((tmp_path / "report.json").read_text())


def test_a_job_runs_in_a_fork_as_in_its_own_process(server, tmp_path):
    proc = _run(tmp_path, "ok", server)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    report = _report(tmp_path)
    assert report["child"] == "1" and report["pid"] != proc.pid  # it ran in the fork
    assert report["cwd"] == str(tmp_path) and report["argv"][1:] == ["ok"]
    assert report["flag"] == "set-by-job"  # the job's environment, not the server's
    assert report["package"].startswith(str(WORKFLOW))  # the job's own code, afresh
    assert report["frozen"] > 0  # the server's objects stay out of the job's collections
    assert out == "to stdout\n" and err == "to stderr\n"  # the job's own streams


def test_exit_status_and_errors_reach_the_job_process(server, tmp_path):
    proc = _run(tmp_path, "exit", server)
    proc.communicate(timeout=60)
    assert proc.returncode == 3 and (tmp_path / "thread_done").exists()
    proc = _run(tmp_path, "fail", server)
    proc.communicate(timeout=60)
    assert proc.returncode == 1
    # The job's own excepthook (job_logger's writes the error to the job's log) and exit
    # handlers run, as at the end of its own process.
    assert (tmp_path / "hook_saw").read_text() == "the job's own error"
    assert (tmp_path / "atexit_ran").exists()
    (tmp_path / "hook_saw").unlink()
    proc = _run(tmp_path, "fail", None)  # the same job in its own process, for comparison
    proc.communicate(timeout=60)
    assert proc.returncode == 1 and (tmp_path / "hook_saw").exists()


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_a_stopped_job_process_takes_its_fork_along(server, tmp_path, stop):
    """SIGTERM is relayed to the fork; after SIGKILL (no handler runs) the fork notices the
    closed connection."""
    proc = _run(tmp_path, "sleep", server)
    assert _wait((tmp_path / "started").exists, 10)
    child = _report(tmp_path)["pid"]
    assert child != proc.pid  # it runs in the fork
    proc.send_signal(getattr(signal, stop))
    proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert _wait(lambda: not _running(child), 5), "the forked job outlived its job process"


@pytest.mark.parametrize("where", ["no server", "another host", "no socket"])
def test_without_a_usable_server_the_job_runs_itself(tmp_path, where):
    server_env = {"no server": None, "another host": f"not-{socket.gethostname()}:/x.sock",
                  "no socket": f"{socket.gethostname()}:{tmp_path / 'gone.sock'}"}[where]
    proc = _run(tmp_path, "ok", server_env)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    report = _report(tmp_path)
    assert report["child"] is None and report["pid"] == proc.pid


@pytest.mark.parametrize("changed", [{"OMP_NUM_THREADS": "7"}, {"HF_DATASETS_OFFLINE": "0"},
                                     {"HF_HUB_OFFLINE": "1"}, {"MALLOC_TRIM_THRESHOLD_": "0"}])
def test_a_job_whose_libraries_would_load_differently_runs_itself(server, tmp_path, changed):
    """Thread pools and offline switches are read when a library loads, glibc's allocator
    settings when the process starts: a job that differs from the server there would run
    differently in a fork."""
    if all(os.environ.get(k) == v for k, v in changed.items()):
        pytest.skip("the test's environment already has this value")
    proc = _run(tmp_path, "ok", server, extra_env=changed)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert _report(tmp_path)["pid"] == proc.pid  # its own process


def test_a_server_that_does_not_answer_is_no_server(tmp_path, monkeypatch):
    """A server that accepts but never forks (hung) leaves the job to run itself."""
    import threading

    path = tmp_path / "hung.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    held = []
    threading.Thread(target=lambda: held.append(listener.accept()), daemon=True).start()
    monkeypatch.setenv(jobserver.ENV, f"{socket.gethostname()}:{path}")
    monkeypatch.delenv(jobserver.CHILD_ENV, raising=False)
    monkeypatch.setattr(jobserver, "HANDSHAKE_TIMEOUT_S", 0.5)
    start = time.monotonic()
    jobserver.delegate()  # returns: the caller runs the job
    assert time.monotonic() - start < 10
    listener.close()


def test_start_and_stop_set_and_clear_the_variable(monkeypatch):
    monkeypatch.delenv(jobserver.ENV, raising=False)
    # a short directory, whoever runs the suite: pytest-xdist's temporary paths are deep
    # enough for the short-socket fallback (the next test)
    workdir = Path(tempfile.mkdtemp(prefix="js-"))
    jobserver.start(workdir, 1)
    try:
        host, _, path = os.environ[jobserver.ENV].partition(":")
        assert host == socket.gethostname() and Path(path).parent == workdir.resolve()
        # the real preload list: torch, transformers, lm-eval
        assert jobserver.starting(path).exists() or Path(path).is_socket()
        assert _wait(Path(path).is_socket, 60)
        assert _wait(lambda: not jobserver.starting(path).exists(), 5)  # ready: no marker
        assert Path(path).stat().st_mode & 0o077 == 0  # it runs what it is sent: ours only
    finally:
        jobserver.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    assert jobserver.ENV not in os.environ and not Path(path).exists()


def test_a_deep_working_directory_gets_a_short_socket(tmp_path, monkeypatch):
    """Unix socket paths are limited to 107 bytes: a deep run directory must still get its
    server (its socket then lives in a private temporary directory)."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    monkeypatch.delenv(jobserver.ENV, raising=False)
    jobserver.start(deep, 1)
    try:
        path = Path(os.environ[jobserver.ENV].partition(":")[2])
        assert len(str(path).encode()) <= jobserver.SOCKET_PATH_MAX
        assert _wait(path.is_socket, 60)
    finally:
        jobserver.stop()
    assert not path.exists() and not path.parent.exists()


def test_the_server_ends_with_the_process_that_started_it(tmp_path):
    """Snakemake killed outright (no onsuccess/onerror) leaves no server behind, even one
    still importing its libraries."""
    parent = subprocess.run(
        [sys.executable, "-c",
         "import sys; from embtransfer.core import jobserver; "
         f"jobserver.start({str(tmp_path)!r}, 1); print(jobserver._PROCESS[0].pid)"],
        env={**os.environ, "PYTHONPATH": str(WORKFLOW)}, capture_output=True, text=True,
        check=True)
    server = int(parent.stdout.split()[-1])
    if not _wait(lambda: not _running(server), 15):
        os.kill(server, signal.SIGKILL)
        pytest.fail("the server outlived the process that started it")


def test_every_job_script_hands_over_before_its_imports():
    """Each compute script calls delegate() first (download scripts, which need the network
    settings they set themselves, run in their own process)."""
    for script in sorted((WORKFLOW / "scripts").glob("*/*.py")):
        text = script.read_text()
        if script.name.startswith("download_") or script.name == "fetch_model.py":
            assert "delegate()" not in text, script
            continue
        code = [line for line in text.split('"""', 2)[2].splitlines()
                if line.strip() and not line.startswith("#")]
        assert code[:2] == ["from embtransfer.core.jobserver import delegate", "delegate()"] \
            or code[1].startswith("delegate()"), script


def test_a_job_waits_for_a_server_still_importing(tmp_path, monkeypatch):
    """While a live process's starting marker stands beside a socket not yet there, a job
    waits for the socket; with the marker's process gone it runs itself at once."""
    import threading

    path = tmp_path / "later.sock"
    monkeypatch.setenv(jobserver.ENV, f"{socket.gethostname()}:{path}")
    monkeypatch.delenv(jobserver.CHILD_ENV, raising=False)
    jobserver.starting(str(path)).write_text(str(os.getpid()))  # a live process: importing
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)

    def ready() -> None:
        time.sleep(1.0)
        listener.bind(str(path))
        listener.listen(1)

    threading.Thread(target=ready, daemon=True).start()
    start = time.monotonic()
    assert jobserver._server_path() == str(path)  # waited for the socket
    assert time.monotonic() - start >= 0.9
    listener.close()
    path.unlink()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    jobserver.starting(str(path)).write_text(dead)  # its server died importing
    start = time.monotonic()
    assert jobserver._server_path() is None and time.monotonic() - start < 1.0


def test_the_server_preloads_every_model_family_the_package_builds():
    """A family whose modeling module the server lacks is imported (and, without bytecode,
    compiled) in every job's fork: Gemma 3's cost 2-5 s a transfer job of bench-real."""
    import importlib.util

    from embtransfer.core.jobserver import PRELOAD
    from embtransfer.models.pretrain import MODEL_FAMILIES
    from embtransfer.models.random_weights import FAMILIES

    for family in sorted(set(MODEL_FAMILIES) | set(FAMILIES)):
        module = f"transformers.models.{family}.modeling_{family}"
        assert importlib.util.find_spec(module) is not None, module
        assert module in PRELOAD, f"{module} is not in jobserver.PRELOAD"

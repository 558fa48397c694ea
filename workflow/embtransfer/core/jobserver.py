"""A local run's job server: jobs start in a fork of a process that imported torch already.

Why. Every job of a local run is a new Python process, and importing torch, transformers
and lm-eval takes it 2-5 s before any work (the miniature world's jobs then work for
seconds: start-up was a third of the default run's CPU time; benchmarks/README.md). A
forked process starts with those modules imported, in milliseconds.

How. For a local, non-dry run, the Snakefile's ``onstart`` starts :func:`serve` in a
background process (``python -m embtransfer.core.jobserver SOCKET``), which imports
:data:`PRELOAD` and listens on a Unix socket under ``.snakemake/``; the variable
:data:`ENV` (host and socket) reaches every job through the environment. Each job script
calls :func:`delegate` before its own imports. With a server on this host it hands over
its command line, working directory, environment and standard streams; the server forks a
child that takes them, drops any module of this package the server had loaded (the child
imports the job's own code, from the job's path, afresh), runs the script as ``__main__``
and reports its exit status, which the job process exits with. Signals the job process
gets (Snakemake stopping a job) go to the child; a child whose job process died exits.

A job started while the server still imports its libraries waits for it (its
:func:`starting` marker names the server's process; at most :data:`STARTUP_WAIT_S`): on a
machine of few cores the job's own imports would only compete with the server's. Without a
server (cluster jobs, another host, ``job_server: false``, a server gone or not ready in
time) :func:`delegate` returns and the script runs in its own process, as before. The
job's code, inputs and seeds are the same either way, and so are its outputs
(tests/test_jobserver.py). This module imports nothing beyond the standard library: it
runs first in every job.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import runpy
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

#: ``host:socket path`` of the run's server, set in the jobs' environment by the Snakefile.
ENV = "EMBTRANSFER_JOB_SERVER"
#: Set in a forked child, so the script's own :func:`delegate` call runs it there.
CHILD_ENV = "EMBTRANSFER_JOB_SERVER_CHILD"
#: Heavy modules the jobs import; the server imports them once (a missing one is skipped).
#: Every model family the package builds has its modeling module here: one left out is
#: imported in every job's fork again (Gemma 3's took 2-5 s a job of `make bench-real`).
PRELOAD = (
    "numpy", "torch", "safetensors.torch", "tokenizers", "transformers",
    "transformers.models.llama.modeling_llama", "transformers.models.gemma.modeling_gemma",
    "transformers.models.gemma3.modeling_gemma3", "transformers.models.xglm.modeling_xglm",
    "transformers.models.gpt2.modeling_gpt2", "transformers.models.bert.modeling_bert",
    "transformers.models.t5.modeling_t5", "peft", "lm_eval.evaluator",
    "lm_eval.models.huggingface", "jsonschema",  # the config and catalogs' schemas: 0.05 s a job
)
#: Variables read when the server starts or loads its libraries (BLAS and OpenMP thread
#: pools, Hugging Face offline switches, CUDA devices, glibc's allocator, ...): a job whose
#: values differ from the server's would run differently in a fork, so it runs in its own
#: process instead.
IMPORT_TIME_ENV = ("OMP_", "KMP_", "MKL_", "OPENBLAS_", "GOTO_", "VECLIB_", "NUMEXPR_",
                   "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_", "TORCH", "PYTORCH_",
                   "CUDA_", "NVIDIA_", "LD_", "PYTHON", "MALLOC_", "GLIBC_")
#: What the job scripts that import ``datasets`` set before importing it, unless already set
#: (evaluation/evaluate.py, evaluation/tokenizer_stats.py: their data are local). The
#: server loads its libraries so too; download scripts, which need the network, never
#: delegate.
JOB_DEFAULTS = {"HF_DATASETS_OFFLINE": "1"}
#: Snakemake sets these to a job's threads; the server is started with the run's value.
THREAD_ENV = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
#: This package: its modules are imported afresh in every child (the job's own code).
PACKAGE = "embtransfer"
#: This module, as ``python -m`` runs it.
MODULE = "embtransfer.core.jobserver"
_HEADER_MAX = 1 << 20
#: Linux takes socket paths of up to 107 bytes (the server binds "<path>.<pid>" first); a
#: longer one goes under the temporary directory.
SOCKET_PATH_MAX = 90
#: Seconds a job waits for the server to take it (fork and reply) before running itself.
HANDSHAKE_TIMEOUT_S = 30.0
#: Seconds a job waits for a server that is still importing its libraries.
STARTUP_WAIT_S = 120.0


def _send(sock: socket.socket, obj: object) -> None:
    data = json.dumps(obj).encode()
    sock.sendall(len(data).to_bytes(4, "big") + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("job server connection closed")
        buf += chunk
    return buf


def _recv(sock: socket.socket) -> object:
    size = int.from_bytes(_recv_exact(sock, 4), "big")
    if size > _HEADER_MAX:
        raise ConnectionError(f"job server message of {size} bytes")
    return json.loads(_recv_exact(sock, size))


def _server_path() -> str | None:
    """The socket of this host's server, from :data:`ENV` (None: none usable here). A
    server still importing its libraries (its :func:`starting` marker names a live
    process) is waited for, up to :data:`STARTUP_WAIT_S`: the job would import the same
    libraries itself, beside it, on the same cores."""
    if os.environ.get(CHILD_ENV):
        return None
    host, sep, path = os.environ.get(ENV, "").partition(":")
    if not sep or host != socket.gethostname():
        return None
    deadline = time.monotonic() + STARTUP_WAIT_S
    while not Path(path).is_socket() and _starting_pid(path) and time.monotonic() < deadline:
        time.sleep(0.1)
    return path if Path(path).is_socket() else None


def starting(path: str) -> Path:
    """The marker :func:`start` writes beside the socket ``path`` while its server imports
    its libraries: the server's process id. The server removes it once it accepts jobs."""
    return Path(f"{path}.starting")


def _starting_pid(path: str) -> int | None:
    """The process id in ``path``'s :func:`starting` marker if that process is alive."""
    try:
        pid = int(starting(path).read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def delegate() -> None:
    """Run this job script in the server's fork and exit with its status, or return (no
    server here: the caller runs the script itself)."""
    path = _server_path()
    if path is None:
        return
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(HANDSHAKE_TIMEOUT_S)  # a server that does not answer is no server
    try:
        sock.connect(path)
        request = {"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ),
                   "python": _interpreter()}
        sys.stdout.flush()
        sys.stderr.flush()
        socket.send_fds(sock, [b"x"], [0, 1, 2])
        _send(sock, request)
        reply = _recv(sock)
        child = int(reply["pid"])  # type: ignore[index]
    except (OSError, KeyError, TypeError, ValueError):
        sock.close()
        return  # no server after all, or one of another interpreter: run here
    sock.settimeout(None)  # the job itself may run for hours
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _f, pid=child: _forward(pid, s))
    try:
        status = int(_recv(sock)["status"])  # type: ignore[index]
    except (OSError, ValueError, KeyError):
        status = 1  # the child died without reporting
        print(f"job server: child {child} ended without a status", file=sys.stderr)
    os._exit(status)


def _interpreter() -> list[str]:
    """What a fork must share with the job process: the environment's prefix and version."""
    return [sys.prefix, sys.version]


def import_env(env: dict[str, str]) -> dict[str, str]:
    """The part of ``env`` the preloaded libraries read when they load (PYTHONPATH aside:
    a fork takes the job's import path)."""
    return {k: v for k, v in env.items()
            if k.startswith(IMPORT_TIME_ENV) and k != "PYTHONPATH"}


def _refusal(request: dict) -> str | None:
    """Why the server's fork cannot stand in for this job's own process (None: it can)."""
    if request["python"] != _interpreter():
        return f"the server runs {sys.prefix} ({sys.version.split()[0]})"
    job, here = import_env({**JOB_DEFAULTS, **request["env"]}), import_env(_SERVER_ENV)
    differ = sorted(k for k in job.keys() | here.keys() if job.get(k) != here.get(k))
    if differ:
        return f"the job's {', '.join(differ)} differ from the server's"
    return None


def _forward(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _adopt(request: dict, fds: list[int]) -> None:
    """Become the job: its streams, directory, environment, command line and import path."""
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ[CHILD_ENV] = "1"
    sys.argv = list(request["argv"])
    script_dir = str(Path(sys.argv[0]).resolve().parent)
    job_path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    base = [p for p in sys.path if p not in ("", ".")]
    sys.path[:] = [script_dir, *job_path, *[p for p in base if p not in job_path]]
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[name]
    importlib.invalidate_caches()
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 (the job's stream, for its lifetime)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    tempfile.tempdir = None  # the job's TMPDIR, not one the server looked up


def _watch(sock: socket.socket) -> None:
    """Exit when the job process is gone (it never writes after its request)."""
    with contextlib.suppress(OSError):
        sock.recv(1)
    os._exit(1)


def _run_job(sock: socket.socket) -> None:
    """In the forked child: take the job over, run its script, report, exit."""
    _, fds, _, _ = socket.recv_fds(sock, 1, 3)
    request = _recv(sock)
    refusal = _refusal(request)  # type: ignore[arg-type]
    if refusal:  # e.g. a job with more threads, or in its own conda environment
        print(f"job server: {request['argv'][0]} runs in its own process: {refusal}",  # type: ignore[index]
              flush=True)
        _send(sock, {"refused": refusal})
        os._exit(0)
    _adopt(request, fds)  # type: ignore[arg-type]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL if sig != signal.SIGINT else signal.default_int_handler)
    _send(sock, {"pid": os.getpid()})
    threading.Thread(target=_watch, args=(sock,), daemon=True).start()
    status = 0
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
    except BaseException:  # the job's error, handled as Python would: its excepthook
        sys.excepthook(*sys.exc_info())  # (job_logger's writes it to the job's log)
        status = 1
    # What the interpreter does at exit: wait for the job's non-daemon threads, then run
    # its exit handlers (logging's flush among them).
    with contextlib.suppress(Exception):
        threading._shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    with contextlib.suppress(OSError):
        _send(sock, {"status": status})
    os._exit(status)


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:  # runs in the forked child (ForkingMixIn)
        try:
            _run_job(self.request)
        finally:
            os._exit(1)  # never return into the server's loop in a child


class _Server(socketserver.ForkingMixIn, socketserver.UnixStreamServer):
    max_children = 1 << 16  # as many jobs as Snakemake runs at once
    block_on_close = False


def _exit_with_parent(parent: int, path: str) -> None:
    while os.getppid() == parent:  # reparented once the process that started it is gone
        time.sleep(1)
    for gone in (path, starting(path)):
        with contextlib.suppress(OSError):
            os.unlink(gone)
    os._exit(0)


_SERVER_ENV: dict[str, str] = {}  # the environment the server imported its modules in


def serve(path: str, preload: tuple[str, ...] = PRELOAD, parent: int | None = None) -> None:
    """Import ``preload``, then fork a child per job request on ``path`` until ``parent``
    (the process that started the server; default: this one's parent) exits."""
    parent = os.getppid() if parent is None else parent
    # watched from before the imports, which can outlast a short run
    threading.Thread(target=_exit_with_parent, args=(parent, path), daemon=True).start()
    for key, value in JOB_DEFAULTS.items():
        os.environ.setdefault(key, value)
    _SERVER_ENV.update(os.environ)
    for name in preload:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    # the preloaded modules' objects left out of the jobs' garbage collections: a full
    # collection in a fork writes to every tracked object's header, which copies the
    # server's pages into the job one by one (Python's advice for fork without exec)
    gc.freeze()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    tmp = f"{path}.{os.getpid()}"
    mask = os.umask(0o077)  # the socket runs any script it is sent: this user's jobs only
    try:
        server = _Server(tmp, _Handler)
    finally:
        os.umask(mask)
    os.replace(tmp, path)  # ready: jobs see the socket only once it accepts
    with contextlib.suppress(OSError):
        starting(path).unlink()
    server.serve_forever(poll_interval=0.5)


_PROCESS: list[subprocess.Popen] = []  # the server this process started


def start(directory: str | Path, threads: int) -> None:
    """Start this host's server in the background (its socket under ``directory``) and set
    :data:`ENV` here, so the jobs started from this process find it; :func:`stop` ends it.
    The server loads its libraries as a job of ``threads`` threads would (Snakemake's
    :data:`THREAD_ENV`): jobs of other thread counts run in their own process. Jobs started
    while it imports wait for it (its :func:`starting` marker)."""
    directory = Path(directory)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = str((directory / f"jobserver.{os.getpid()}.sock").resolve())
    if len(path.encode()) > SOCKET_PATH_MAX:  # a deep working directory: a short private one
        path = str(Path(tempfile.mkdtemp(prefix="embt-jobserver-")) / "s.sock")
    package_root = str(Path(__file__).resolve().parents[2])  # where `embtransfer` is
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env.update(dict.fromkeys(THREAD_ENV, str(threads)))
    with open(directory / "jobserver.log", "w") as log:
        _PROCESS.append(subprocess.Popen(
            [sys.executable, "-m", MODULE, path, str(os.getpid())],
            stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, env=env,
            start_new_session=True,  # Ctrl-C reaches Snakemake, which stops the server
        ))
    marker = starting(path)
    marker.with_suffix(".tmp").write_text(str(_PROCESS[-1].pid))
    marker.with_suffix(".tmp").replace(marker)  # jobs started from now on wait for it
    os.environ[ENV] = f"{socket.gethostname()}:{path}"


def stop() -> None:
    """End the server :func:`start` started (jobs still running finish on their own)."""
    path = os.environ.pop(ENV, "").partition(":")[2]
    while _PROCESS:
        proc = _PROCESS.pop()
        if proc.poll() is None:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
    if path:
        for gone in (path, starting(path)):
            with contextlib.suppress(OSError):
                os.unlink(gone)
        if Path(path).parent.name.startswith("embt-jobserver-"):
            with contextlib.suppress(OSError):
                Path(path).parent.rmdir()


if __name__ == "__main__":
    serve(sys.argv[1], parent=int(sys.argv[2]))

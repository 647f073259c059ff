"""The warm process every book kernel is forked from (brrr_book.warm's docstring says why).

Run as a script, never imported: ``python zygote.py FD`` where FD is one end of a socket pair whose
other end the building process (brrr_book.warm.provisioner) holds. It imports what every notebook
imports anyway (``PRELOAD``; ``BRRR_WARM_PRELOAD`` replaces the list, comma-separated), says it is
ready, then answers one JSON line per JSON line read:

- ``{"launch": {"argv": [...], "env": {...}, "cwd": "..."}}``: fork a kernel; ``{"pid": N}`` once
the
  child runs in its own session with the launch's environment and folder, or ``{"error": "..."}``.
- ``{"reap": N}``: wait for the exited kernel N; ``{"returncode": code}``.

It never reaps a kernel unasked, so a pid cannot be reused before the building process holds a pidfd
on it. It forks only while it has one thread (a fork of a threaded process may copy a held lock),
and exits when the socket closes: the build is over, or its process died. Each kernel is killed if
the zygote dies.

It imports neither brrr (which sets TRITON_INTERPRET in brrr.device before triton is imported) nor
triton, and creates nothing torch would keep: no tensor, no thread, no compiled graph.
"""

import sys

if __name__ == "__main__":
    del sys.path[
        0
    ]  # this file's folder: a kernel's imports resolve as under ``python -m ipykernel_launcher``

import ctypes  # noqa: E402
import importlib  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import traceback  # noqa: E402

PRELOAD = (
    "torch",
    "numpy",
    "matplotlib",
    "matplotlib.pyplot",  # not its backend, matplotlib_inline.backend_inline: see preload()
    "IPython",
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "ipykernel.zmqshell",
)
# These import triton: preloaded only where every kernel runs Triton's interpreter (see
# interpreter_on()).
PRELOAD_WITH_TRITON = ("torch._dynamo", "torch._inductor.compile_fx")
PR_SET_PDEATHSIG = 1
INLINE_BACKEND_MODULE = "matplotlib_inline.backend_inline"
INLINE_BACKEND = f"module://{INLINE_BACKEND_MODULE}"


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def interpreter_on() -> bool:
    """Set TRITON_INTERPRET where brrr.device would set it in every kernel: a torch built for no
    GPU.

    brrr.device sets it before any of brrr's modules imports triton, so that triton.language's own
    functions are built interpreted; the zygote sets it before torch._dynamo imports triton, to the
    same effect. Where torch could see a GPU, which torch.cuda would have to ask (a fork after that
    is unsafe), nothing that imports triton is preloaded.
    """
    torch = sys.modules.get("torch")
    if torch is None or torch.version.cuda or getattr(torch.version, "hip", None):
        return os.environ.get("TRITON_INTERPRET") == "1"
    if os.environ.get("BRRR_DEVICE", "").strip().lower() != "cuda":
        os.environ["TRITON_INTERPRET"] = "1"
    return os.environ.get("TRITON_INTERPRET") == "1"


def stop_blas_threads() -> None:
    """Stop OpenBLAS's thread pool, as its own handler does before every fork (pthread_atfork).

    numpy's OpenBLAS starts its pool when loaded; stopped, the zygote forks with one thread. A
    kernel starts the pool again, with as many threads, on its first BLAS call, as a fresh process
    would."""
    with open("/proc/self/maps") as maps:
        libraries = {line.split()[-1] for line in maps if "openblas" in line.rsplit("/", 1)[-1]}
    for library in sorted(libraries):
        shutdown = getattr(ctypes.CDLL(library), "blas_thread_shutdown_", None)
        if shutdown is not None:
            shutdown()


def preload() -> None:
    """Import the modules a kernel would import; matplotlib reads its backend as a kernel's
    would."""
    # ipykernel sets this before any notebook imports matplotlib, which reads it once, on import.
    if not os.environ.get("MPLBACKEND"):
        os.environ["MPLBACKEND"] = INLINE_BACKEND
    names = os.environ.get("BRRR_WARM_PRELOAD")
    names = [name.strip() for name in names.split(",")] if names is not None else list(PRELOAD)
    for name in filter(None, names):
        importlib.import_module(name)
    if names == list(PRELOAD) and interpreter_on():
        for name in PRELOAD_WITH_TRITON:
            importlib.import_module(name)
    if INLINE_BACKEND_MODULE in sys.modules:
        # On import in a kernel it turns on IPython's showing of each cell's figures; imported here,
        # it would not, and a page without ``%matplotlib inline`` would lose its figures.
        raise RuntimeError(
            f"the preloaded modules imported {INLINE_BACKEND_MODULE}, which must be imported in a "
            "kernel"
        )
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("the preloaded modules imported triton before TRITON_INTERPRET was set")
    stop_blas_threads()


def become_kernel(argv: list, env: dict, cwd: str, ready: int, zygote: int) -> list:
    """In the forked child: the launch's session, folder, environment and stdin; returns sys.argv to
    run."""
    os.setsid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != zygote:  # the zygote died before prctl took effect
        os._exit(1)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    # The generators seeded when the zygote imported them start from fresh seeds, as in a new
    # process (Python's random reseeds itself after a fork).
    if "numpy.random" in sys.modules:  # numpy imports it on first use, seeding its generator then
        sys.modules["numpy.random"].seed()
    if "torch" in sys.modules:
        sys.modules[
            "torch"
        ].default_generator.seed()  # the CPU one; CUDA's are made in the kernel, if at all
    os.write(ready, b"1")
    os.close(ready)
    launcher = importlib.util.find_spec("ipykernel_launcher").origin
    return [launcher, *argv[3:]]


def launch(argv: list, env: dict, cwd: str, connection: socket.socket):
    """Fork one kernel: (reply, None) in the zygote, (None, kernel argv) in the child."""
    if argv[1:3] != ["-m", "ipykernel_launcher"] or os.path.realpath(argv[0]) != os.path.realpath(
        sys.executable
    ):
        return {"error": f"not an ipykernel launch with this zygote's Python: {argv}"}, None
    if threads() != 1:
        return {
            "error": f"the zygote runs {threads()} threads; a fork could copy a held lock"
        }, None
    zygote = os.getpid()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            connection.close()
            return None, become_kernel(argv, env, cwd, write_end, zygote)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
    os.close(write_end)
    started = os.read(read_end, 1)
    os.close(read_end)
    if started != b"1":
        os.waitpid(pid, 0)
        return {"error": "the forked kernel failed before it started (its error is above)"}, None
    return {"pid": pid}, None


def reap(pid: int) -> dict:
    _, status = os.waitpid(pid, 0)
    return {"returncode": os.waitstatus_to_exitcode(status)}


def serve(connection: socket.socket):
    """Answer requests until the socket closes (then exit) or this process is a forked kernel (its
    argv)."""
    reader = connection.makefile("r", encoding="utf-8")
    for line in reader:
        request = json.loads(line)
        try:
            if "launch" in request:
                reply, kernel_argv = launch(**request["launch"], connection=connection)
                if kernel_argv is not None:
                    reader.close()
                    return kernel_argv
            else:
                reply = reap(request["reap"])
        except Exception as error:  # the building process launches the normal way on any error
            reply = {"error": f"{type(error).__name__}: {error}"}
        connection.sendall((json.dumps(reply) + "\n").encode())
    os._exit(0)


def main() -> None:
    connection = socket.socket(fileno=int(sys.argv[1]))
    try:
        preload()
        ready = {"ready": os.getpid(), "threads": threads()}
    except BaseException as error:
        ready = {"error": f"preload failed: {type(error).__name__}: {error}"}
    try:
        connection.sendall((json.dumps(ready) + "\n").encode())
    except OSError:  # the building process gave up waiting
        os._exit(1)
    if "error" in ready:
        os._exit(1)
    sys.argv = serve(connection)
    # Now a kernel, outside the zygote's frames: run as ``python -m ipykernel_launcher`` would,
    # ending quickly.
    from ipykernel import kernelapp

    code = 0
    try:
        kernelapp.launch_new_instance()
    except SystemExit as leaving:  # as Python would end: None is 0, a message is said and is 1
        code = 0 if leaving.code is None else leaving.code if isinstance(leaving.code, int) else 1
        if not isinstance(leaving.code, (int, type(None))):
            print(leaving.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - said on standard error, as Python would
        traceback.print_exc()
        code = 1
    end_quickly(code)


def end_quickly(code: int) -> None:
    """End as Python would, less the interpreter's teardown of every module: the atexit functions
    run (IPython's clears the notebook's namespace, which closes its files, and ends its history),
    the standard streams are flushed, and the kernel exits. Tearing down torch, dynamo and Inductor
    after a shutdown request took 1.8 CPU-seconds per kernel on the 2-core CI machine, and
    jupyter_client waited 2.7 s for that exit (its SIGTERM comes at 2.5 s): 3 s of every page of the
    book. Ended here: 0.5 s."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    main()

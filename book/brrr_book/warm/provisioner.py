"""The kernel provisioner ``brrr-warm``: book kernels forked from a warm zygote, or launched as
usual.

Registered under ``jupyter_client.kernel_provisioners`` (book/pyproject.toml) and named by the
kernelspec in ``jupyter_path/kernels/python3`` beside this module. The first launch starts the
zygote (zygote.py) with that launch's environment and folder; every launch whose command is
ipykernel's with the same Python and whose environment is the same (apart from Jupyter's per-session
``JPY_`` variables) is forked from it. Any other launch, and every launch after the zygote failed,
starts the normal way (LocalProvisioner's).

A forked kernel is the zygote's child, not ours: ``ForkedKernel`` stands in for its
``subprocess.Popen`` and reaches it through a pidfd, so LocalProvisioner's poll, wait, send_signal
(SIGINT interrupts, to the kernel's own process group), kill, terminate and cleanup work on it
unchanged."""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import signal
import socket
import subprocess
import threading
from pathlib import Path

from jupyter_client.provisioning import LocalProvisioner

ZYGOTE = Path(__file__).with_name("zygote.py")
READY_TIMEOUT_S = 300  # the zygote's imports: ~10 CPU-s, much longer on a loaded 2-core machine
NORMAL_LAUNCH_ARGUMENTS = {"env", "cwd", "kernel_id", "extra_arguments"}

log = logging.getLogger(__name__)


def same_environment(env: dict) -> dict:
    """The environment a zygote must share with a launch: all of it but Jupyter's per-session
    variables."""
    return {key: value for key, value in env.items() if not key.startswith("JPY_")}


class Zygote:
    """The building process's end of one zygote: start it, ask it to fork, reap what it forked."""

    def __init__(self, python: str, env: dict, cwd: str):
        self.environment = same_environment(env)
        self.python = python
        self.owner = (
            os.getpid()
        )  # a process forked from ours (a pool's worker) must not share the socket
        ours, theirs = socket.socketpair()
        self.lock = threading.Lock()
        self.process = subprocess.Popen(
            [python, str(ZYGOTE), str(theirs.fileno())],
            env=env,
            cwd=cwd,
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            # a Ctrl-C at the terminal reaches the build, which then closes the socket
            start_new_session=True,
        )
        theirs.close()
        self.connection = ours
        self.connection.settimeout(READY_TIMEOUT_S)
        self.reader = ours.makefile("r", encoding="utf-8")
        try:
            ready = self._read()
            if "ready" not in ready:
                raise RuntimeError(ready.get("error", ready))
        except (
            BaseException
        ):  # a failed import, or no answer in READY_TIMEOUT_S: no zygote left behind
            self.close()
            raise
        self.connection.settimeout(60)
        atexit.register(self.close)

    def _read(self) -> dict:
        line = self.reader.readline()
        if not line:
            raise RuntimeError("the zygote exited")
        return json.loads(line)

    def request(self, message: dict) -> dict:
        with self.lock:
            self.connection.sendall((json.dumps(message) + "\n").encode())
            return self._read()

    def fits(self, cmd: list, env: dict) -> bool:
        return (
            os.getpid() == self.owner
            and cmd[:1] == [self.python]
            and same_environment(env) == self.environment
        )

    def close(self) -> None:
        """Close the socket: the zygote exits, and with it any kernel it forked that is still
        running."""
        if os.getpid() != self.owner:
            return
        self.reader.close()  # the socket's file descriptor stays open while its file object is
        self.connection.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class ForkedKernel:
    """What LocalProvisioner needs of a ``subprocess.Popen``, for a kernel the zygote forked."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int, zygote: Zygote):
        self.pid = pid
        self.zygote = zygote
        self.pidfd = os.pidfd_open(pid)  # the zygote does not reap it unasked: this is our kernel
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self.pidfd], [], [], 0)[0]:
            self._reap()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self.pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(f"kernel {self.pid}", timeout)
            self._reap()
        return self.returncode

    def _reap(self) -> None:
        try:
            self.returncode = self.zygote.request({"reap": self.pid})["returncode"]
        except (OSError, RuntimeError, KeyError, ValueError):
            self.returncode = 1  # the zygote is gone; init reaped the kernel
        os.close(self.pidfd)

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            signal.pidfd_send_signal(self.pidfd, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


_zygote: Zygote | None = None
_zygote_failed = False


def fork_kernel(cmd: list, env: dict, cwd: str) -> ForkedKernel | None:
    """A kernel forked from this process's zygote (started on first use), or None: launch it
    normally."""
    global _zygote, _zygote_failed
    if _zygote_failed:
        return None
    try:
        if _zygote is None:
            _zygote = Zygote(cmd[0], env, cwd)
        if not _zygote.fits(cmd, env):
            log.warning(
                "brrr-warm: a command or environment unlike the zygote's; this kernel starts the "
                "normal way"
            )
            return None
        reply = _zygote.request({"launch": {"argv": cmd, "env": env, "cwd": cwd}})
    except Exception as error:
        log.warning("brrr-warm: no zygote (%s); kernels start the normal way", error)
        _zygote_failed = True
        return None
    if "pid" not in reply:
        log.warning("brrr-warm: %s; this kernel starts the normal way", reply.get("error", reply))
        return None
    return ForkedKernel(reply["pid"], _zygote)


class WarmProvisioner(LocalProvisioner):
    """LocalProvisioner, with each kernel forked from the warm zygote where it can be."""

    async def launch_kernel(self, cmd: list[str], **kwargs):
        env = {
            **(kwargs.get("env") or os.environ),
            "JPY_PARENT_PID": str(os.getpid()),
        }  # as launch_kernel sets
        cwd = str(kwargs.get("cwd") or Path.cwd())
        unusual = {
            key
            for key, value in kwargs.items()
            if key not in NORMAL_LAUNCH_ARGUMENTS and value is not None
        }
        forked = None if unusual else fork_kernel(cmd, env, cwd)
        if forked is None:
            return await super().launch_kernel(cmd, **kwargs)
        self.process = forked
        self.pid = self.pgid = forked.pid  # the child ran setsid before the zygote answered
        self.cwd = cwd
        return self.connection_info

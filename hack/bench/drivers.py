"""The schedulers under test, each as a child process the bench starts and stops: ip-scheduler
(:class:`Ours`: ``python -m ipscheduler run``, or ``extender``), the dev cluster's real
kube-scheduler (:class:`KubeScheduler`, client QPS/burst as given) and kube-scheduler
calling the ip-scheduler extender (:class:`KubeWithExtender`, with the extender verbs of
:data:`ipscheduler.cmd.extender.VERBS`); and py-spy attached to one of them
(:func:`start_profiler`).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import devcluster
from ipscheduler.cmd.extender import VERBS
from ipscheduler.cmd.flags import DEFAULT_SCHEDULER_NAME
from ipscheduler.underlayip.publisher import RESOURCE

OURS = DEFAULT_SCHEDULER_NAME
"""The ``schedulerName`` ip-scheduler serves (its ``--scheduler-name`` default), of the pods
the bench makes for it."""
KUBE_SCHEDULER_NAME = "default-scheduler"
"""kube-scheduler's profile, of the pods the bench makes for it (and the extender)."""


class SchedulerProcess:
    """A scheduler under test as a child process: :meth:`start`, :attr:`pid`, :meth:`stop`."""

    def __init__(self) -> None:
        self.started_at = 0.0
        """``time.monotonic()`` when the process was started."""
        self.pid: int | None = None
        """The running process, None before :meth:`start` and after :meth:`stop`."""

    async def start(self, wait_ready: bool = True) -> int:
        """Start the process (``wait_ready``: return once it schedules); its pid."""
        raise NotImplementedError

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL after 30 s; waits for the exit."""
        raise NotImplementedError


class Ours(SchedulerProcess):
    """``python -m ipscheduler run`` as a child process, logging to a file."""

    def __init__(
        self, python: str, kubeconfig: str, log_path: Path, extra: list[str], command: str = "run"
    ) -> None:
        super().__init__()
        self.cmd = [
            python,
            "-m",
            "ipscheduler",
            command,
            "--kubeconfig",
            kubeconfig,
            "--health-addr",
            "",
            "--secure-port",
            "0",  # several schedulers at once: none on 10259
            "--leader-elect=false",  # the failover phase's --leader-elect (later) wins
            *extra,
        ]
        self.log_path = log_path
        self.proc: asyncio.subprocess.Process | None = None
        self._offset = 0

    async def start(self, wait_ready: bool = True) -> int:
        """Start; ``wait_ready``: wait for the start-up reconcile's log line (120 s at most)."""
        self._offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            self.started_at = time.monotonic()
            self.proc = await asyncio.create_subprocess_exec(*self.cmd, stdout=fd, stderr=subprocess.STDOUT)
        finally:
            os.close(fd)
        self.pid = self.proc.pid
        if wait_ready:
            deadline = time.monotonic() + 120
            while b"start-up reconcile" not in self.log():
                if time.monotonic() > deadline or self.proc.returncode is not None:
                    raise SystemExit(f"bench: ip-scheduler did not start; see {self.log_path}")
                await asyncio.sleep(0.2)
        return self.proc.pid

    def log(self) -> bytes:
        """What this process logged since its last start."""
        with open(self.log_path, "rb") as fh:
            fh.seek(self._offset)
            return fh.read()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        self.pid = None

    async def kill(self) -> None:
        """SIGKILL (a crashed node or container), waiting for the exit."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        self.pid = None


class KubeScheduler(SchedulerProcess):
    """The real kube-scheduler of the dev cluster's release, client QPS/burst as given."""

    def __init__(self, cluster: devcluster.Cluster, qps: int, burst: int) -> None:
        super().__init__()
        self.cluster, self.qps, self.burst = cluster, qps, burst
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self, wait_ready: bool = True) -> int:
        """Start; ``wait_ready``: give it 5 s to list and watch."""
        self.started_at = time.monotonic()
        self.proc = await asyncio.to_thread(
            self.cluster.start_kube_scheduler, f"kube-scheduler-{self.qps}", self.qps, self.burst
        )
        self.pid = self.proc.pid
        if wait_ready:
            await asyncio.sleep(5)
        return self.proc.pid

    async def stop(self) -> None:
        await stop_popen(self.proc)
        self.pid = None


async def stop_popen(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM ``proc`` if it runs, SIGKILL after 30 s; waits for the exit."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            await asyncio.to_thread(proc.wait, 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            await asyncio.to_thread(proc.wait)


class KubeWithExtender(SchedulerProcess):
    """kube-scheduler (qps 1000) whose configuration calls ``ipscheduler extender`` (the
    extender's process is the one measured: :attr:`pid`)."""

    def __init__(self, cluster: devcluster.Cluster, extender: Ours, port: int) -> None:
        super().__init__()
        self.cluster, self.extender, self.port = cluster, extender, port
        self.kube: subprocess.Popen[bytes] | None = None

    async def start(self, wait_ready: bool = True) -> int:
        """The extender (until it serves), then kube-scheduler (given 5 s to list and watch)."""
        pid = await self.extender.start(wait_ready=True)
        self.started_at = self.extender.started_at
        deadline = time.monotonic() + 60
        while b"serving the extender verbs" not in self.extender.log() and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        extenders = [
            {
                "urlPrefix": f"http://127.0.0.1:{self.port}",
                **{f"{verb}Verb": verb for verb in VERBS},
                "weight": 1,
                "nodeCacheCapable": True,
                "managedResources": [{"name": RESOURCE, "ignoredByScheduler": False}],
                "httpTimeout": "5s",
            }
        ]
        self.kube = await asyncio.to_thread(
            self.cluster.start_kube_scheduler,
            "kube-scheduler-extender",
            1000,
            2000,
            KUBE_SCHEDULER_NAME,
            extenders,
        )
        if wait_ready:
            await asyncio.sleep(5)
        self.pid = pid
        return pid

    async def stop(self) -> None:
        await stop_popen(self.kube)
        await self.extender.stop()
        self.pid = None


async def start_profiler(path: str | None, pid: int) -> asyncio.subprocess.Process | None:
    """py-spy sampling ``pid`` into ``path`` (collapsed stacks) for the phase, if asked for."""
    if not path:
        return None
    spy = Path(sys.executable).with_name("py-spy")
    return await asyncio.create_subprocess_exec(
        str(spy),
        "record",
        "--pid",
        str(pid),
        "--format",
        "raw",
        "--output",
        path,
        "--rate",
        "200",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def stop_profiler(proc: asyncio.subprocess.Process | None, path: str | None) -> None:
    """Stop py-spy (:func:`start_profiler`; None: nothing to do) so that it writes ``path``."""
    if proc is None:
        return
    proc.send_signal(2)  # SIGINT: py-spy writes its output and exits
    await proc.wait()
    print(f"profile: {path}", file=sys.stderr)

"""The pinned control-plane binaries and CNI tools: built from source once, then located.

The dev cluster (``hack/devcluster.py``) runs what this module provides:

- kube-apiserver, kube-controller-manager and kube-scheduler of one pinned
  Kubernetes release, built with Go from ``k8s.io/kubernetes`` (15-25 minutes
  the first time), plus etcd and kwok, into ``~/.cache/ipscheduler/k8s-<version>/bin``
  (``$XDG_CACHE_HOME`` respected; ``IPSCHEDULER_BIN_DIR`` overrides the folder):
  :func:`ensure_binaries`;
- ``cnitool`` and the reference CNI plugins (bridge, loopback, static,
  host-local) into ``~/.cache/ipscheduler/cni-<version>-plugins-<version>``:
  :func:`ensure_cni_tools`;
- ``helm`` and ``promtool`` (the chart and the alerting-rule tests) into
  ``~/.cache/ipscheduler/tools-helm-<version>`` and ``tools-promtool-<version>``:
  :func:`ensure_helm`, :func:`ensure_promtool`; the ``prometheus`` server of the same
  version (the NetworkTraffic e2e test) into ``tools-prometheus-<version>``:
  :func:`ensure_prometheus`.

A cached binary is checked once (``--version``) and remembered by size and
mtime; one that does not run is deleted and rebuilt. Concurrent builds
serialize on a file lock. ``python hack/devcluster.py binaries`` runs the first
two and prints the two folders; ``python hack/binaries.py tools`` runs the last
three and prints the three executables (``helm``, ``promtool`` or ``prometheus`` instead
of ``tools``: that one only); ``make binaries`` runs both commands.

It also holds what both halves share: :class:`DevclusterError` and :func:`log`.
Standard library only (plus ``go`` on PATH to build); it never imports the
operator, nor ``devcluster``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

K8S_VERSION = "v1.34.4"
"""The one pinned Kubernetes release (kube-apiserver, -controller-manager, -scheduler)."""
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.7.0"

CNI_VERSION = "v1.3.0"
"""containernetworking/cni: cnitool (drives CNI plugins the way a container runtime does)."""
CNI_PLUGINS_VERSION = "v1.9.1"
"""containernetworking/plugins: the reference plugins the CNI tests and the demo run."""
CNI_PLUGINS = ("main/bridge", "main/loopback", "ipam/static", "ipam/host-local")

HELM_VERSION = "v3.22.0"
"""helm (renders and lints deploy/chart/ipscheduler)."""
HELM_K8S_MINOR = "37"
"""Kubernetes 1.<this> is what helm assumes offline: helm v3.22.0 builds against k8s.io/client-go v0.37."""
PROMTOOL_VERSION = "v0.316.0"
"""promtool of Prometheus (checks and unit-tests the alerting rules)."""
HELM_PACKAGE = "helm.sh/helm/v3/cmd/helm"
PROMTOOL_PACKAGE = "github.com/prometheus/prometheus/cmd/promtool"
PROMETHEUS_PACKAGE = "github.com/prometheus/prometheus/cmd/prometheus"
"""Prometheus itself, at PROMTOOL_VERSION (the NetworkTraffic e2e test's metrics source)."""

K8S_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
ALL_BINARIES = (*K8S_BINARIES, "etcd", "kwok")


class DevclusterError(RuntimeError):
    """A failure with a one-line explanation for the user."""


def log(msg: str) -> None:
    print(f"[devcluster] {msg}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/ipscheduler/k8s-<version>`` (default ``~/.cache``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ipscheduler" / f"k8s-{K8S_VERSION}"


def bin_dir() -> Path:
    override = os.environ.get("IPSCHEDULER_BIN_DIR")
    return Path(override) if override else cache_dir() / "bin"


def missing_binaries(bindir: Path) -> list[str]:
    """Binaries absent from ``bindir``, or present but not runnable (see :func:`verify_binaries`)."""
    absent = [b for b in ALL_BINARIES if not os.access(bindir / b, os.X_OK)]
    present = [b for b in ALL_BINARIES if b not in absent]
    return absent + verify_binaries(bindir, present)


def _stamp(path: Path) -> str:
    st = path.stat()
    return f"{st.st_size}:{st.st_mtime_ns}"


def verify_binaries(bindir: Path, names: list[str]) -> list[str]:
    """Names of binaries that fail ``<binary> --version`` (a truncated or foreign file).

    A binary that passed once is remembered in ``bindir/.verified`` by size and
    mtime, so later calls cost a stat each. A bad binary is deleted so that the
    next build replaces it.
    """
    record = bindir / ".verified"
    try:
        known: dict[str, str] = json.loads(record.read_text())
    except (OSError, ValueError):
        known = {}
    bad, changed = [], False
    for name in names:
        path = bindir / name
        stamp = _stamp(path)
        if known.get(name) == stamp:
            continue
        try:
            ok = (
                subprocess.run(
                    [str(path), "--version"], capture_output=True, timeout=60, check=False
                ).returncode
                == 0
            )
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            known[name], changed = stamp, True
        else:
            log(f"{path} does not run ('--version' failed); it will be rebuilt")
            with contextlib.suppress(OSError):
                path.unlink()
            bad.append(name)
    if changed:
        with contextlib.suppress(OSError):
            record.write_text(json.dumps(known))
    return bad


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"
    env["GOTOOLCHAIN"] = "local"
    env["GOFLAGS"] = (env.get("GOFLAGS", "") + " -mod=mod").strip()
    return env


def _run_logged(cmd: list[str], cwd: Path, logfile: Path, what: str) -> None:
    """Run ``cmd``, output to ``logfile``, print a progress line every 30 s."""
    log(f"{what}: {' '.join(cmd[:4])} ... (log: {logfile})")
    start = time.monotonic()
    with open(logfile, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=_go_env(), stdout=out, stderr=subprocess.STDOUT)
        while True:
            try:
                rc = proc.wait(timeout=30)
                break
            except subprocess.TimeoutExpired:
                lines = len(logfile.read_text(errors="replace").splitlines())
                log(f"{what}: still building, {time.monotonic() - start:.0f}s, {lines} packages so far")
    if rc != 0:
        tail = "".join(logfile.read_text(errors="replace").splitlines(True)[-15:])
        raise DevclusterError(f"{what} failed (exit {rc}); last lines of {logfile}:\n{tail}")
    log(f"{what}: done in {time.monotonic() - start:.0f}s")


def _write_wrapper(path: Path, module: str, requires: dict[str, str], replaces: dict[str, str]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    lines = [f"module {module}", "", "go 1.24.0", "", "require ("]
    lines += [f"\t{m} {v}" for m, v in requires.items()]
    lines.append(")")
    if replaces:
        lines += ["", "replace ("]
        lines += [f"\t{m} => {m} {v}" for m, v in replaces.items()]
        lines.append(")")
    (path / "go.mod").write_text("\n".join(lines) + "\n")


def _build_kubernetes(go: str, build: Path, bindir: Path) -> None:
    out = subprocess.run(
        [go, "mod", "download", "-json", f"k8s.io/kubernetes@{K8S_VERSION}"],
        env=_go_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise DevclusterError(f"cannot download k8s.io/kubernetes@{K8S_VERSION}: {out.stderr.strip()}")
    gomod = Path(json.loads(out.stdout)["GoMod"]).read_text()
    staging = re.findall(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", gomod, re.M)
    if not staging:
        raise DevclusterError("no staging replaces found in k8s.io/kubernetes go.mod")
    staging_version = "v0." + K8S_VERSION.split(".", 1)[1]
    wrapper = build / "kubernetes"
    _write_wrapper(
        wrapper,
        "ipscheduler.local/k8s-build",
        {"k8s.io/kubernetes": K8S_VERSION},
        {m: staging_version for m in staging},
    )
    major, minor = K8S_VERSION.lstrip("v").split(".")[:2]
    date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    xs = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        xs += [
            f"-X {pkg}.gitVersion={K8S_VERSION}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate={date}",
        ]
    tmp_out = build / "k8s-out"
    tmp_out.mkdir(parents=True, exist_ok=True)
    cmd = [go, "build", "-v", "-trimpath", "-ldflags", "-s -w " + " ".join(xs), "-o", str(tmp_out) + "/"]
    cmd += [f"k8s.io/kubernetes/cmd/{b}" for b in K8S_BINARIES]
    _run_logged(cmd, wrapper, build / "kubernetes.log", f"building {', '.join(K8S_BINARIES)} {K8S_VERSION}")
    for b in K8S_BINARIES:
        shutil.move(str(tmp_out / b), bindir / b)


def _build_etcd(go: str, build: Path, bindir: Path) -> None:
    wrapper = build / "etcd"
    _write_wrapper(wrapper, "ipscheduler.local/etcd-build", {"go.etcd.io/etcd/server/v3": ETCD_VERSION}, {})
    cmd = [
        go,
        "build",
        "-v",
        "-trimpath",
        "-ldflags",
        "-s -w",
        "-o",
        str(build / "etcd.bin"),
        "go.etcd.io/etcd/server/v3",
    ]
    _run_logged(cmd, wrapper, build / "etcd.log", f"building etcd {ETCD_VERSION}")
    shutil.move(str(build / "etcd.bin"), bindir / "etcd")


def _build_kwok(go: str, build: Path, bindir: Path) -> None:
    gobin = build / "kwok-bin"
    gobin.mkdir(parents=True, exist_ok=True)
    env_cmd = [
        go,
        "install",
        "-v",
        "-trimpath",
        "-ldflags",
        "-s -w",
        f"sigs.k8s.io/kwok/cmd/kwok@{KWOK_VERSION}",
    ]
    os.environ["GOBIN"] = str(gobin)
    try:
        _run_logged(env_cmd, build, build / "kwok.log", f"installing kwok {KWOK_VERSION}")
    finally:
        os.environ.pop("GOBIN", None)
    shutil.move(str(gobin / "kwok"), bindir / "kwok")


def ensure_binaries() -> Path:
    """Return the folder holding all binaries, building what is missing.

    Raises DevclusterError with a one-line reason (e.g. no Go toolchain).
    A second call with everything present returns at once.
    """
    bindir = bin_dir()
    if not missing_binaries(bindir):
        return bindir
    go = shutil.which("go")
    if go is None:
        raise DevclusterError(
            f"missing {', '.join(missing_binaries(bindir))} in {bindir} and no Go toolchain on PATH "
            "to build them (install Go >= 1.24)"
        )
    with file_lock(cache_dir() / ".build.lock"):
        missing = missing_binaries(bindir)
        if not missing:
            return bindir
        bindir.mkdir(parents=True, exist_ok=True)
        build = cache_dir() / "build"
        build.mkdir(parents=True, exist_ok=True)
        log(f"building {', '.join(missing)} into {bindir}; the first build takes 15-25 minutes")
        if "etcd" in missing:
            _build_etcd(go, build, bindir)
        if "kwok" in missing:
            _build_kwok(go, build, bindir)
        if any(b in missing for b in K8S_BINARIES):
            _build_kubernetes(go, build, bindir)
    still = missing_binaries(bindir)
    if still:
        raise DevclusterError(f"build finished but {', '.join(still)} missing in {bindir}")
    return bindir


def _go_install_into(go: str, folder: Path, names: list[str], pkgs: list[tuple[str, str]]) -> None:
    """``go install`` each ``(package@version, extra ldflags)`` into ``folder``, atomically.

    Static binaries (CGO_ENABLED=0, the local toolchain only) go to a staging
    folder first, renamed to ``folder`` once all of them built; a file lock next
    to ``folder`` serializes concurrent callers, and one that waited finds the
    work done. Raises DevclusterError with the tail of the failing install's output.
    """
    with file_lock(folder.with_name(f".{folder.name}.lock")):
        if all(os.access(folder / n, os.X_OK) for n in names):
            return
        staging = folder.with_name(folder.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        env = {**_go_env(), "GOBIN": str(staging)}
        for pkg, ldflags in pkgs:
            proc = subprocess.run(
                [go, "install", "-trimpath", "-ldflags", f"-s -w {ldflags}".strip(), pkg],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                raise DevclusterError(f"go install {pkg} failed: {proc.stderr.strip()[-800:]}")
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)


def cni_tools_dir() -> Path:
    """``$XDG_CACHE_HOME/ipscheduler/cni-<cni version>-plugins-<plugins version>``."""
    return cache_dir().parent / f"cni-{CNI_VERSION}-plugins-{CNI_PLUGINS_VERSION}"


def ensure_cni_tools() -> Path:
    """Return the folder holding ``cnitool`` and the reference CNI plugins (``bridge``,
    ``loopback``, ``static``, ``host-local``), installing what is missing with
    ``go install`` (static binaries, CGO_ENABLED=0; about a minute the first time).

    Raises DevclusterError with a one-line reason (no Go toolchain, a failed install)."""
    tools = cni_tools_dir()
    names = ["cnitool", *(p.rsplit("/", 1)[1] for p in CNI_PLUGINS)]
    if all(os.access(tools / n, os.X_OK) for n in names):
        return tools
    go = shutil.which("go")
    if go is None:
        raise DevclusterError(f"missing CNI tools in {tools} and no Go toolchain on PATH to install them")
    pkgs = [f"github.com/containernetworking/cni/cnitool@{CNI_VERSION}"]
    plugins = "github.com/containernetworking/plugins/plugins"
    pkgs += [f"{plugins}/{p}@{CNI_PLUGINS_VERSION}" for p in CNI_PLUGINS]
    _go_install_into(go, tools, names, [(pkg, "") for pkg in pkgs])
    log(f"CNI tools ({', '.join(names)}) in {tools}")
    return tools


def tool_dir(name: str, version: str) -> Path:
    """``$XDG_CACHE_HOME/ipscheduler/tools-<name>-<version>``: one folder per tool and version."""
    return cache_dir().parent / f"tools-{name}-{version}"


def _ensure_go_tool(name: str, package: str, version: str, ldflags: str = "") -> Path:
    """The cached executable ``name`` built from ``package@version``, installed if missing."""
    folder = tool_dir(name, version)
    exe = folder / name
    if os.access(exe, os.X_OK):
        return exe
    go = shutil.which("go")
    if go is None:
        raise DevclusterError(f"missing {name} {version} in {folder} and no Go toolchain on PATH to build it")
    log(f"building {name} {version} into {folder} (a few minutes the first time)")
    _go_install_into(go, folder, [name], [(f"{package}@{version}", ldflags)])
    return exe


def ensure_helm() -> Path:
    """Return the path of ``helm`` ``HELM_VERSION``, building it with ``go install`` if missing
    (about 3 minutes on 2 cores from an empty module cache).

    Raises DevclusterError with a one-line reason (no Go toolchain, a failed install)."""
    stamps = [f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}"]
    # The Kubernetes version `helm template` and `helm lint` assume without a cluster, as
    # helm's Makefile stamps it (from its k8s.io/client-go); unstamped it is v1.20.
    for pkg in ("pkg/chartutil", "pkg/lint/rules"):
        stamps += [
            f"-X helm.sh/helm/v3/{pkg}.k8sVersionMajor=1",
            f"-X helm.sh/helm/v3/{pkg}.k8sVersionMinor={HELM_K8S_MINOR}",
        ]
    return _ensure_go_tool("helm", HELM_PACKAGE, HELM_VERSION, " ".join(stamps))


def ensure_promtool() -> Path:
    """Return the path of Prometheus' ``promtool`` ``PROMTOOL_VERSION``, building it with
    ``go install`` if missing (a few minutes the first time).

    Raises DevclusterError with a one-line reason (no Go toolchain, a failed install)."""
    return _ensure_go_tool("promtool", PROMTOOL_PACKAGE, PROMTOOL_VERSION)


def ensure_prometheus() -> Path:
    """Return the path of the ``prometheus`` server at ``PROMTOOL_VERSION``, building it with
    ``go install`` if missing (without the web UI's built-in assets: the HTTP API is all the
    tests use; several minutes on 2 cores the first time).

    Raises DevclusterError with a one-line reason (no Go toolchain, a failed install)."""
    return _ensure_go_tool("prometheus", PROMETHEUS_PACKAGE, PROMTOOL_VERSION)


def main(argv: list[str] | None = None) -> int:
    """``python hack/binaries.py tools|helm|promtool|prometheus``: ensure the tools, or one, and
    print the path of each (``$(python hack/binaries.py helm) lint ...``)."""
    args = sys.argv[1:] if argv is None else argv
    wanted = {
        "tools": (ensure_helm, ensure_promtool, ensure_prometheus),
        "helm": (ensure_helm,),
        "promtool": (ensure_promtool,),
        "prometheus": (ensure_prometheus,),
    }
    if len(args) != 1 or args[0] not in wanted:
        print("usage: python hack/binaries.py tools|helm|promtool|prometheus", file=sys.stderr)
        return 2
    try:
        for ensure in wanted[args[0]]:
            print(ensure())
    except DevclusterError as err:
        log(f"error: {err}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

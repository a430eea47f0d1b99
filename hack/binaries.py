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
- ``helm``, ``helm-docs`` and ``promtool`` (the chart, its README and the alerting-rule
  tests) into ``~/.cache/ipscheduler/tools-helm-<version>``, ``tools-helm-docs-<version>``
  and ``tools-promtool-<version>``: :func:`ensure_helm`, :func:`ensure_helm_docs`,
  :func:`ensure_promtool`; the ``prometheus`` server of the same
  version (the NetworkTraffic e2e test) into ``tools-prometheus-<version>``:
  :func:`ensure_prometheus`;
- a real node's binaries (the kubelet of the same release, containerd, its runc shim and
  ``ctr``, runc, crictl, and ``pause`` from Kubernetes' ``pause.c``) into
  ``~/.cache/ipscheduler/node-<k8s>-containerd-<v>-runc-<v>``: :func:`ensure_node_binaries`;
  and the two images a real node runs, as OCI archives (no registry is reachable), into
  ``images-<k8s>``: :func:`ensure_node_images`; Multus' thin plugin ``multus`` (a Multus
  real node's CNI) into ``tools-multus-<version>``: :func:`ensure_multus`.

A cached binary is checked once (``--version``) and remembered by size and
mtime; one that does not run is deleted and rebuilt. Concurrent builds
serialize on a file lock. ``python hack/devcluster.py binaries`` runs the first
two and prints the two folders; ``python hack/binaries.py tools`` runs the last
four and prints the four executables (``helm``, ``helm-docs``, ``promtool`` or ``prometheus``
instead of ``tools``: that one only), ``python hack/binaries.py node`` the real node's (and
``multus``; ``multus`` alone: that one); ``make binaries`` runs them all (``node`` as root only).

It also holds what both halves share: :class:`DevclusterError` and :func:`log`.
Standard library only (plus ``go`` on PATH to build); it never imports the
operator, nor ``devcluster``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
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
HELM_DOCS_VERSION = "v1.14.2"
"""helm-docs (writes deploy/chart/ipscheduler/README.md from the values' ``# --`` comments)."""
HELM_DOCS_PACKAGE = "github.com/norwoodj/helm-docs/cmd/helm-docs"
PROMETHEUS_PACKAGE = "github.com/prometheus/prometheus/cmd/prometheus"
"""Prometheus itself, at PROMTOOL_VERSION (the NetworkTraffic e2e test's metrics source)."""
MULTUS_VERSION = "v4.2.3"
"""Multus CNI's thin plugin (``multus``: a real node's meta-plugin in the Multus e2e test)."""
MULTUS_MODULE = "gopkg.in/k8snetworkplumbingwg/multus-cni.v4"
"""Multus' Go module as the module proxy serves it (its ``github.com/.../multus-cni/v4`` path is not)."""
MULTUS_PACKAGE = f"{MULTUS_MODULE}/cmd/multus"

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
    mtime, so later calls cost a stat each (the record is replaced whole, never
    read half-written). A bad binary is deleted so that the next build replaces it.
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
    if changed:  # replaced whole: parallel test workers read it at the same time
        tmp = record.with_name(f"{record.name}.{os.getpid()}")
        with contextlib.suppress(OSError):
            tmp.write_text(json.dumps(known))
            tmp.replace(record)
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


def _kubernetes_source(go: str) -> Path:
    """The folder of the ``k8s.io/kubernetes@K8S_VERSION`` module (downloaded if absent)."""
    return Path(_download_kubernetes(go)["Dir"])


def _download_kubernetes(go: str) -> dict[str, str]:
    out = subprocess.run(
        [go, "mod", "download", "-json", f"k8s.io/kubernetes@{K8S_VERSION}"],
        env=_go_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise DevclusterError(f"cannot download k8s.io/kubernetes@{K8S_VERSION}: {out.stderr.strip()}")
    return dict(json.loads(out.stdout))


def _build_kubernetes(go: str, build: Path, bindir: Path, names: tuple[str, ...] = K8S_BINARIES) -> None:
    """Build ``names`` (commands under ``k8s.io/kubernetes/cmd/``) at K8S_VERSION into ``bindir``."""
    gomod = Path(_download_kubernetes(go)["GoMod"]).read_text()
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
    cmd += [f"k8s.io/kubernetes/cmd/{b}" for b in names]
    _run_logged(cmd, wrapper, build / "kubernetes.log", f"building {', '.join(names)} {K8S_VERSION}")
    for b in names:
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


def _go_install_into(
    go: str,
    folder: Path,
    names: list[str],
    pkgs: list[tuple[str, str]],
    cgo: frozenset[str] = frozenset(),
    tags: dict[str, str] | None = None,
) -> None:
    """``go install`` each ``(package@version, extra ldflags)`` into ``folder``, atomically.

    Static binaries (CGO_ENABLED=0, the local toolchain only) go to a staging
    folder first, renamed to ``folder`` once all of them built; a file lock next
    to ``folder`` serializes concurrent callers, and one that waited finds the
    work done. A package whose path is in ``cgo`` is built with CGO_ENABLED=1 (runc's nsenter is C);
    ``tags`` maps a package path to its build tags.
    Raises DevclusterError with the tail of the failing install's output.
    """
    with file_lock(folder.with_name(f".{folder.name}.lock")):
        if all(os.access(folder / n, os.X_OK) for n in names):
            return
        staging = folder.with_name(folder.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        env = {**_go_env(), "GOBIN": str(staging)}
        for pkg, ldflags in pkgs:
            path = pkg.split("@")[0]
            tag_args = ["-tags", tags[path]] if tags and path in tags else []
            started = time.monotonic()
            proc = subprocess.Popen(
                [go, "install", "-trimpath", *tag_args, "-ldflags", f"-s -w {ldflags}".strip(), pkg],
                env={**env, "CGO_ENABLED": "1"} if path in cgo else env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            while True:  # a line every 30 s: go install says nothing while it builds
                try:
                    output = proc.communicate(timeout=30)[0]
                    break
                except subprocess.TimeoutExpired:
                    log(f"go install {pkg}: still building, {time.monotonic() - started:.0f}s")
            if proc.returncode != 0:
                raise DevclusterError(f"go install {pkg} failed: {output.strip()[-800:]}")
            log(f"go install {pkg}: done in {time.monotonic() - started:.0f}s")
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


def ensure_helm_docs() -> Path:
    """Return the path of ``helm-docs`` ``HELM_DOCS_VERSION``, building it with ``go install``
    if missing (about a minute the first time).

    Raises DevclusterError with a one-line reason (no Go toolchain, a failed install)."""
    return _ensure_go_tool("helm-docs", HELM_DOCS_PACKAGE, HELM_DOCS_VERSION)


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


def ensure_multus() -> Path:
    """Return the path of Multus' thin plugin ``multus`` ``MULTUS_VERSION`` (``cmd/multus`` of
    :data:`MULTUS_MODULE`), building it if missing into ``tools-multus-<version>``: static, its
    version stamped as Multus' ``hack/build-go.sh`` does (``multus -version``), about a minute
    the first time. ``go build`` in a wrapper module that requires Multus' module at the pinned
    version, as etcd is built: ``go install module@version`` asks the proxy for the module's
    version list (its deprecation notice), which the proxy does not serve for this module.

    Raises DevclusterError with a one-line reason (no Go toolchain) or the failed build's tail."""
    folder = tool_dir("multus", MULTUS_VERSION)
    exe = folder / "multus"
    if os.access(exe, os.X_OK):
        return exe
    go = shutil.which("go")
    if go is None:
        raise DevclusterError(
            f"missing multus {MULTUS_VERSION} in {folder} and no Go toolchain on PATH to build it"
        )
    with file_lock(folder.with_name(f".{folder.name}.lock")):
        if os.access(exe, os.X_OK):
            return exe
        staging = folder.with_name(folder.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        wrapper = staging / "module"
        _write_wrapper(wrapper, "ipscheduler.local/multus-build", {MULTUS_MODULE: MULTUS_VERSION}, {})
        pkg = f"{MULTUS_MODULE}/pkg/multus"
        stamps = " ".join(
            f"-X {pkg}.{var}={value}"
            for var, value in (
                ("version", MULTUS_VERSION),
                ("gitTreeState", "clean"),
                ("releaseStatus", ",released"),
            )
        )
        stamps = f"-s -w {stamps}"
        out = staging / "bin"
        cmd = [go, "build", "-trimpath", "-ldflags", stamps, "-o", str(out / "multus"), MULTUS_PACKAGE]
        _run_logged(cmd, wrapper, staging / "build.log", f"building multus {MULTUS_VERSION}")
        shutil.rmtree(folder, ignore_errors=True)
        out.rename(folder)
        shutil.rmtree(staging, ignore_errors=True)
    return exe


# --------------------------------------------------------------------------
# real nodes: kubelet, containerd, runc, crictl, and the images they run
# --------------------------------------------------------------------------

CONTAINERD_VERSION = "v2.4.2"
"""containerd (with its runc shim and ``ctr``), the container runtime of a real dev node."""
RUNC_VERSION = "v1.5.2"
"""runc, the OCI runtime containerd's shim runs (built with cgo: its nsenter is C)."""
CRICTL_VERSION = "v1.34.0"
"""crictl of cri-tools (the kubelet's view of a runtime: ``down`` removes pod sandboxes with it)."""
NODE_BINARIES = ("kubelet", "containerd", "containerd-shim-runc-v2", "ctr", "runc", "crictl", "pause")
"""What a real node runs; ``pause`` is Kubernetes' own ``build/pause/linux/pause.c`` (static)."""
CONTAINERD_PACKAGE = "github.com/containerd/containerd/v2"
RUNC_PACKAGE = "github.com/opencontainers/runc"
CRICTL_PACKAGE = "sigs.k8s.io/cri-tools/cmd/crictl"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
"""The sandbox image's name (the tests' pod manifests run it as a container too)."""
BUSYBOX_PACKAGE = "busybox-static"
"""Debian's static busybox: the workload image's only binary (sh, nc, ping, ip, httpd...)."""
BUSYBOX_IMAGE = "docker.io/library/busybox:1.35"
"""The workload image's name (Debian 12's busybox-static is 1.35.0)."""


def node_bin_dir() -> Path:
    """``$XDG_CACHE_HOME/ipscheduler/node-<k8s>-containerd-<v>-runc-<v>``: one folder per set."""
    return cache_dir().parent / f"node-{K8S_VERSION}-containerd-{CONTAINERD_VERSION}-runc-{RUNC_VERSION}"


def _build_pause(go: str, folder: Path) -> None:
    """Compile Kubernetes' pause (``build/pause/linux/pause.c`` of the pinned release) statically."""
    source = _kubernetes_source(go) / "build" / "pause" / "linux" / "pause.c"
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise DevclusterError("missing a C compiler (cc or gcc) to build the pause binary from pause.c")
    proc = subprocess.run(
        [
            cc,
            "-Os",
            "-Wall",
            "-Werror",
            "-static",
            f"-DVERSION=v3.10-{K8S_VERSION}",
            "-o",
            str(folder / "pause"),
            str(source),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise DevclusterError(f"building pause from {source} failed: {proc.stderr.strip()[-600:]}")


def apt_install(package: str, provides: str | Path, why: str) -> Path:
    """The path of ``provides`` (a command looked up on the PATH, or a file's path), installing
    Debian's ``package`` with ``apt-get install`` (the package lists refreshed once if that
    fails) when it is absent and this runs as root; ``why`` says what needs it, in the log
    line and the error. Raises DevclusterError when it is absent and cannot be installed: not
    root, no apt-get, or apt-get failing twice (the end of its stderr in the message)."""

    def found() -> Path | None:
        if isinstance(provides, Path):
            return provides if provides.exists() else None
        command = shutil.which(provides)
        return Path(command) if command else None

    path = found()
    if path is not None:
        return path
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise DevclusterError(f"missing {provides} ({why}): apt-get install {package}")
    log(f"installing {package} ({why}) with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for attempt in range(2):
        proc = subprocess.run(
            ["apt-get", "install", "-y", "-qq", package],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        path = found()
        if proc.returncode == 0 and path is not None:
            return path
        if attempt == 0:
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, check=False)
    raise DevclusterError(f"apt-get install {package} failed: {proc.stderr.strip()[-400:]}")


def ensure_node_binaries() -> Path:
    """Return the folder holding a real node's binaries (:data:`NODE_BINARIES`), building what
    is missing: the kubelet from ``k8s.io/kubernetes`` at K8S_VERSION (the control plane's
    wrapper module; several minutes the first time), containerd, its runc shim and ``ctr`` at
    CONTAINERD_VERSION and crictl at CRICTL_VERSION (static, ``go install``), runc at
    RUNC_VERSION (``go install`` with cgo and the ``seccomp`` build tag, as runc's releases:
    gcc and Debian's ``libseccomp-dev``, which this installs with apt-get as root if missing;
    containerd gives every pod sandbox the RuntimeDefault profile), and pause compiled from the
    release's ``pause.c``.

    Raises DevclusterError naming what is missing (Go, a C compiler, libseccomp-dev) or the
    failed build."""
    folder = node_bin_dir()
    if all(os.access(folder / n, os.X_OK) for n in NODE_BINARIES):
        return folder
    go = shutil.which("go")
    if go is None:
        raise DevclusterError(
            f"missing the real-node binaries in {folder} and no Go toolchain on PATH to build them"
        )
    with file_lock(cache_dir() / ".build.lock"):
        if all(os.access(folder / n, os.X_OK) for n in NODE_BINARIES):
            return folder
        log(f"building the real-node binaries into {folder} (10-15 minutes the first time)")
        staging = folder.with_name(folder.name + ".build")
        if not os.access(staging / "kubelet", os.X_OK):
            build = cache_dir() / "build"
            build.mkdir(parents=True, exist_ok=True)
            staging.mkdir(parents=True, exist_ok=True)
            _build_kubernetes(go, build, staging, ("kubelet",))
        apt_install(
            "libseccomp-dev", Path("/usr/include/seccomp.h"), "runc's seccomp support links libseccomp"
        )
        tools = folder.with_name(folder.name + ".tools")
        containerd = CONTAINERD_VERSION.lstrip("v")
        stamp = f"-X {CONTAINERD_PACKAGE}/version.Version={containerd}"
        _go_install_into(
            go,
            tools,
            ["containerd", "containerd-shim-runc-v2", "ctr", "runc", "crictl"],
            [
                (f"{CONTAINERD_PACKAGE}/cmd/containerd@{CONTAINERD_VERSION}", stamp),
                (f"{CONTAINERD_PACKAGE}/cmd/containerd-shim-runc-v2@{CONTAINERD_VERSION}", stamp),
                (f"{CONTAINERD_PACKAGE}/cmd/ctr@{CONTAINERD_VERSION}", stamp),
                (f"{RUNC_PACKAGE}@{RUNC_VERSION}", f"-X main.version={RUNC_VERSION.lstrip('v')}"),
                (
                    f"{CRICTL_PACKAGE}@{CRICTL_VERSION}",
                    f"-X sigs.k8s.io/cri-tools/pkg/version.Version={CRICTL_VERSION}",
                ),
            ],
            cgo=frozenset({RUNC_PACKAGE}),
            tags={RUNC_PACKAGE: "seccomp"},
        )
        for name in ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "crictl"):
            shutil.copy2(tools / name, staging / name)
        _build_pause(go, staging)
        bad = [
            n
            for n in ("kubelet", "containerd", "runc", "crictl")
            if subprocess.run(
                [str(staging / n), "--version"], capture_output=True, check=False, timeout=60
            ).returncode
            != 0
        ]
        if bad:
            raise DevclusterError(
                f"built but not runnable ('--version' failed): {', '.join(bad)} in {staging}"
            )
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
        shutil.rmtree(tools, ignore_errors=True)
    return folder


def ensure_kube_proxy() -> Path:
    """Return the path of ``kube-proxy`` K8S_VERSION, built from ``k8s.io/kubernetes`` like the
    control plane if missing (a few minutes the first time): the real nodes share this machine's
    network namespace, so one kube-proxy serves them all (``hack/devcluster.py``). Raises
    DevclusterError."""
    folder = tool_dir("kube-proxy", K8S_VERSION)
    exe = folder / "kube-proxy"
    if os.access(exe, os.X_OK):
        return exe
    go = shutil.which("go")
    if go is None:
        raise DevclusterError("missing kube-proxy and no Go toolchain on PATH to build it")
    with file_lock(cache_dir() / ".build.lock"):
        if not os.access(exe, os.X_OK):
            build = cache_dir() / "build"
            build.mkdir(parents=True, exist_ok=True)
            staging = folder.with_name(folder.name + ".partial")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            _build_kubernetes(go, build, staging, ("kube-proxy",))
            shutil.rmtree(folder, ignore_errors=True)
            staging.rename(folder)
    return exe


def _tar_add(
    tar: tarfile.TarFile,
    name: str,
    *,
    data: bytes | None = None,
    mode: int = 0o755,
    link: str | None = None,
    directory: bool = False,
) -> None:
    info = tarfile.TarInfo(name)
    info.mode, info.mtime, info.uname, info.gname = mode, 0, "root", "root"
    if directory:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    elif link is not None:
        info.type, info.linkname = tarfile.SYMTYPE, link
        tar.addfile(info)
    else:
        info.size = len(data or b"")
        tar.addfile(info, io.BytesIO(data or b""))


def oci_archive(
    out: Path, name: str, files: dict[str, bytes], links: dict[str, str], config: dict[str, object]
) -> None:
    """Write a one-layer image as an OCI image-layout tar (what ``ctr images import`` reads).

    ``files``: path in the image → content (mode 0755); ``links``: path → symlink target;
    ``config``: the image config's ``config`` (Entrypoint, Cmd, Env, User). The manifest is
    annotated with ``io.containerd.image.name`` = ``name`` (containerd's import keeps it) and
    ``org.opencontainers.image.ref.name`` = its tag. Deterministic: same input, same digests.
    """
    layer_buf = io.BytesIO()
    with tarfile.open(fileobj=layer_buf, mode="w", format=tarfile.PAX_FORMAT) as layer:
        dirs = sorted({str(Path(p).parent) for p in (*files, *links)} - {"."})
        for d in dirs:
            _tar_add(layer, d + "/", directory=True)
        for path in sorted(files):
            _tar_add(layer, path, data=files[path])
        for path in sorted(links):
            _tar_add(layer, path, link=links[path])
    layer_bytes = layer_buf.getvalue()

    def digest(b: bytes) -> str:
        return "sha256:" + hashlib.sha256(b).hexdigest()

    image_config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": [digest(layer_bytes)]},
            "history": [{"created_by": "hack/binaries.py oci_archive"}],
        },
        sort_keys=True,
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": digest(image_config),
                "size": len(image_config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": digest(layer_bytes),
                    "size": len(layer_bytes),
                }
            ],
        },
        sort_keys=True,
    ).encode()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": digest(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                    },
                }
            ],
        },
        sort_keys=True,
    ).encode()
    tmp = out.with_suffix(".partial")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        _tar_add(tar, "oci-layout", data=b'{"imageLayoutVersion":"1.0.0"}', mode=0o644)
        _tar_add(tar, "index.json", data=index, mode=0o644)
        for blob in (layer_bytes, image_config, manifest):
            _tar_add(tar, "blobs/sha256/" + digest(blob).split(":")[1], data=blob, mode=0o644)
    tmp.replace(out)


def node_images_dir() -> Path:
    """``$XDG_CACHE_HOME/ipscheduler/images-<k8s>``: ``pause.tar`` and ``busybox.tar``."""
    return cache_dir().parent / f"images-{K8S_VERSION}"


def _busybox_binary(workdir: Path) -> bytes:
    """Debian's static busybox, from ``apt-get download busybox-static`` (apt's lists refreshed
    once with ``apt-get update`` if the package is unknown), unpacked with ``dpkg-deb``."""
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise DevclusterError(f"missing {tool}: the workload image is Debian's {BUSYBOX_PACKAGE}")
    workdir.mkdir(parents=True, exist_ok=True)
    for attempt in range(2):
        proc = subprocess.run(
            ["apt-get", "download", BUSYBOX_PACKAGE], cwd=workdir, capture_output=True, text=True, check=False
        )
        if proc.returncode == 0:
            break
        if attempt == 0:
            log(f"apt-get download {BUSYBOX_PACKAGE} failed; running apt-get update once")
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, check=False)
    else:
        raise DevclusterError(f"apt-get download {BUSYBOX_PACKAGE} failed: {proc.stderr.strip()[-400:]}")
    deb = next(workdir.glob(f"{BUSYBOX_PACKAGE}_*.deb"))
    subprocess.run(["dpkg-deb", "-x", str(deb), str(workdir / "root")], check=True, capture_output=True)
    return (workdir / "root" / "bin" / "busybox").read_bytes()


def ensure_node_images(node_bin: Path) -> Path:
    """Return the folder with the real nodes' two images as OCI archives, made if missing:
    ``pause.tar`` (:data:`PAUSE_IMAGE`, ``/pause`` from ``node_bin``, user 65535 as upstream's)
    and ``busybox.tar`` (:data:`BUSYBOX_IMAGE`: Debian's static busybox with a symlink per
    applet in ``/bin``, ``Cmd ["sh"]``). No registry is involved: containerd imports them.

    Raises DevclusterError if apt-get or dpkg-deb is missing or the download fails."""
    folder = node_images_dir()
    if (folder / "pause.tar").is_file() and (folder / "busybox.tar").is_file():
        return folder
    with file_lock(folder.with_name(f".{folder.name}.lock")):
        if (folder / "pause.tar").is_file() and (folder / "busybox.tar").is_file():
            return folder
        folder.mkdir(parents=True, exist_ok=True)
        oci_archive(
            folder / "pause.tar",
            PAUSE_IMAGE,
            {"pause": (node_bin / "pause").read_bytes()},
            {},
            {"Entrypoint": ["/pause"], "User": "65535:65535"},
        )
        work = folder / "busybox-deb"
        shutil.rmtree(work, ignore_errors=True)
        busybox = _busybox_binary(work)
        (work / "busybox").write_bytes(busybox)
        (work / "busybox").chmod(0o755)
        applets = subprocess.run(
            [str(work / "busybox"), "--list"], capture_output=True, text=True, check=True
        ).stdout.split()
        oci_archive(
            folder / "busybox.tar",
            BUSYBOX_IMAGE,
            {"bin/busybox": busybox, "tmp/.keep": b""},
            {f"bin/{a}": "busybox" for a in applets if a != "busybox"},
            {"Cmd": ["sh"], "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
        )
        shutil.rmtree(work, ignore_errors=True)
    return folder


def ensure_node() -> Path:
    """The real-node binaries and images (:func:`ensure_node_binaries`, :func:`ensure_node_images`);
    returns the binaries' folder."""
    folder = ensure_node_binaries()
    ensure_node_images(folder)
    return folder


def main(argv: list[str] | None = None) -> int:
    """``python hack/binaries.py tools|helm|helm-docs|promtool|prometheus|node|multus``: ensure the
    tools, or one, or the real-node binaries and images and Multus (``node``), or Multus alone,
    and print the path of each (``$(python hack/binaries.py helm) lint ...``)."""
    args = sys.argv[1:] if argv is None else argv
    wanted = {
        "tools": (ensure_helm, ensure_helm_docs, ensure_promtool, ensure_prometheus),
        "helm": (ensure_helm,),
        "helm-docs": (ensure_helm_docs,),
        "promtool": (ensure_promtool,),
        "prometheus": (ensure_prometheus,),
        "node": (ensure_node, ensure_multus),
        "multus": (ensure_multus,),
    }
    if len(args) != 1 or args[0] not in wanted:
        print(f"usage: python hack/binaries.py {'|'.join(wanted)}", file=sys.stderr)
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

"""Pure parts of hack/binaries.py: locating and checking the cached binaries.

No build is started: every test has the binaries present or no Go on PATH."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import binaries


def test_cache_dir_respects_xdg_cache_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("IPSCHEDULER_BIN_DIR", raising=False)
    assert binaries.bin_dir() == tmp_path / "ipscheduler" / f"k8s-{binaries.K8S_VERSION}" / "bin"


def test_missing_go_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("IPSCHEDULER_BIN_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(binaries.DevclusterError) as err:
        binaries.ensure_binaries()
    msg = str(err.value)
    assert "\n" not in msg
    assert "no Go toolchain" in msg and "kube-apiserver" in msg


def test_present_binaries_need_no_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in binaries.ALL_BINARIES:
        exe = tmp_path / name
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    monkeypatch.setenv("IPSCHEDULER_BIN_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", "/nonexistent")  # would fail if it tried to build
    assert binaries.ensure_binaries() == tmp_path


def test_a_binary_that_does_not_run_counts_as_missing(tmp_path: Path) -> None:
    """A truncated or foreign file in the cache is deleted and reported missing (so it is rebuilt)."""
    import os

    for name in binaries.ALL_BINARIES:
        exe = tmp_path / name
        exe.write_text("#!/bin/sh\nexit 0\n" if name != "etcd" else "#!/bin/sh\nexit 3\n")
        exe.chmod(0o755)
    assert binaries.missing_binaries(tmp_path) == ["etcd"]
    assert not (tmp_path / "etcd").exists()
    # A verified binary is remembered by size and mtime and not run again ...
    kwok = tmp_path / "kwok"
    st = kwok.stat()
    kwok.write_text("#!/bin/sh\nexit 9\n")
    os.utime(kwok, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert binaries.missing_binaries(tmp_path) == ["etcd"]
    # ... but a changed one is.
    kwok.write_text("#!/bin/sh\nexit 9\n")
    assert binaries.missing_binaries(tmp_path) == ["etcd", "kwok"]


@pytest.mark.parametrize(
    ("ensure", "name", "version"),
    [
        (binaries.ensure_helm, "helm", binaries.HELM_VERSION),
        (binaries.ensure_promtool, "promtool", binaries.PROMTOOL_VERSION),
        (binaries.ensure_multus, "multus", binaries.MULTUS_VERSION),
    ],
)
def test_a_cached_go_tool_is_returned_without_a_build(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ensure: Callable[[], Path], name: str, version: str
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = tmp_path / "ipscheduler" / f"tools-{name}-{version}"
    folder.mkdir(parents=True)
    exe = folder / name
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", "/nonexistent")  # would fail if it tried to build
    assert ensure() == exe
    assert binaries.tool_dir(name, version) == folder


@pytest.mark.parametrize(
    ("ensure", "name"),
    [
        (binaries.ensure_helm, "helm"),
        (binaries.ensure_promtool, "promtool"),
        (binaries.ensure_multus, "multus"),
    ],
)
def test_a_missing_go_tool_without_go_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ensure: Callable[[], Path], name: str
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(binaries.DevclusterError) as err:
        ensure()
    msg = str(err.value)
    assert "\n" not in msg
    assert "no Go toolchain" in msg and name in msg


class _FakePopen:
    """A ``go install`` that is done at once with ``returncode`` and ``output``."""

    def __init__(self, returncode: int, output: str) -> None:
        self.returncode, self.output = returncode, output

    def communicate(self, timeout: float | None = None) -> tuple[str, None]:
        return self.output, None


def test_go_tools_are_pinned_static_installs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The install command: the pinned package@version, static, the version stamped into helm."""
    calls: list[tuple[list[str], dict[str, str]]] = []

    def fake_run(cmd: list[str], **kw: Any) -> _FakePopen:
        env = kw["env"]
        calls.append((cmd, env))
        exe = Path(env["GOBIN"]) / cmd[-1].split("@")[0].rsplit("/", 1)[1]
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
        return _FakePopen(0, "")

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(binaries.shutil, "which", lambda _: "/usr/bin/go")
    monkeypatch.setattr(binaries.subprocess, "Popen", fake_run)
    helm = binaries.ensure_helm()
    assert helm == tmp_path / "ipscheduler" / f"tools-helm-{binaries.HELM_VERSION}" / "helm"
    assert os.access(helm, os.X_OK)
    assert not helm.parent.with_name(helm.parent.name + ".partial").exists()
    promtool = binaries.ensure_promtool()
    assert promtool.name == "promtool" and os.access(promtool, os.X_OK)
    (helm_cmd, env), (promtool_cmd, _) = calls
    assert helm_cmd[:2] == ["/usr/bin/go", "install"]
    assert helm_cmd[-1] == f"helm.sh/helm/v3/cmd/helm@{binaries.HELM_VERSION}"
    ldflags = helm_cmd[-2]
    assert f"-X helm.sh/helm/v3/internal/version.version={binaries.HELM_VERSION}" in ldflags
    # helm template/lint assume this Kubernetes offline (unstamped: 1.20, too old for the chart).
    assert f"-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor={binaries.HELM_K8S_MINOR}" in ldflags
    assert promtool_cmd[-1] == f"github.com/prometheus/prometheus/cmd/promtool@{binaries.PROMTOOL_VERSION}"
    assert env["CGO_ENABLED"] == "0" and env["GOTOOLCHAIN"] == "local"
    assert binaries.ensure_helm() == helm and len(calls) == 2  # cached: no second install


def test_a_failed_go_tool_install_leaves_no_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def failing_run(cmd: list[str], **kw: Any) -> _FakePopen:
        return _FakePopen(1, "go: module lookup disabled")

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(binaries.shutil, "which", lambda _: "/usr/bin/go")
    monkeypatch.setattr(binaries.subprocess, "Popen", failing_run)
    with pytest.raises(binaries.DevclusterError, match="module lookup disabled"):
        binaries.ensure_promtool()
    assert not binaries.tool_dir("promtool", binaries.PROMTOOL_VERSION).exists()


class _FakeBuild:
    """``go build`` as :func:`binaries._run_logged` runs it: done at once with ``returncode``,
    having written ``output`` to its log and, if it succeeded, the ``-o`` file. Each call is
    recorded with the ``go.mod`` of its folder, as it was then."""

    def __init__(self, returncode: int, output: str = "") -> None:
        self.returncode, self.output = returncode, output
        self.calls: list[tuple[list[str], str, dict[str, str]]] = []

    def __call__(self, cmd: list[str], **kw: Any) -> _FakeBuild:
        self.calls.append((cmd, (Path(kw["cwd"]) / "go.mod").read_text(), kw["env"]))
        kw["stdout"].write(self.output)
        kw["stdout"].flush()
        if self.returncode == 0:
            out = Path(cmd[cmd.index("-o") + 1])
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text("#!/bin/sh\n")
            out.chmod(0o755)
        return self

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode


def test_multus_is_built_static_in_a_wrapper_module_requiring_the_pinned_version(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``go build`` of cmd/multus in a module requiring Multus' module at MULTUS_VERSION (the
    module proxy answers no ``go install module@version`` for it), static, the version stamped
    as Multus' hack/build-go.sh does; cached afterwards."""
    build = _FakeBuild(0)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(binaries.shutil, "which", lambda _: "/usr/bin/go")
    monkeypatch.setattr(binaries.subprocess, "Popen", build)
    multus = binaries.ensure_multus()
    assert multus == tmp_path / "ipscheduler" / f"tools-multus-{binaries.MULTUS_VERSION}" / "multus"
    assert os.access(multus, os.X_OK)
    assert not multus.parent.with_name(multus.parent.name + ".partial").exists()
    ((cmd, gomod, env),) = build.calls
    assert cmd[:2] == ["/usr/bin/go", "build"]
    assert cmd[-1] == "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus" == binaries.MULTUS_PACKAGE
    ldflags = cmd[cmd.index("-ldflags") + 1]
    pkg = "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/pkg/multus"
    assert f"-X {pkg}.version={binaries.MULTUS_VERSION}" in ldflags
    assert f"-X {pkg}.releaseStatus=,released" in ldflags
    assert f"\tgopkg.in/k8snetworkplumbingwg/multus-cni.v4 {binaries.MULTUS_VERSION}\n" in gomod
    assert env["CGO_ENABLED"] == "0" and env["GOTOOLCHAIN"] == "local"
    assert binaries.ensure_multus() == multus and len(build.calls) == 1  # cached: no second build


def test_a_failed_multus_build_leaves_no_cache_and_says_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(binaries.shutil, "which", lambda _: "/usr/bin/go")
    monkeypatch.setattr(binaries.subprocess, "Popen", _FakeBuild(1, "go: module lookup disabled\n"))
    with pytest.raises(binaries.DevclusterError, match="module lookup disabled"):
        binaries.ensure_multus()
    assert not binaries.tool_dir("multus", binaries.MULTUS_VERSION).exists()


def test_the_command_prints_the_tools_paths(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(binaries, "ensure_helm", lambda: tmp_path / "helm")
    monkeypatch.setattr(binaries, "ensure_helm_docs", lambda: tmp_path / "helm-docs")
    monkeypatch.setattr(binaries, "ensure_promtool", lambda: tmp_path / "promtool")
    monkeypatch.setattr(binaries, "ensure_prometheus", lambda: tmp_path / "prometheus")
    monkeypatch.setattr(binaries, "ensure_multus", lambda: tmp_path / "multus")
    monkeypatch.setattr(binaries, "ensure_node", lambda: tmp_path / "node")
    assert binaries.main(["tools"]) == 0
    tools = [str(tmp_path / t) for t in ("helm", "helm-docs", "promtool", "prometheus")]
    assert capsys.readouterr().out.split() == tools
    assert binaries.main(["helm"]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "helm")]
    assert binaries.main(["helm-docs"]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "helm-docs")]
    assert binaries.main(["promtool"]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "promtool")]
    assert binaries.main(["prometheus"]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "prometheus")]
    assert binaries.main(["multus"]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "multus")]
    assert binaries.main(["node"]) == 0  # a real node's binaries and images, and Multus
    assert capsys.readouterr().out.split() == [str(tmp_path / "node"), str(tmp_path / "multus")]
    assert binaries.main([]) == 2
    assert binaries.main(["kwok"]) == 2


class _Apt:
    """apt-get as :func:`binaries.apt_install` runs it: ``install`` succeeds from try
    ``works_from`` on (0: the first; None: never) and then puts ``nft`` on the PATH."""

    def __init__(self, works_from: int | None) -> None:
        self.works_from = works_from
        self.calls: list[str] = []
        self.installed = False

    def run(self, cmd: list[str], **kw: Any) -> Any:
        self.calls.append(" ".join(cmd))
        tries = sum(1 for c in self.calls if c.startswith("apt-get install"))
        ok = cmd[1] == "update" or (self.works_from is not None and tries > self.works_from)
        if cmd[1] == "install" and ok:
            self.installed = True
        return type("Done", (), {"returncode": 0 if ok else 100, "stderr": "E: Unable to locate package"})()

    def which(self, name: str) -> str | None:
        if name == "apt-get":
            return "/usr/bin/apt-get"
        return "/usr/sbin/nft" if name == "nft" and self.installed else None


@pytest.mark.parametrize(
    ("works_from", "calls"),
    [
        (0, ["apt-get install -y -qq nftables"]),
        (1, ["apt-get install -y -qq nftables", "apt-get update -qq", "apt-get install -y -qq nftables"]),
    ],
    ids=["installed-at-once", "installed-after-the-lists-are-refreshed"],
)
def test_apt_install_installs_a_missing_command_as_root(
    monkeypatch: pytest.MonkeyPatch, works_from: int, calls: list[str]
) -> None:
    apt = _Apt(works_from)
    monkeypatch.setattr(binaries.os, "geteuid", lambda: 0)
    monkeypatch.setattr(binaries.shutil, "which", apt.which)
    monkeypatch.setattr(binaries.subprocess, "run", apt.run)
    assert binaries.apt_install("nftables", "nft", "kube-proxy") == Path("/usr/sbin/nft")
    assert apt.calls == calls


@pytest.mark.parametrize(
    ("root", "works_from", "message", "calls"),
    [
        (False, 0, "missing nft (kube-proxy): apt-get install nftables", 0),
        (True, None, "apt-get install nftables failed: E: Unable to locate package", 3),
    ],
    ids=["not-root", "apt-get-fails-twice"],
)
def test_apt_install_says_what_to_install_when_it_cannot(
    monkeypatch: pytest.MonkeyPatch, root: bool, works_from: int | None, message: str, calls: int
) -> None:
    apt = _Apt(works_from)
    monkeypatch.setattr(binaries.os, "geteuid", lambda: 0 if root else 1000)
    monkeypatch.setattr(binaries.shutil, "which", apt.which)
    monkeypatch.setattr(binaries.subprocess, "run", apt.run)
    with pytest.raises(binaries.DevclusterError) as err:
        binaries.apt_install("nftables", "nft", "kube-proxy")
    assert str(err.value) == message
    assert len(apt.calls) == calls


def test_apt_install_leaves_what_is_there_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    header = tmp_path / "seccomp.h"
    header.touch()
    monkeypatch.setattr(binaries.os, "geteuid", lambda: 1000)  # not root: an install would fail
    monkeypatch.setattr(binaries.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert binaries.apt_install("libseccomp-dev", header, "runc") == header
    assert binaries.apt_install("mmdebstrap", "mmdebstrap", "images") == Path("/usr/bin/mmdebstrap")

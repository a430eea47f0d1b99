"""Pure parts of hack/binaries.py: locating and checking the cached binaries.

No build is started: every test has the binaries present or no Go on PATH."""

from __future__ import annotations

from pathlib import Path

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

"""``make images``: the project's two images, built here from its own Dockerfiles with BuildKit.

``python hack/images.py build [--version V] [--out dist] [IMAGE...]`` builds
``ipscheduler:V`` from ``Dockerfile`` and ``ipscheduler-ipam:V`` from ``cni/Dockerfile``
and writes each as an OCI archive, ``dist/<image>-V.oci.tar`` (what ``ctr images import``,
``kind load image-archive``, ``skopeo copy oci-archive:`` and ``docker load`` read), with
an SPDX SBOM beside it, ``dist/<image>-V.spdx.json``. It prints each image's digest and
size and the time each step took.

No container registry is reachable from this machine, so nothing here pulls:

- **The build engine** is BuildKit (``buildkitd`` and ``buildctl``, :data:`BUILDKIT_VERSION`),
  built with Go from its module like the other tools (``hack/binaries.py``) into
  ``~/.cache/ipscheduler/tools-buildkit-<version>``, and run as root on the real node's
  runc (``hack/binaries.py node``) with the host's network, for as long as one
  ``build`` runs; its cache lives in ``~/.cache/ipscheduler/buildkit-state``.
- **The base images** the Dockerfiles name in ``FROM`` are made here and handed to
  BuildKit as named build contexts under exactly those names
  (``--opt context:<FROM name>=oci-layout://...``), so the Dockerfiles are unchanged and
  ``docker build`` elsewhere pulls the real ones:

  - ``python:…-slim-bookworm``: Debian bookworm (``mmdebstrap --variant=minbase``, from the
    machine's Debian sources) with Debian's ``python3`` and ``python3-pip``; pip may
    install into it (the Debian ``EXTERNALLY-MANAGED`` marker is removed: the image
    is the application's own, as the official image's /usr/local Python is);
  - ``golang:…-bookworm``: the same Debian with this machine's Go toolchain in
    ``/usr/local/go`` and its ``GOPROXY``/``GOSUMDB``/``GOFLAGS``;
  - ``busybox:…``: Debian's static busybox (as the real nodes' workload image).

  Both Debian bases trust the machine's own extra certificate authorities
  (``/usr/local/share/ca-certificates``, added with ``update-ca-certificates``), as a
  site's base image does, so pip and Go reach the package registries the way this
  machine does. They are cached in ``~/.cache/ipscheduler/bases-<key>``, the key being a
  hash of the Debian sources, package lists and Go version.
- **Reproducible**: the bases are made with a fixed ``SOURCE_DATE_EPOCH``
  (:data:`BASE_EPOCH`) from the machine's Debian snapshot; each image is built with
  ``SOURCE_DATE_EPOCH`` = the commit's time (``git log -1 --format=%ct``, the time of
  now if the tree is dirty) and exported with ``rewrite-timestamp=true``, so two builds
  of one commit give one digest, as long as the package index serves the same versions.
- **SBOMs** come from syft (:data:`SYFT_VERSION`, built from its Go module) scanning each
  archive.

Standard library only; it never imports the operator.

Size: one module for the whole ``make images`` path (tools, bases, daemon, build, SBOM),
as ``hack/binaries.py`` holds every other tool's: each part is a few dozen lines and
only this command uses them.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import binaries
from binaries import DevclusterError, file_lock, log

ROOT = Path(__file__).resolve().parent.parent

BUILDKIT_MODULE = "github.com/moby/buildkit"
BUILDKIT_VERSION = "v0.34.2"
"""moby/buildkit: ``buildkitd`` (the engine, OCI worker on runc) and ``buildctl``."""
SYFT_MODULE = "github.com/anchore/syft"
SYFT_VERSION = "v1.57.1"
"""anchore/syft: the SBOM generator (``syft scan oci-archive:…``)."""

DEBIAN_SUITE = "bookworm"
BASE_EPOCH = 1747699200
"""``SOURCE_DATE_EPOCH`` of the base images (2025-05-20T00:00:00Z): fixed, so that the same
Debian packages give the same layer."""
PYTHON_PACKAGES = ("python3", "python3-pip", "ca-certificates")
GO_PACKAGES = ("ca-certificates",)

IMAGES = {
    "ipscheduler": (ROOT / "Dockerfile", ROOT),
    "ipscheduler-ipam": (ROOT / "cni" / "Dockerfile", ROOT / "cni"),
}
"""Image name → (its Dockerfile, its build context)."""

LOCAL_CAS = Path("/usr/local/share/ca-certificates")
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


# -- small helpers ------------------------------------------------------------------------------
def _run(
    cmd: list[str], what: str, logfile: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> None:
    """Run ``cmd`` with its output in ``logfile``; a progress line every 30 s (the silent
    steps included); raise DevclusterError with the log's tail if it fails."""
    log(f"{what} (log: {logfile})")
    start = time.monotonic()
    logfile.parent.mkdir(parents=True, exist_ok=True)
    with open(logfile, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        while True:
            try:
                rc = proc.wait(timeout=30)
                break
            except subprocess.TimeoutExpired:
                log(f"{what}: still running, {time.monotonic() - start:.0f}s")
    if rc != 0:
        tail = "".join(logfile.read_text(errors="replace").splitlines(True)[-20:])
        raise DevclusterError(f"{what} failed (exit {rc}); last lines of {logfile}:\n{tail}")
    log(f"{what}: done in {time.monotonic() - start:.0f}s")


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise DevclusterError("go is not on PATH (BuildKit and syft are built with it)")
    return go


def _go_env_value(name: str) -> str:
    return subprocess.run([_go(), "env", name], capture_output=True, text=True, check=True).stdout.strip()


# -- the tools --------------------------------------------------------------------------------
def _build_module_commands(module: str, version: str, commands: tuple[str, ...], folder: Path) -> Path:
    """Build ``commands`` (``cmd/...`` packages) of ``module@version`` into ``folder``, made once.

    ``go install pkg@version`` refuses modules whose go.mod has ``replace`` or ``exclude``
    directives (BuildKit's has), so the module's source is copied and built as the main
    module with its own go.mod and go.sum (``-mod=mod``: dependencies from the module
    proxy). Static (``CGO_ENABLED=0``), ``-trimpath``. Raises DevclusterError."""
    names = [c.rsplit("/", 1)[1] for c in commands]
    if all((folder / n).is_file() for n in names):
        return folder
    with file_lock(folder.with_name(f".{folder.name}.lock")):
        if all((folder / n).is_file() for n in names):
            return folder
        go = _go()
        info = subprocess.run(
            [go, "mod", "download", "-json", f"{module}@{version}"],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "GOFLAGS": "-mod=mod"},
        )
        if info.returncode != 0:
            raise DevclusterError(
                f"go mod download {module}@{version} failed: {info.stdout[-400:]}{info.stderr[-400:]}"
            )
        with tempfile.TemporaryDirectory(prefix="ipscheduler-build-") as tmp:
            src = Path(tmp) / "src"
            shutil.copytree(json.loads(info.stdout)["Dir"], src)
            for p in [src, *src.rglob("*")]:
                p.chmod(p.stat().st_mode | 0o200)
            staging = folder.with_name(folder.name + ".partial")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            env = {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}
            _run(
                [
                    go,
                    "build",
                    "-trimpath",
                    "-ldflags",
                    "-s -w",
                    "-o",
                    str(staging) + "/",
                    *[f"./{c}" for c in commands],
                ],
                f"building {', '.join(names)} {version} from {module} (a few minutes the first time)",
                folder.with_name(f"{folder.name}.log"),
                env=env,
                cwd=src,
            )
            shutil.rmtree(folder, ignore_errors=True)
            staging.replace(folder)
    return folder


def ensure_buildkit() -> Path:
    """The folder holding ``buildkitd`` and ``buildctl`` :data:`BUILDKIT_VERSION`, built if
    missing (about 3 minutes the first time). Raises DevclusterError."""
    return _build_module_commands(
        BUILDKIT_MODULE,
        BUILDKIT_VERSION,
        ("cmd/buildkitd", "cmd/buildctl"),
        binaries.tool_dir("buildkit", BUILDKIT_VERSION),
    )


def ensure_syft() -> Path:
    """The path of ``syft`` :data:`SYFT_VERSION`, built if missing. Raises DevclusterError."""
    folder = _build_module_commands(
        SYFT_MODULE, SYFT_VERSION, ("cmd/syft",), binaries.tool_dir("syft", SYFT_VERSION)
    )
    return folder / "syft"


# -- OCI layouts ----------------------------------------------------------------------------------
def _blob(folder: Path, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    (folder / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (folder / "blobs" / "sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def oci_layout(folder: Path, layer: Path, config: dict[str, object], created_by: str) -> str:
    """Write a one-layer image as an OCI image layout *folder* (what BuildKit's
    ``oci-layout://`` named contexts read) from the uncompressed root filesystem tar
    ``layer``; ``config``: the image config's ``config`` (Env, Cmd...). Returns the
    manifest's digest (``sha256:…``). Deterministic: same input, same digests."""
    shutil.rmtree(folder, ignore_errors=True)
    blobs = folder / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    layer_digest = _sha256_file(layer)
    shutil.copyfile(layer, blobs / layer_digest)
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(BASE_EPOCH)),
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
        "history": [
            {
                "created_by": created_by,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(BASE_EPOCH)),
            }
        ],
    }
    cfg = _blob(folder, json.dumps(image_config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **cfg},
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": f"sha256:{layer_digest}",
                "size": layer.stat().st_size,
            }
        ],
    }
    man = _blob(folder, json.dumps(manifest, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                **man,
                "platform": {"architecture": "amd64", "os": "linux"},
            }
        ],
    }
    (folder / "index.json").write_text(json.dumps(index, sort_keys=True))
    (folder / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    return str(man["digest"])


# -- base images ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Base:
    """A base image made here: the ``FROM`` name it stands for, its OCI layout folder and
    its manifest digest."""

    name: str
    layout: Path
    digest: str


def from_names(dockerfile: Path) -> list[str]:
    """The images a Dockerfile's ``FROM`` lines pull (stage names and ``scratch`` left out),
    in order, without duplicates. Build arguments in a ``FROM`` are not supported here."""
    stages: set[str] = set()
    names: list[str] = []
    for line in dockerfile.read_text().splitlines():
        m = re.match(r"\s*FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$", line, re.IGNORECASE)
        if not m:
            continue
        image, stage = m.group(1), m.group(2)
        if image not in stages and image != "scratch" and image not in names:
            names.append(image)
        if stage:
            stages.add(stage)
    return names


def _kind(name: str) -> str:
    """Which base a ``FROM`` name is made as: ``python``, ``golang`` or ``busybox``."""
    repo = name.split("@", 1)[0].rsplit(":", 1)[0].rsplit("/", 1)[-1]
    if repo not in ("python", "golang", "busybox"):
        raise DevclusterError(f"no local base for FROM {name}: only python, golang and busybox are made here")
    return repo


def _bases_key() -> str:
    """What the bases are made of: the Debian sources (a snapshot), the package lists, the
    Go version, the extra certificate authorities and this module's recipe version."""
    h = hashlib.sha256()
    for src in sorted([Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*")]):
        if src.is_file():
            h.update(src.read_bytes())
    for ca in sorted(LOCAL_CAS.glob("*.crt")):
        h.update(ca.read_bytes())
    h.update(
        repr((DEBIAN_SUITE, BASE_EPOCH, PYTHON_PACKAGES, GO_PACKAGES, _go_env_value("GOVERSION"), 3)).encode()
    )
    return h.hexdigest()[:12]


def _debian(out: Path, packages: tuple[str, ...], hooks: list[str], work: Path) -> None:
    """A Debian :data:`DEBIAN_SUITE` root filesystem tar at ``out``: mmdebstrap minbase,
    ``packages`` without recommends, the machine's extra CAs, the ``hooks`` (shell, ``$1``
    the root), fixed ``SOURCE_DATE_EPOCH``."""
    cmd = [
        str(binaries.apt_install("mmdebstrap", "mmdebstrap", "the Debian base images")),
        "--variant=minbase",
        "--mode=root",
        "--format=tar",
        # merged /usr without the usrmerge package (and the perl it pulls in)
        "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
        '--aptopt=APT::Install-Recommends "false"',
        # as slim images: no documentation, manual pages or translations
        *[f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("doc", "man", "info", "locale")],
        "--dpkgopt=path-include=/usr/share/doc/*/copyright",
        f"--include={','.join(packages)}",
    ]
    if any(LOCAL_CAS.glob("*.crt")):
        cmd += [
            f'--customize-hook=cp {LOCAL_CAS}/*.crt "$1{LOCAL_CAS}/"',
            '--customize-hook=chroot "$1" update-ca-certificates',
        ]
    cmd += [f"--customize-hook={h}" for h in hooks]
    cmd += [DEBIAN_SUITE, str(out)]
    _run(
        cmd,
        f"making {out.name} (Debian {DEBIAN_SUITE}, about 1.5 min)",
        work / f"{out.stem}.log",
        env={**os.environ, "SOURCE_DATE_EPOCH": str(BASE_EPOCH)},
    )


def ensure_bases(names: list[str]) -> dict[str, Base]:
    """The base images standing for ``names`` (``FROM`` names), made if missing; name → Base.
    Raises DevclusterError (no mmdebstrap, apt failure, an unknown kind of base)."""
    folder = binaries.cache_dir().parent / f"bases-{_bases_key()}"
    made: dict[str, Base] = {}
    with file_lock(folder.with_name(f".{folder.name}.lock")):
        folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            kind = _kind(name)
            layout = folder / kind
            digest_file = folder / f"{kind}.digest"
            if not digest_file.is_file():
                _make_base(kind, layout, folder)
                digest = json.loads((layout / "index.json").read_text())["manifests"][0]["digest"]
                digest_file.write_text(digest)
            made[name] = Base(name, layout, digest_file.read_text().strip())
    return made


def _make_base(kind: str, layout: Path, work: Path) -> None:
    rootfs = work / f"{kind}.tar"
    if kind == "python":
        _debian(rootfs, PYTHON_PACKAGES, ['rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED'], work)
        config: dict[str, object] = {"Env": [PATH_ENV, "LANG=C.UTF-8"], "Cmd": ["python3"]}
    elif kind == "golang":
        goroot = _go_env_value("GOROOT")
        _debian(rootfs, GO_PACKAGES, [f'mkdir -p "$1/usr/local" && cp -a {goroot} "$1/usr/local/go"'], work)
        env = [
            "PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "GOPATH=/go",
            "GOTOOLCHAIN=local",
        ]
        env += [f"{k}={v}" for k in ("GOPROXY", "GOSUMDB", "GOFLAGS") if (v := _go_env_value(k))]
        config = {"Env": env, "WorkingDir": "/go"}
    else:
        with tempfile.TemporaryDirectory(prefix="ipscheduler-busybox-") as tmp:
            busybox = binaries._busybox_binary(Path(tmp))
            (Path(tmp) / "busybox").write_bytes(busybox)
            (Path(tmp) / "busybox").chmod(0o755)
            applets = subprocess.run(
                [str(Path(tmp) / "busybox"), "--list"], capture_output=True, text=True, check=True
            ).stdout.split()
        with tarfile.open(rootfs, "w", format=tarfile.PAX_FORMAT) as tar:
            for d in ("bin/", "tmp/"):
                binaries._tar_add(tar, d, directory=True)
            binaries._tar_add(tar, "bin/busybox", data=busybox)
            for applet in sorted(a for a in applets if a != "busybox"):
                binaries._tar_add(tar, f"bin/{applet}", link="busybox")
        config = {"Env": [PATH_ENV], "Cmd": ["sh"]}
    oci_layout(layout, rootfs, config, f"hack/images.py: {kind} base")
    rootfs.unlink()


# -- the engine -------------------------------------------------------------------------------------
@contextlib.contextmanager
def buildkitd() -> Iterator[str]:
    """Run ``buildkitd`` (root, OCI worker on the real node's runc, host network) for the
    block; yields its address (``unix://…``). Its state (the build cache) persists in
    ``~/.cache/ipscheduler/buildkit-state``. Raises DevclusterError if it does not start."""
    if os.geteuid() != 0:
        raise DevclusterError("make images runs BuildKit as root (its OCI worker runs runc): run it as root")
    tools = ensure_buildkit()
    node = binaries.ensure_node_binaries()  # runc
    state = binaries.cache_dir().parent / "buildkit-state"
    state.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ipscheduler-buildkitd-") as tmp:
        addr = f"unix://{tmp}/buildkitd.sock"
        logfile = state / "buildkitd.log"
        env = {**os.environ, "PATH": f"{node}:{os.environ.get('PATH', '')}"}
        with open(logfile, "w") as out:
            proc = subprocess.Popen(
                [
                    str(tools / "buildkitd"),
                    "--root",
                    str(state),
                    "--addr",
                    addr,
                    "--oci-worker-net",
                    "host",
                    "--containerd-worker=false",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        try:
            deadline = time.monotonic() + 60
            while True:
                ok = subprocess.run(
                    [str(tools / "buildctl"), "--addr", addr, "debug", "workers"],
                    capture_output=True,
                    check=False,
                )
                if ok.returncode == 0:
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = "".join(logfile.read_text(errors="replace").splitlines(True)[-15:])
                    raise DevclusterError(f"buildkitd did not start; last lines of {logfile}:\n{tail}")
                time.sleep(0.3)
            yield addr
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def source_date_epoch() -> int:
    """The commit's time (``git log -1 --format=%ct``), or now when the tree has changes
    not committed (or no git): the ``SOURCE_DATE_EPOCH`` of a build."""
    try:
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if not dirty:
            return int(
                subprocess.run(
                    ["git", "-C", str(ROOT), "log", "-1", "--format=%ct"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
    except (OSError, subprocess.CalledProcessError, ValueError):
        pass
    return int(time.time())


def revision() -> str:
    """The commit built (``git rev-parse HEAD``), ``unknown`` without git."""
    try:
        return subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


@dataclass(frozen=True)
class Built:
    """One image written: its name, OCI archive, SBOM, manifest digest, size and build time."""

    name: str
    archive: Path
    sbom: Path | None
    digest: str
    size: int
    seconds: float


def archive_digest(archive: Path) -> tuple[str, int]:
    """The manifest digest of the (single) image in an OCI archive, and the image's size
    in bytes (config and layers as stored, compressed)."""
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        desc = index["manifests"][0]
        digest = desc["digest"]
        manifest = json.load(tar.extractfile(f"blobs/sha256/{digest.split(':')[1]}"))  # type: ignore[arg-type]
    if manifest.get("mediaType", desc.get("mediaType", "")).endswith("index.v1+json"):
        inner = manifest["manifests"][0]
        with tarfile.open(archive) as tar:
            manifest = json.load(tar.extractfile(f"blobs/sha256/{inner['digest'].split(':')[1]}"))  # type: ignore[arg-type]
    size = manifest["config"]["size"] + sum(layer["size"] for layer in manifest["layers"])
    return digest, size


def build_image(
    addr: str, name: str, version: str, out: Path, epoch: int, sbom: bool = True, cache: bool = True
) -> Built:
    """Build image ``name`` (a key of :data:`IMAGES`) as ``name:version`` into
    ``out/<name>-<version>.oci.tar`` (and its SBOM); ``cache=False``: every step runs again
    (``--no-cache``). Raises DevclusterError."""
    dockerfile, context = IMAGES[name]
    bases = ensure_bases(from_names(dockerfile))
    tools = ensure_buildkit()
    out.mkdir(parents=True, exist_ok=True)
    archive = out / f"{name}-{version}.oci.tar"
    partial = archive.with_suffix(".partial")
    cmd = [
        str(tools / "buildctl"),
        "--addr",
        addr,
        "build",
        "--progress",
        "plain",
        "--frontend",
        "dockerfile.v0",
        "--local",
        f"context={context}",
        "--local",
        f"dockerfile={dockerfile.parent}",
        "--opt",
        f"filename={dockerfile.name}",
        "--opt",
        f"build-arg:VERSION={version}",
        "--opt",
        f"build-arg:REVISION={revision()}",
        "--opt",
        f"build-arg:SOURCE_DATE_EPOCH={epoch}",
        "--output",
        f"type=oci,dest={partial},name={name}:{version},rewrite-timestamp=true,"
        "compression=gzip,force-compression=true",
    ]
    if not cache:
        cmd.append("--no-cache")
    for i, base in enumerate(bases.values()):
        store = f"base{i}"
        cmd += [
            "--oci-layout",
            f"{store}={base.layout}",
            "--opt",
            f"context:{base.name}=oci-layout://{store}@{base.digest}",
        ]
    started = time.monotonic()
    _run(
        cmd,
        f"building {name}:{version} from {dockerfile.relative_to(ROOT)}",
        out / f"{name}-{version}.build.log",
    )
    partial.chmod(0o644)
    partial.replace(archive)
    seconds = time.monotonic() - started
    digest, size = archive_digest(archive)
    spdx = None
    if sbom:
        spdx = out / f"{name}-{version}.spdx.json"
        _run(
            [str(ensure_syft()), "scan", f"oci-archive:{archive}", "-o", f"spdx-json={spdx}", "-q"],
            f"SBOM of {name}:{version} (syft)",
            out / f"{name}-{version}.sbom.log",
            env={**os.environ, "SYFT_CHECK_FOR_APP_UPDATE": "false"},
        )
    return Built(name, archive, spdx, digest, size, seconds)


def main(argv: list[str] | None = None) -> int:
    """``python hack/images.py build [--version V] [--out DIR] [--no-sbom] [IMAGE...]``."""
    parser = argparse.ArgumentParser(prog="hack/images.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the images as OCI archives (default: both)")
    b.add_argument("images", nargs="*", metavar="IMAGE", help=f"one of {', '.join(IMAGES)} (default: both)")
    b.add_argument(
        "--version", default=(ROOT / "VERSION").read_text().strip(), help="the tag (default: VERSION)"
    )
    b.add_argument("--out", type=Path, default=ROOT / "dist", help="where the archives go (default: dist)")
    b.add_argument("--no-sbom", action="store_true", help="skip the SBOMs")
    b.add_argument(
        "--no-cache", action="store_true", help="run every build step again (BuildKit's cache unused)"
    )
    args = parser.parse_args(argv)
    names = args.images or list(IMAGES)
    if unknown := [n for n in names if n not in IMAGES]:
        parser.error(f"unknown image {', '.join(unknown)} (one of {', '.join(IMAGES)})")
    epoch = source_date_epoch()
    try:
        with buildkitd() as addr:
            built = [
                build_image(
                    addr, n, args.version, args.out, epoch, sbom=not args.no_sbom, cache=not args.no_cache
                )
                for n in names
            ]
    except DevclusterError as err:
        log(f"error: {err}")
        return 1
    for img in built:
        print(
            f"{img.name}:{args.version}  {img.digest}  {img.size / 1e6:.1f} MB  built in {img.seconds:.0f}s  "
            f"{img.archive.relative_to(ROOT) if img.archive.is_relative_to(ROOT) else img.archive}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

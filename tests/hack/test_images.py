"""Pure parts of hack/images.py (``make images``): the Dockerfiles' bases, OCI layouts and
archives. No build engine runs here; the images themselves are built by ``make images``."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

import binaries
import images

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("dockerfile", "names"),
    [
        ("Dockerfile", ["python:3.11.14-slim-bookworm"]),
        ("cni/Dockerfile", ["golang:1.26.8-bookworm", "busybox:1.37.0-musl"]),
    ],
    ids=["scheduler", "cni"],
)
def test_every_base_the_dockerfiles_pull_is_one_made_here(dockerfile: str, names: list[str]) -> None:
    """The names BuildKit is given as named contexts are the Dockerfiles' own FROM names,
    so the files build unchanged elsewhere; a new FROM without a local base fails here."""
    got = images.from_names(ROOT / dockerfile)
    assert got == names
    assert [images._kind(n) for n in got] == [n.split(":")[0] for n in names]


def test_from_names_leaves_out_stages_scratch_and_platforms(tmp_path: Path) -> None:
    df = tmp_path / "Dockerfile"
    df.write_text(
        "FROM --platform=linux/amd64 golang:1.26 AS build\n"
        "FROM build AS test\n"
        "from scratch\n"
        "FROM docker.io/library/python:3.11-slim@sha256:" + "a" * 64 + "\n"
        "FROM golang:1.26\n"
    )
    assert images.from_names(df) == ["golang:1.26", "docker.io/library/python:3.11-slim@sha256:" + "a" * 64]
    assert images._kind("docker.io/library/python:3.11-slim@sha256:" + "a" * 64) == "python"


def test_a_base_no_recipe_makes_is_a_clear_error() -> None:
    with pytest.raises(binaries.DevclusterError, match=r"no local base for FROM alpine:3\.20"):
        images._kind("alpine:3.20")


def _rootfs(path: Path, content: bytes) -> Path:
    with tarfile.open(path, "w") as tar:
        binaries._tar_add(tar, "bin/hello", data=content)
    return path


def test_an_oci_layout_is_deterministic_and_names_its_layer(tmp_path: Path) -> None:
    layer = _rootfs(tmp_path / "root.tar", b"hello")
    config = {"Env": ["PATH=/bin"], "Cmd": ["hello"]}
    first = images.oci_layout(tmp_path / "a", layer, config, "test")
    again = images.oci_layout(tmp_path / "b", layer, config, "test")
    other = images.oci_layout(tmp_path / "c", layer, {**config, "Cmd": ["sh"]}, "test")
    assert first == again != other
    index = json.loads((tmp_path / "a" / "index.json").read_text())
    assert index["manifests"][0]["digest"] == first
    blobs = tmp_path / "a" / "blobs" / "sha256"
    manifest = json.loads((blobs / first.split(":")[1]).read_text())
    image_config = json.loads((blobs / manifest["config"]["digest"].split(":")[1]).read_text())
    layer_digest = "sha256:" + hashlib.sha256(layer.read_bytes()).hexdigest()
    assert manifest["layers"][0]["digest"] == image_config["rootfs"]["diff_ids"][0] == layer_digest
    assert image_config["config"] == config
    for blob in blobs.iterdir():  # every blob is stored under its own digest
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name


def test_archive_digest_reads_the_manifest_of_an_oci_archive(tmp_path: Path) -> None:
    out = tmp_path / "img.tar"
    binaries.oci_archive(out, "example.test/hello:1", {"bin/hello": b"hi"}, {}, {"Cmd": ["/bin/hello"]})
    digest, size = images.archive_digest(out)
    with tarfile.open(out) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        manifest = json.load(tar.extractfile(f"blobs/sha256/{digest.split(':')[1]}"))  # type: ignore[arg-type]
    assert digest == index["manifests"][0]["digest"]
    assert size == manifest["config"]["size"] + manifest["layers"][0]["size"] > 0

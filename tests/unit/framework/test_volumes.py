"""framework/volumes: the storage views parsed from raw bodies, malformed ones refused, and
the pod's volume fields of framework/types (no server)."""

from __future__ import annotations

from typing import Any

import pytest

from ipscheduler.framework import events
from ipscheduler.framework.interface import EventResource
from ipscheduler.framework.types import DiskVolume, PodInfo
from ipscheduler.framework.volumes import (
    CSINodeInfo,
    MapVolumeListers,
    PVCInfo,
    PVInfo,
    StorageClassInfo,
    not_found,
)
from tests.builders import (
    claim_volume,
    csi_node_body,
    ephemeral_volume,
    pv_body,
    pvc_body,
    storage_class_body,
    volume_pod,
)

MALFORMED: list[tuple[str, Any, dict[str, Any]]] = [
    ("pvc-no-metadata", PVCInfo, {"spec": {}}),
    ("pvc-no-name", PVCInfo, {"metadata": {"namespace": "ns"}}),
    ("pvc-no-namespace", PVCInfo, {"metadata": {"name": "c"}}),
    ("pvc-name-not-a-string", PVCInfo, {"metadata": {"name": 7, "namespace": "ns"}}),
    ("pv-no-name", PVInfo, {"metadata": {}, "spec": {"csi": {"driver": "d"}}}),
    ("pv-metadata-a-list", PVInfo, {"metadata": ["x"]}),
    ("class-no-name", StorageClassInfo, {"provisioner": "p"}),
    ("csinode-no-name", CSINodeInfo, {"metadata": {"name": ""}, "spec": {"drivers": []}}),
]


@pytest.mark.parametrize(("kind", "body"), [pytest.param(*c[1:], id=c[0]) for c in MALFORMED])
def test_malformed_objects_are_refused(kind: Any, body: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="metadata"):
        kind.from_obj(body)


def test_a_claim_parses() -> None:
    got = PVCInfo.from_obj(
        pvc_body("data", modes=["ReadWriteOncePod"], volume="pv-1", storage_class="fast", owner_uid="pod-uid")
    )
    assert (got.key, got.access_modes, got.volume_name, got.storage_class, got.owner_uid, got.storage) == (
        "ns/data",
        ("ReadWriteOncePod",),
        "pv-1",
        "fast",
        "pod-uid",
        "1Gi",
    )


def test_the_beta_class_annotation_wins_over_the_spec() -> None:
    body = pvc_body(
        "data", storage_class="spec", annotations={"volume.beta.kubernetes.io/storage-class": "beta"}
    )
    assert PVCInfo.from_obj(body).storage_class == "beta"


def test_fields_of_the_wrong_type_read_as_absent() -> None:
    body = {
        "metadata": {"name": "c", "namespace": "ns", "annotations": ["x"]},
        "spec": {
            "accessModes": "ReadWriteOnce",
            "volumeName": 3,
            "resources": {"requests": {"storage": True}},
        },
    }
    got = PVCInfo.from_obj(body)
    assert (got.access_modes, got.volume_name, got.storage, got.annotations) == ((), "", "", {})


def test_a_volume_parses() -> None:
    affinity = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}]
    }
    got = PVInfo.from_obj(
        pv_body(
            "pv-1",
            labels={"topology.kubernetes.io/zone": "a"},
            csi=("d", "h"),
            node_affinity=affinity,
            claim="ns/data",
        )
    )
    assert (got.csi_driver, got.csi_handle, got.node_affinity, got.claim_ref, got.labels) == (
        "d",
        "h",
        affinity,
        "ns/data",
        {"topology.kubernetes.io/zone": "a"},
    )
    assert PVInfo.from_obj(pv_body("pv-2")).csi_driver == ""


def test_a_storage_class_parses() -> None:
    assert StorageClassInfo.from_obj(
        storage_class_body("s", "WaitForFirstConsumer", "p")
    ) == StorageClassInfo("s", "p", "WaitForFirstConsumer")
    assert StorageClassInfo.from_obj(storage_class_body("s", None)).volume_binding_mode is None


def test_a_csinode_keeps_the_counts_it_can_read() -> None:
    body = csi_node_body("n1", a_example=3, b_example=None)
    body["spec"]["drivers"] += [
        {"name": "c.example", "allocatable": {"count": -1}},
        {"allocatable": {"count": 9}},
    ]
    got = CSINodeInfo.from_obj(body)
    assert got.limits == {"a.example": 3}
    assert got.drivers == ("a.example", "b.example", "c.example")


def test_map_listers_answer_by_key() -> None:
    pvc = PVCInfo.from_obj(pvc_body("data"))
    listers = MapVolumeListers.of(pvc, PVInfo(name="pv"), StorageClassInfo(name="s"), CSINodeInfo(name="n"))
    assert listers.pvc("ns", "data") is pvc and listers.pvc("other", "data") is None
    assert (listers.pv("pv"), listers.storage_class("s"), listers.csi_node("n")) == (
        PVInfo(name="pv"),
        StorageClassInfo(name="s"),
        CSINodeInfo(name="n"),
    )
    assert MapVolumeListers().pvc("ns", "data") is None


def test_not_found_is_the_api_servers_message() -> None:
    assert not_found("persistentvolumeclaim", "data") == 'persistentvolumeclaim "data" not found'


# --------------------------------------------------------------------------- the pod's volumes


def test_a_pods_volumes_are_parsed_and_kept_in_the_lean_form() -> None:
    p = volume_pod(
        claim_volume("data"),
        claim_volume(""),
        ephemeral_volume("scratch"),
        {"name": "g", "gcePersistentDisk": {"pdName": "pd", "readOnly": True}},
        {"name": "r", "rbd": {"monitors": ["m1", 7], "image": "img"}},
        {"name": "e", "emptyDir": {}},
        "not-a-volume",
        name="web",
    )
    assert p.pvc_names == ("data", "")
    assert p.ephemeral_pvc_names == ("web-scratch",)
    assert p.disk_volumes == (
        DiskVolume("gcePersistentDisk", "pd", read_only=True),
        DiskVolume("rbd", "rbd/img", monitors=("m1",)),
    )
    lean = p.lean()
    assert (lean.pvc_names, lean.ephemeral_pvc_names, lean.disk_volumes) == (
        p.pvc_names,
        p.ephemeral_pvc_names,
        p.disk_volumes,
    )


def test_a_pod_without_volumes_has_none() -> None:
    p = PodInfo.from_obj({"metadata": {"uid": "u", "namespace": "ns", "name": "p"}, "spec": {"volumes": "x"}})
    assert (p.pvc_names, p.ephemeral_pvc_names, p.disk_volumes) == ((), (), ())


# --------------------------------------------------------------------------- events


@pytest.mark.parametrize(
    ("old", "new", "label"),
    [
        pytest.param(None, PVInfo("a"), "PersistentVolumeAdd", id="add"),
        pytest.param(PVInfo("a"), PVInfo("a", phase="Bound"), "PersistentVolumeUpdate", id="update"),
        pytest.param(PVInfo("a"), None, "PersistentVolumeDelete", id="delete"),
        pytest.param(PVInfo("a"), PVInfo("a"), None, id="unchanged"),
        pytest.param(None, None, None, id="nothing"),
    ],
)
def test_volume_event(old: Any, new: Any, label: str | None) -> None:
    got = events.volume_event(EventResource.PERSISTENT_VOLUME, old, new)
    assert (got.label if got is not None else None) == label
    if got is not None:
        assert got.resource == "PersistentVolume"

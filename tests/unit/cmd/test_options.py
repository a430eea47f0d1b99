"""cmd/options: the options of ``ipscheduler run`` — the serving address, and RunConfig's
defaults, which are what the flags give but where the flags decide otherwise."""

from __future__ import annotations

import dataclasses
import re
import socket

import pytest

from ipscheduler.cmd import cli, flags
from ipscheduler.cmd.options import RunConfig, SecureServing
from ipscheduler.framework.config import SchedulerConfiguration


@pytest.mark.parametrize(
    ("bind_address", "port", "address"),
    [
        ("0.0.0.0", 10259, "0.0.0.0:10259"),
        ("127.0.0.1", 8443, "127.0.0.1:8443"),
        ("::", 10259, "[::]:10259"),
        ("fd00::1", 10259, "[fd00::1]:10259"),
        ("::ffff:10.0.0.1", 0, "[::ffff:10.0.0.1]:0"),
    ],
    ids=["every-ipv4-address", "ipv4", "every-ipv6-address", "ipv6", "ipv4-mapped-ipv6"],
)
def test_the_serving_address_brackets_an_ipv6_host(bind_address: str, port: int, address: str) -> None:
    assert SecureServing(port=port, bind_address=bind_address).address == address


def test_secure_serving_defaults_are_kube_schedulers() -> None:
    s = SecureServing()
    assert (s.address, s.always_allow_paths) == ("0.0.0.0:10259", ("/healthz", "/readyz", "/livez"))
    assert (s.tls_cert_file, s.tls_private_key_file, s.client_ca_file) == (None, None, None)


def test_each_run_config_is_a_replica_of_its_own() -> None:
    """The Lease holder identity and reservedBy prefix: ``<hostname>_<random>``, never shared."""
    a, b = RunConfig().identity, RunConfig().identity
    assert a != b
    assert re.fullmatch(rf"{re.escape(socket.gethostname())}_[0-9a-f-]{{36}}", a)


def test_the_flags_give_run_configs_defaults_but_the_election_and_the_configuration() -> None:
    """``ipscheduler run`` without flags elects a leader (as kube-scheduler) and reads the
    default configuration; everything else is RunConfig's own default."""
    from_flags = flags.run_config(cli.build_parser().parse_args(["run"]))
    defaults = RunConfig()
    differ = {
        f.name
        for f in dataclasses.fields(RunConfig)
        if getattr(from_flags, f.name) != getattr(defaults, f.name) and f.name != "identity"
    }
    assert differ == {"leader_elect", "config"}
    assert (from_flags.leader_elect, defaults.leader_elect) == (True, False)
    assert (from_flags.config, defaults.config) == (SchedulerConfiguration(), None)

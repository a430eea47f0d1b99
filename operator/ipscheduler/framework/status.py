"""Statuses of plugin calls: a :class:`Code`, the reasons, the plugin (kube-scheduler's
``framework.Status``, ``pkg/scheduler/framework/interface.go``). A module of its own so
that what plugins return needs nothing else of the framework (``waiting`` imports it, and
``interface`` re-exports it)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Code(enum.Enum):
    """Result code of a plugin call (framework ``Code``)."""

    SUCCESS = "Success"
    ERROR = "Error"
    UNSCHEDULABLE = "Unschedulable"
    UNSCHEDULABLE_AND_UNRESOLVABLE = "UnschedulableAndUnresolvable"
    WAIT = "Wait"
    """A Permit plugin holds the pod (with a timeout) until it is allowed or rejected."""
    SKIP = "Skip"


@dataclass(frozen=True)
class Status:
    """What a plugin call returned: a code, human-readable reasons, the plugin.

    ``reasons`` are the strings that go into the ``FailedScheduling``
    histogram, e.g. ``"node(s) had untolerated taint {dedicated: gpu}"``.
    """

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""

    @classmethod
    def success(cls) -> Status:
        return _SUCCESS

    @classmethod
    def unschedulable(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.UNSCHEDULABLE, reasons, plugin)

    @classmethod
    def unresolvable(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons, plugin)

    @classmethod
    def error(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.ERROR, reasons, plugin)

    @classmethod
    def skip(cls) -> Status:
        return cls(Code.SKIP)

    @classmethod
    def wait(cls, plugin: str = "") -> Status:
        return cls(Code.WAIT, (), plugin)

    def is_success(self) -> bool:
        return self.code is Code.SUCCESS

    def is_rejected(self) -> bool:
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)


_SUCCESS = Status()

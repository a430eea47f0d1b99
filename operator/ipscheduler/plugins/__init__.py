"""Scheduling plugins, one module per plugin (a package of its parts where upstream splits
one: ``volumebinding/``), mirroring kube-scheduler's in-tree plugins."""

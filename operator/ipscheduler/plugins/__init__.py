"""Scheduling plugins, one module per plugin, mirroring kube-scheduler's in-tree plugins."""

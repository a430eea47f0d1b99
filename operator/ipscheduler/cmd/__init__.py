"""Wiring and entry points: the CLI, ``ipscheduler run`` (kopf handlers, leader election),
``explain``, and the plugin registry that builds a profile.
"""

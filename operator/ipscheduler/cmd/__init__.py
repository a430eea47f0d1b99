"""Wiring and entry points: the CLI, ``ipscheduler run`` (kopf handlers, leader election),
``explain``, and profiles (the plugin registry, the default plugins, building a profile).
"""

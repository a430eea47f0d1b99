"""Contracts and types of the scheduling framework: extension-point Protocols, Status,
CycleState (interface), pod/node views (types), the runtime that runs a profile's plugins,
the configuration model. No I/O, nothing about NodeIPPools.
"""

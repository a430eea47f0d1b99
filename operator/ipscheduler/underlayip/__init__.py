"""Everything that knows a NodeIPPool: models (the CRD), address math, the pure allocator
and repair planner, the UnderlayIP plugin, the Multus hand-off and ``ipscheduler check``.
"""

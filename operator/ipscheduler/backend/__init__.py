"""Scheduling machinery below the scheduler: the queue, the cluster cache, the bound-pods
index and the task supervisor.
"""

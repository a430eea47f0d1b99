"""The scheduling loop: scheduling and binding cycles (kube-scheduler's schedule_one.go)."""

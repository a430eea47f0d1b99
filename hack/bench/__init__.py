"""Benchmark: ip-scheduler against kube-scheduler, same workload, same run.

On a dev cluster (hack/devcluster.py) with N kwok nodes, every phase measures
until all its pods are bound, each scheduler on its own process:

- ``ip-scheduler``: NodeIPPools of C addresses per node;
- ``kube-scheduler (qps 50)``: the same Kubernetes release with its shipped
  client QPS/burst (50/100), the capacity as extended resource
  ``ipscheduler.io/underlay-ip: C`` on every node and a request of 1 per pod;
- ``kube-scheduler (qps 1000)``: the same with ``qps: 1000, burst: 2000``;
- ``kube-scheduler + ip-scheduler extender``: kube-scheduler (qps 1000) calling
  ``ipscheduler extender`` for filter, prioritize, bind and preempt (the configuration of
  ``deploy/extender/``); pods request the extended resource as for kube-scheduler, and get
  an address from the node's pool as with ip-scheduler (RSS and CPU: the extender's).

Phases (``--phases``, all but ``running`` and the several-address phases by default, in
this order):

- ``ours``, ``kube50``, ``kube1000``, ``extender`` (arrival): the scheduler runs, then P pods
  are created (all at once, or at a steady R pods/s);
- ``restart``: ip-scheduler started with N pools and one Pending pod: process
  start → that pod bound;
- ``backlog-ours``, ``backlog-kube50``, ``backlog-kube1000``: B pods
  (``BACKLOG_PODS`` per preset, ``--backlog-pods``) are created and pending
  first, then a fresh scheduler process starts, as after a failover, a rollout
  or a scale-up faster than binding: time from process start to the first bind,
  and the drain rate (pods/s from process start to the last bind);
- ``contended-ours``, ``contended-kube50``, ``contended-kube1000``: the backlog phases
  again, while a client LISTs every pod of the cluster every ``CONTEND_INTERVAL`` s (as a
  dashboard or ``kubectl get pods -A -w`` does); the summary line gives each scheduler's
  drain under contention as a share of its drain without (:func:`report.contention_summary`);
  the contending LISTs are left out of the requests per pod;
- ``failover``: two ip-scheduler replicas with leader election over a backlog of
  B pods, the leader SIGKILLed when half are bound: the standby's lease
  takeover, first bind after the kill, and drain rate;
- ``dualstack-single``, ``dualstack-dual``, ``interfaces-1``, ``interfaces-16`` (not in the
  default list: asked for by name; :mod:`.multi`): pods with several addresses, arriving as in
  ``ours``, over pools of their own that hold exactly the pods (the bench's own pools withheld
  from them meanwhile): single-stack IPv4 pods, then ``RequireDualStack`` pods (one IPv4 and one
  IPv6 address from one pool that declares both; Spiderpool's IPAM benchmark), then pods with 1
  and 16 further interfaces, each from that interface's pool of the node
  (``ipscheduler.io/interface-pools``; whereabouts#313's pods). Each row also checks every pod's
  addresses (both families; one entry per interface in ``ipscheduler.io/interfaces``, each from
  its pool) and that none is given twice; its own table too (:func:`report.multi_table`: pool
  status writes per bound pod). ``interfaces-16`` at the small preset (1700 pools) did not
  finish within its time-out on our machine: run these phases with ``--nodes``/``--pods``
  (docs/performance.md, "Dual-stack pods and further interfaces");
- ``running`` (not in the default list: it needs root, and builds or fetches the node
  binaries the first time): pods that really run, on one real node (containerd, runc and
  a kubelet on this machine, ``devcluster.Cluster.start_real_node``) started for the phase
  and torn down after it. ``--running-pods`` N busybox pods created at once, with
  ip-scheduler (a NodeIPPool of N addresses, ``ipscheduler-ipam`` as the CNI IPAM), then
  with kube-scheduler (qps 1000) and the reference ``host-local`` IPAM on the same bridge:
  create → Running (p50/p99, until all Running, pods/s, the node's CPU per pod), then all
  deleted at once, every third forced (``--running-forced-every``): deletion → address
  released (ours: the allocation gone from the pool's status; host-local: its reservation
  file gone), graceful and forced apart, → pod object gone, → CNI DEL (the pod's veth off
  the bridge), and the pool status writes per deleted pod. Its own table
  (:func:`report.running_table`), ``running`` in the JSON. Without root it is skipped, saying why
  (:func:`running.running_phases`);
- ``running-interfaces-1``, ``running-interfaces-16`` (not in the default list, root, as
  ``running``; :mod:`.multus`): whereabouts#313's pods on a real node whose CNI is Multus' thin
  plugin. ``--running-interface-pods`` (default 16) busybox pods with 1, then 16, further
  interfaces (a NetworkAttachmentDefinition each: a bridge of its own with ``ipscheduler-ipam``;
  a NodeIPPool each, and one for eth0) created at once with ip-scheduler: create → Running
  (p50/p99, all Running, pods/s and interfaces/s, the node's CPU per pod, pool status writes
  and API requests per pod), every Running pod checked (its interfaces' addresses against
  ``ipscheduler.io/interfaces`` and Multus' ``network-status``), then all deleted, → all gone
  and released. Its own table (:func:`report.interfaces_table`), ``running_interfaces`` in the JSON.

Reported per phase: throughput (pods/s from the first create, or the
scheduler's start for a backlog, to the last bind), create→bound latency
p50/p90/p99 (ms, from watch events timestamped in this client), API server
requests per bound pod (``apiserver_request_total`` delta over the phase, all
clients, so every phase carries the same background), the scheduler's peak
RSS (MB) and CPU seconds, and correctness (no node over C; our addresses
unique and inside the node's pool). Output: a Markdown table on stdout, a JSON
file and, when matplotlib is installed, a PNG of bound pods over time.

    make bench                                               # --preset small
    .venv/bin/python -m hack.bench --preset small            # 100 nodes x 20, 1000 pods
    .venv/bin/python -m hack.bench --preset small --rate 50  # steady arrival, 50 pods/s
    .venv/bin/python -m hack.bench --preset large            # 1000 nodes x 20, 10000 pods, backlog 5000
    .venv/bin/python -m hack.bench --preset xlarge           # 5000 nodes x 20, 20000 pods, backlog 20000
                                                             # (kwok leases 240 s: NODE_LEASE_SECONDS)
    sudo .venv/bin/python -m hack.bench --preset tiny --phases running   # one real node, 50 pods
    sudo .venv/bin/python -m hack.bench --nodes 1 --phases running-interfaces-1,running-interfaces-16
    .venv/bin/python -m hack.bench --nodes 10 --pods 1000 --phases dualstack-single,dualstack-dual
    .venv/bin/python -m hack.bench --nodes 2 --pods 128 --phases interfaces-1,interfaces-16

Run from the repository's root (``-m hack.bench``: this folder is a package). The modules, by
job: :mod:`.cluster` (what the bench does to the API server and reads from /proc: namespaces,
pools, watches, request counts, CPU), :mod:`.drivers` (starting and stopping each scheduler
under test, and py-spy), :mod:`.phases` (the phases on kwok nodes, each measured to its row),
:mod:`.multi` (the pools, pods and checks of the dual-stack and interface phases),
:mod:`.running` (the ``running`` phase on a real node), :mod:`.report` (tables, summary
lines, the JSON document and the PNG) and :mod:`.__main__` (the command line).
"""

from __future__ import annotations

import sys
from pathlib import Path

HACK = Path(__file__).resolve().parents[1]
"""``hack/``: its tools (``devcluster``, ``realnode``, ``binaries``) are imported by name, as
they import each other."""
if str(HACK) not in sys.path:
    sys.path.insert(0, str(HACK))

"""The node agent: collect usage from /proc and cgroups, aggregate it like koordlet, report it.

Stages, each a module with one job:
- `procfs`, `cgroups`: pure readers of the node's and the pods' counters (fixture trees work too);
- `collector`: the `Collector` protocol and `RealCollector`, one `sample()` → one frozen `Sample`;
- `synthetic`: `SyntheticCollector`, plausible load for simulated nodes;
- `classify`: a pod's priority class and QoS class by the ecosystem's conventions;
- `aggregate`: time windows, averages and percentiles over the samples;
- `report`, `heartbeat`: the NodeMetric report to the leader and the node Lease.
"""

"""Load-aware scheduling, Koordinator's LoadAwareScheduling semantics, as pure code. No I/O.

`load_aware_config` is the `load-aware-config` key of colocation-config; `pod_estimate` says what a
pod will use (Koordinator's estimator); `node_figures` reduces a node's NodeMetric and the pods
bound to it to the numbers a request reads; `load_aware_filter` and `load_aware_score` judge
candidate nodes; `tentative_placements` counts the pods ranked first that no watch has shown bound.
The scheduler extender sits on top: `bound_pods` (the pod cache), `node_figure_cache` (each node's
figures, computed ahead of requests), `extender_wire` (the scheduler's JSON) and `extender_answers`.
"""

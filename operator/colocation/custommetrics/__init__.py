"""custom.metrics.k8s.io and external.metrics.k8s.io, served from every replica's memory.

Agents send the samples they scrape (`PUT …/nodemetrics/{node}/samples`, `sample_batches`); the
leader keeps them per series (`series_store`) and feeds what it accepted to the standbys
(`sample_feed`), each of which keeps a copy (`sample_follower`). Every replica answers the metric
APIs from its series and from its NodeMetric store (`builtin_metrics`, `metrics_query`,
`suffix_aggregations`), in the shapes HPA and other clients read (`metric_value_shapes`).
`custom_metrics_routes` is the API group the API server serves, with the samples upload it
accepts for us and the feed; this package imports neither the server nor the concrete store, only
`apimachinery.served_apigroups` and `nodemetrics.storage_interface` (and, to reach the leader,
`kube.leader_connection`).
"""

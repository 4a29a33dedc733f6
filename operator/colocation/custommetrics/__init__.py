"""custom.metrics.k8s.io and external.metrics.k8s.io, served from the leader's memory.

Agents send the samples they scrape (`PUT …/nodemetrics/{node}/samples`, `sample_batches`); the
leader keeps them per series (`series_store`), answers the metric APIs from them and from the
NodeMetric store (`builtin_metrics`, `metrics_query`, `suffix_aggregations`), in the shapes HPA
and other clients read (`metric_value_shapes`). `custom_metrics_routes` is the API group the API
server serves, and the samples upload it accepts for us; this package imports neither the server
nor the concrete store, only `apimachinery.served_apigroups` and `nodemetrics.storage_interface`.
"""

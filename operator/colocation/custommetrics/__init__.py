"""custom.metrics.k8s.io and external.metrics.k8s.io, served from the leader's memory.

Agents send the samples they scrape (`PUT …/nodemetrics/{node}/samples`, `samples`); the
leader keeps them per series (`series`), answers the metric APIs from them and from the
NodeMetric store (`builtin`, `query`, `aggregation`), in the shapes HPA and other clients read
(`shapes`). `routes` is the API group the API server serves, and the samples upload it accepts
for us; this package imports neither the server nor the concrete store, only
`apimachinery.served_apigroups` and `nodemetrics.storage_interface`.
"""

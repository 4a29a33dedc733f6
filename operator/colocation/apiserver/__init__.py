"""The operator's aggregated API, metrics.colocation.dev/v1alpha1 NodeMetric, served from memory.

`models` validates an agent's report, `store` keeps the latest per node and serves list and
watch from bytes serialized once; the HTTP transport, authentication and authorization sit on
top of them.
"""

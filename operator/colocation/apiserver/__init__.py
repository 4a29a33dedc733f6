"""The operator's aggregated API server: HTTP over the storage stage, for every API group registered into it.

`generic_apiserver` is the shell (errors, authentication, discovery, OpenAPI, health, metrics)
and serves any `apimachinery.served_apigroups.ApiGroup`; `nodemetric_routes` (NodeMetric, with
its `nodemetric_openapi` and `nodemetric_table`) and `resource_metrics_routes` (metrics.k8s.io)
are the groups of this package, custom and external metrics are `colocation.custommetrics`'.
Authentication and authorization are delegated to kube-apiserver (`delegated_authentication`,
`delegated_authorization`, `kube_reviewers`). Data comes from `colocation.nodemetrics` through
its storage interface; the operator's manager builds the groups and registers them.
"""

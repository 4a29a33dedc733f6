"""The storage stage: the latest NodeMetric of every node, in memory, and everything that keeps it.

`report_schema` is the object and the validation of an agent's report; `nodemetric_store` keeps the
latest per node, with `resource_versions` (the clock) and `nodemetric_watch_window` (the event
window and the fan-out to watches); `silent_node_expiry` drops silent nodes on the leader;
`standby_follower` keeps a standby's copy from the leader's feed, and `consistent_reads` makes
its reads of the most recent data wait for the copy to hold what the leader had; `resource_metrics_view` reads
entries as cpu and memory usage. Readers depend on `storage_interface`, not on the store. Nothing here knows of HTTP
serving: the API server, the controllers and custom metrics all sit on top.
"""

"""NodeMetrics on NATS JetStream: one stream, a key per node, read back by every replica.

`nats_connection` connects; `stream_reader` reads a stream in order; `nodemetric_log` creates the
NodeMetric stream and appends to it with compare-and-set; `log_follower` applies it, in order, to
a replica's store; `log_ingest` writes an agent's report from any replica; `sample_log` carries
custom metric samples between replicas; `replica_presence` tells which replicas take agents'
writes; `jetstream_store` is what the operator process holds (`--store nats`). Limits, stated
plainly: a write waits for JetStream's acknowledgement (two of three servers); the stream's
sequence is the resourceVersion, the same on every replica; a replica serves what it has applied.
"""

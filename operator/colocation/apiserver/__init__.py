"""The operator's aggregated API server: transport, auth, store, watch."""

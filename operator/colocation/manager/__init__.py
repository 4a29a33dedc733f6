"""The operator process: wiring of election, API server, standby replication and (later) controllers."""

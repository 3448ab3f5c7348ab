"""The operator process: its settings, kopf wiring, leader election and HTTP server."""

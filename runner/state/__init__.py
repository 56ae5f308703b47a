"""Deployment state in the store: deployed records and history, leases, savepoints, continuation."""

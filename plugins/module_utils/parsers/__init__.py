"""The parsers the on-host code needs (the controller's full set: orchestrator/parsers/)."""

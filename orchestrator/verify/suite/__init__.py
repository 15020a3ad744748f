"""The testinfra suite run by ``provision verify`` (see ``orchestrator.verify``)."""

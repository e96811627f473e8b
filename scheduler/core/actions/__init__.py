"""Session actions, run in the configured order."""

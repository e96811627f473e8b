"""Policy plugins; each registers callbacks on the session when it opens."""

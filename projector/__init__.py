"""projector."""

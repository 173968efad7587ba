"""cupric.optix (under construction)."""

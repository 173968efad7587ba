"""cupric.cublas (under construction)."""

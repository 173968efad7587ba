"""cupric.cudnn (under construction)."""

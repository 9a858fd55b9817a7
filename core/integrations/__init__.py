"""Adapters that let other agent frameworks keep their memory in ours (each behind an optional extra)."""

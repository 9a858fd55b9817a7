"""Qt item models: thin adapters over plain-Python state (no SQL, no formatting rules of their own)."""

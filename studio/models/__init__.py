"""Qt item models (thin adapters) and the plain-Python state and formatting they adapt."""

"""Validation: measured runs joined with the simulator's predictions (replay and distribution modes)."""

"""Single-request engines (chain, analytic, DES) and the serving simulator."""

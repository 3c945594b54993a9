"""The ``specsim`` command line: composes the simulator's commands (``simulator.cli``) with the
``calibrate``, ``validate`` and ``study`` groups (``specsim_cli.main``).

Imports point one way: this package may import ``simulator``, ``calibrate`` and ``validate``;
``calibrate`` and ``validate`` may import ``simulator``; ``simulator`` imports neither.
"""

"""Speculative-decoding study, its measurements: greedy and speculative decoding on real small models (torch, CPU),
teacher-forced draft matches replayed into acceptance, a distilled draft and an EAGLE-style draft head.

``experiment.measure_study`` and ``draft_head_runs.measure_draft_head`` measure; ``validate.study`` compares the
measurements with the simulator's predictions and writes the reports. Entry points: ``specsim study specdecode`` /
``specsim study draft-head`` (``calibrate/measure/study/cli.py``)."""

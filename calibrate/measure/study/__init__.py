"""Speculative-decoding study (issue 6): measured acceptance, speedup and rejections on real
small models, the three predictions (i.i.d. closed form, per-position form, full simulator),
a distilled draft, and the what-if transfer to the reference deployments.

Entry point: ``specsim study specdecode`` (``calibrate/measure/study/cli.py``) -> ``run.run_study``.
"""

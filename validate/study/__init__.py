"""Speculative-decoding study, its comparison and reports: measured acceptance, speedup and rejections on real small
models (``calibrate.measure.study``) beside the three predictions (i.i.d. closed form, per-position form, full
simulator), and the what-if transfer to the reference deployments.

``run.run_study`` (``specsim study specdecode``) and ``draft_head_study.run_draft_head_study``
(``specsim study draft-head``) run the measurements, then compare and report."""

"""specreason-sim: cost model, workload model and engines for SpecReason / speculative decoding.

Data flows one way: scenario -> profiles (hardware, model, workload) -> cost model
-> engine (analytic | DES) -> results DataFrame -> table / report.

Rooms, in the order the work flows:

- ``inputs/``: the scenario (validated once), YAML loading, workload profiles, systems, accuracy, distributions;
- ``catalog/``: the shipped hardware and model catalogs (``catalog/model_lookup.get_model``: a name or a
  ``config.json``);
- ``cost/``: the cost model (pure functions of a deployment): pass times, cost tables, call times, memory plans;
- ``engines/``: the single-request engines behind one registry (``engines/registry.py``: analytic, DES; one result
  record), the reasoning chain they share, γ policies (``engines/gamma_choice.py``) and the serving simulator
  (``engines/serving/``);
- ``studies/``: what-if grids (``studies/whatif.py``) and capacity searches (``studies/capacity/``);
- ``report/``: tables, the capacity report and the only plotting entry (``report/plots.pyplot``).

Rooms import downstream only: inputs <- cost <- engines <- studies <- report (``paths``, ``errors`` and
``provenance`` are for every room). Where this does not hold yet: ``inputs/scenario.py`` builds deployments and
memory checks from ``cost`` and validates its SLO and serving workload with ``engines/serving``; ``catalog`` reads
its YAML through ``inputs/loading.py``; ``cost/memory_check.py`` uses the serving KV plan, ``cost/pass_time.py``
the γ rule and the rich table printer; ``studies/capacity/table.py`` prints through ``report``.
"""

__version__ = "0.1.0"

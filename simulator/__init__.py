"""specreason-sim: cost model, workload model and engines for SpecReason / speculative decoding.

Data flows one way: scenario -> profiles (hardware, model, workload) -> cost model
-> engine (analytic | DES) -> results DataFrame -> table / report.
"""

__version__ = "0.1.0"

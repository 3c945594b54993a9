"""Run the real SpecReason / SpecDecode systems on real engines, record traces, fit profiles."""

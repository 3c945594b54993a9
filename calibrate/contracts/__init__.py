"""What the stages exchange: the trace schema and its rules, spec-decoding metrics, measured op records, the call
table of measured engine calls."""

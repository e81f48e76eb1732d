"""gpulens.analyze: pure analysis over interval frames (analyze/schema.py).

Tables in, tables or records out; no I/O. The frame comes from
`gpulens.store.frames.gpu_intervals` (or is built by hand); `efficiency.classify` gives each
interval a state with its evidence, `efficiency.useful_work` the achieved TFLOP/s and the
useful-work ratio, `phases.warmup_windows` the warm-ups, `peaks` the datasheet figures.
"""

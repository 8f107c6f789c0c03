"""The comparison grid as readers ask for it: read from the store, then judged by the pure `compare`.

`pair` (the runs of two profiles and the queue's plan, one read, cached per store generation) and
`extras` (roofline % per concurrency and the correctness gate, from the grid's own runs).
"""

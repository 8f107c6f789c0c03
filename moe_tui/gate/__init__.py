"""The correctness gate: is the faster backend still right?

`probe` (send the fixed greedy prompt set to a running server, store the answers) and `correctness`
(compare a candidate's answers with the baseline's; pure).
"""

"""Investigating a verdict: what to run next to settle a cell, and the report of what was found.

`planner` (cells to investigate and the campaign that answers them), `proposals` (the proposed runs and
their cost), `store` (investigations read back from the store), `report` (what the runs showed).
"""

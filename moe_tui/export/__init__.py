"""Exports of a comparison grid and of the raw runs.

`formats` (aligned text, JSON, CSV and the writer of a whole export), `markdown` (the report with its
spec and provenance), `plot` (throughput plot files), `results` (every run as a pandas DataFrame row).
"""

"""One widget per file: the dashboard panels, the queue table, the comparison grid and charts."""

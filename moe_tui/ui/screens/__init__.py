"""One screen per file: dashboard, queue, comparison, server log, run detail and the modals."""

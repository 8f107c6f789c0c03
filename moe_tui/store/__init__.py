"""The store: one SQLite database per data dir and everything kept in it.

`db` (the `Store`: runs, samples, server starts, imports), `schema` (tables, migrations), `records`
(server starts, gate samples, the JSON every column shares), `integrity` (quick_check, backups, doctor),
`retention` (usage, archive, prune, vacuum), and the persistent run queue: `queue` (campaigns and
items), `queue_plan` (what a campaign plans per cell), `queue_spec` (the spec an item is stored with).
Only this package (and the read services built on it) issues SQL.
"""

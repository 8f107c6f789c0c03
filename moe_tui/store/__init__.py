"""The store: one SQLite database per data dir and everything kept in it.

`db` (the `Store`: opening, transactions), `runs` (run writes and reads, samples), `schema` (tables,
migrations), `records` (server starts, gate samples, the JSON every column shares), `cleanstop`
(when an open checks integrity: after an unclean stop), `integrity` (quick_check, doctor's restore),
`backup` (the one backup kept), `retention` (usage, prune, keep-samples), `archive` (streamed
archives), `space` (pages given back, what grows), and the persistent run queue: `queue`
(campaigns and items), `queue_item` (an item, its states, a filtered page), `queue_plan` (what a
campaign plans per cell), `queue_spec` (the spec an item is stored with).
Only this package (and the read services built on it) issues SQL.
"""

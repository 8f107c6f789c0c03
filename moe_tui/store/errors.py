"""What the store raises: `StoreError` and its kinds (busy, damaged, read-only).

Apart from `db` so that the integrity checks, retention and the store itself share them without
importing one another.
"""

from __future__ import annotations


class StoreError(RuntimeError):
    """The store could not be opened, read or written. The message names the file."""


class StoreBusy(StoreError):
    """Another process held the store's write lock past the busy timeout and every retry."""


class StoreDamaged(StoreError):
    """The store failed its integrity check at open: nothing is written; the message says how to recover."""


class StoreReadOnly(StoreError):
    """The store is open read-only (the file, folder or mount is not writable)."""

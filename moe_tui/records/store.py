"""The store's reports of itself: its space per profile and per campaign (`Store.usage`, `moe-tui store usage`).
See `moe_tui.records`."""

from __future__ import annotations

from typing import TypedDict


class CampaignUsageJson(TypedDict):
    id: int | None
    name: str | None
    items: int
    runs: int
    bytes: int


class ProfileUsageJson(TypedDict):
    name: str
    runs: int
    requests: int
    gpu_samples: int
    bytes: int
    first_finished: float | None
    last_finished: float | None


class StoreSpaceJson(TypedDict):
    """`store.retention.Usage.to_dict()`: what `moe-tui store usage --format json` starts from."""

    file_bytes: int
    free_bytes: int
    runs: int
    profiles: list[ProfileUsageJson]
    campaigns: list[CampaignUsageJson]

"""The emulator's memory budget per GPU and the KV pool it leaves: what SGLang derives at start.

SGLang 0.5.23 sizes its KV pool from the memory left on each GPU after the weights, the MoE
runner's workspace and the CUDA graphs, within `--mem-fraction-static` of the card
(srt/model_executor/pool_configurator.py, srt/managers/tp_worker.py `get_worker_info`), and
reports it in /server_info as `max_total_num_tokens`, with `max_req_input_len` =
min(context_len - 1, pool - 1) - 5 (srt/managers/scheduler.py `get_init_info`). So two MoE
backends on one box get different pools: the pool is derived, not a setting
(`moe_tui.judgement.SERVER_ARGS_DERIVED`).

The emulator keeps its modelled pool scale (`TOKEN_POOL_SIZE` slots for the reference budget: the
default performance row's workspace at the default memory fraction on the default card, RTX PRO
6000, with an fp8 KV cache) and scales it by the KV memory each start really leaves and by the KV
bytes per token, so a backend with a larger workspace (`moe_workspace_gib` in backends.toml), a
lower memory fraction or a bfloat16 KV cache gets a proportionally smaller pool and a card with
more memory a larger one, as on a GPU. Pure arithmetic, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

TOKEN_POOL_SIZE = 4_000_000  # modelled KV slots at the reference budget
WEIGHTS_GIB = 56.3  # per GPU, GLM-5-NVFP4 over TP8
GRAPH_GIB = 2.1  # CUDA graphs, per GPU
DEFAULT_MEM_FRACTION = 0.85
REFERENCE_WORKSPACE_GIB = 1.0  # the default row's MoE workspace
REFERENCE_MEM_TOTAL_BYTES = 97_887 * 2**20  # the default simulated card (RTX PRO 6000 Blackwell)
GIB = 2**30


@dataclass(frozen=True)
class MemoryBudget:
    """One start's per-GPU budget and the pool it leaves."""

    mem_total_bytes: int
    mem_fraction: float
    workspace_gib: float
    kv_bytes_per_elem: float = 1.0  # fp8 KV cache (SGLang's DSA default on Blackwell); 2.0 for bfloat16

    @property
    def kv_gib(self) -> float:
        """GiB per GPU left for the KV cache (never below zero)."""
        static = self.mem_total_bytes * self.mem_fraction / GIB
        return max(0.0, static - WEIGHTS_GIB - GRAPH_GIB - self.workspace_gib)

    @staticmethod
    def reference_kv_gib() -> float:
        return MemoryBudget(REFERENCE_MEM_TOTAL_BYTES, DEFAULT_MEM_FRACTION, REFERENCE_WORKSPACE_GIB).kv_gib

    @property
    def max_total_num_tokens(self) -> int:
        return int(TOKEN_POOL_SIZE * self.kv_gib / self.reference_kv_gib() / self.kv_bytes_per_elem)

    def max_req_input_len(self, context_length: int) -> int:
        return min(context_length - 1, self.max_total_num_tokens - 1) - 5

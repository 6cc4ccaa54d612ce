# Type stubs of the native part of samdecoding (python/src/module.cc, tokenizer.cc).
from typing import Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

__version__: str
POLICIES: tuple[str, ...]
MAX_DRAFT_SIZE: int

Ids = Union[Sequence[int], npt.ArrayLike]


class Error(Exception):
    code: str
    code_value: int


class Tokenizer:
    def __init__(self, path: str) -> None: ...
    def encode(self, text: str, add_bos: bool = False) -> list[int]: ...
    def decode(self, ids: Ids) -> str: ...
    def check(self, index: "Index") -> None: ...
    sha256: str
    vocab_size: int
    bos_id: Optional[int]
    eos_id: Optional[int]
    kind: str
    path: str


class Index:
    @staticmethod
    def open(path: str, tokenizer: Union[str, Tokenizer, None] = None, read: bool = False,
             prepare: bool = True, verify: bool = False,
             child_records: bool = False) -> "Index": ...
    def verify(self) -> None: ...
    def metadata_json(self) -> str: ...
    def metadata(self) -> dict: ...
    path: str
    prepared: bool
    prepared_bytes: int
    child_record_bytes: int
    vocab_size: int
    num_tokens: int
    num_documents: int
    num_states: int
    num_edges: int
    bos_id: Optional[int]
    eos_id: Optional[int]
    version: tuple[int, int]
    tokenizer_sha256: Optional[str]
    file_size: int


class ShardSet:
    @staticmethod
    def open(path: str, tokenizer: Union[str, Tokenizer, None] = None, verify: bool = False,
             child_records: bool = False) -> "ShardSet": ...
    num_shards: int
    num_tokens: int
    num_documents: int
    vocab_size: int
    shard_paths: list[str]


class Draft:
    def __len__(self) -> int: ...
    tokens: npt.NDArray[np.uint32]
    parents: npt.NDArray[np.int32]
    depths: npt.NDArray[np.uint32]
    source: str
    source_id: int
    match_len: int


class Rng:
    def __init__(self, seed: int = 0) -> None: ...
    def seed(self, seed: int) -> None: ...
    def next(self) -> int: ...
    def uniform(self) -> float: ...


class VerifyResult:
    accepted_nodes: npt.NDArray[np.int32]
    accepted_tokens: npt.NDArray[np.uint32]
    commit_tokens: npt.NDArray[np.uint32]
    bonus_token: int
    accepted_count: int


class ResponseCache:
    def __init__(self, max_bytes: int, compile: bool = False, compile_min_tokens: int = 512,
                 compile_growth: float = 0.25, compile_bytes: int = 0,
                 compile_background: bool = False) -> None: ...
    def wait_for_compiles(self) -> None: ...
    def insert(self, tenant: str, ids: Ids) -> None: ...
    def draft(self, tenant: str, context: Ids, want: int, climb_links: bool = False): ...
    def save(self, path: str, tokenizer_sha256: Optional[str] = None) -> None: ...
    def load(self, path: str, tokenizer_sha256: Optional[str] = None) -> None: ...
    def responses(self, tenant: str) -> list[list[int]]: ...
    def tenants(self) -> list[str]: ...
    bytes: int
    max_bytes: int
    num_responses: int
    num_evicted: int
    compiled_bytes: int
    num_compiles: int


class Session:
    def __init__(self, policy: str = "sam-cal", draft_size: Optional[int] = None,
                 shape: Optional[str] = None,
                 cost_curve: Union[None, str, Sequence[tuple[int, float]]] = None,
                 max_dynamic_bytes: Optional[int] = None, collect_timing: Optional[bool] = None,
                 cache_prompts: Optional[bool] = None,
                 l_bias: Optional[int] = None, l_threshold: Optional[int] = None,
                 tree_nodes: Optional[int] = None, tree_width: Optional[int] = None,
                 recycling_vocab_size: Optional[int] = None,
                 experimental: Optional[dict[str, Union[bool, int, float]]] = None) -> None: ...
    def attach(self, index: Union[Index, ShardSet]) -> None: ...
    def prefill(self, ids: Ids) -> None: ...
    def propose(self, start: int, max_nodes: Optional[int] = None) -> Draft: ...
    def commit(self, ids: Ids) -> None: ...
    def observe_topk(self, tokens: Ids, topk: npt.ArrayLike) -> None: ...
    def reset(self) -> None: ...
    def reset_statistics(self) -> None: ...
    def reset_calibration(self) -> None: ...
    def stats_json(self) -> str: ...
    def stats(self) -> dict: ...
    def verify_greedy(self, argmax: Ids) -> VerifyResult: ...
    def verify_sampling(self, probs: npt.ArrayLike, rng: Rng) -> VerifyResult: ...
    def attach_cache(self, cache: Optional[ResponseCache], tenant: str = "") -> None: ...
    def cache_request(self, include_prompt: Optional[bool] = None) -> bool: ...
    policy: str
    draft_size: int
    num_indexes: int


class DraftPool:
    def __init__(self, threads: int = 0) -> None: ...
    threads: int
    def propose(self, sessions: Sequence[Session], starts: Ids,
                max_nodes: Union[None, int, Sequence[Optional[int]]] = None
                ) -> list[Union[Draft, Error]]: ...


def propose_batch(sessions: Sequence[Session], starts: Ids,
                  pool: Optional[DraftPool] = None,
                  max_nodes: Union[None, int, Sequence[Optional[int]]] = None
                  ) -> list[Union[Draft, Error]]: ...
def verify_greedy(tokens: Ids, parents: Ids, argmax: Ids) -> VerifyResult: ...
def verify_sampling(tokens: Ids, parents: Ids, probs: npt.ArrayLike, rng: Rng,
                    mode: str = "deterministic",
                    proposal: Optional[npt.ArrayLike] = None) -> VerifyResult: ...
def apply_sampling(scores: npt.NDArray[np.float32], temperature: float = 1.0, top_k: int = 0,
                   top_p: float = 1.0, logits: bool = True) -> npt.NDArray[np.float32]: ...
def sample_token(weights: npt.ArrayLike, rng: Rng) -> int: ...

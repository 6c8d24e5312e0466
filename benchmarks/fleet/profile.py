"""The timing of one simulated vLLM replica: Llama-3.1-8B-Instruct in bf16 on one H100 SXM 80 GB.

A decode step reads the weights once and the KV cache of every running sequence, and computes one token per
sequence; a step that admits new sequences also computes their uncached prompt tokens (prefill). So one step takes

    step_s = base_s + per_seq_s * batch + per_context_token_s * context_tokens + prefill_token_s * prefill_tokens

where `context_tokens` is the KV cache the step reads (every running sequence's prompt and output so far). The
constants come from published figures:

- Llama-3.1-8B: 8.03 B parameters (16.06 GB in bf16); 32 layers, 8 KV heads of dimension 128, so one token's keys
  and values take 2 * 32 * 8 * 128 * 2 bytes = 128 KiB (Hugging Face's Llama 3.1 release post,
  https://huggingface.co/blog/llama31#inference-memory-requirements: "8B, 1k tokens: 0.125 GB" of KV cache).
- H100 SXM: 3.35 TB/s of HBM3 and 989 TFLOPS of dense BF16 (NVIDIA's H100 datasheet).
- vLLM reaches about 77% of the memory roofline decoding Llama-3.1-8B at batch 1 (75 tokens/s on an A100 40GB,
  https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on); we take the same share of the H100's bandwidth.
- Compute at half the dense peak (an assumption: 40-60% is what serving engines reach on large GEMMs), for prefill
  tokens and for each sequence's decode token alike (2 FLOPs per parameter per token).
- KV cache: vLLM's default gpu_memory_utilization 0.9 of the card's 79.6 GiB, less the 14.99 GiB vLLM reports
  loading Llama-3.1-8B's weights (vllm-project/vllm#10517) and 4 GiB of activations and CUDA graphs (an
  assumption), in 128 KiB tokens: about 431,000 tokens.
- max_num_seqs 256: the number the fleets of issue 34 run (vLLM's default below 70 GiB of GPU memory; vLLM 0.32's
  own default on an H100 is 1024, vllm/engine/arg_utils.py).

Cross-check: at 256 sequences of 300 context tokens a step takes 18.4 ms, 13,900 generated tokens/s, near the
12,500 tokens/s reported for Llama 3.1 8B on one H100 (https://www.morphllm.com/vllm-benchmarks); a single sequence
decodes at 160 tokens/s.
"""

from dataclasses import dataclass, replace

_PARAMS = 8.03e9
_WEIGHT_BYTES = 2 * _PARAMS
_KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2
_HBM_BYTES_PER_S = 3.35e12
_BANDWIDTH_SHARE = 0.77
_BF16_FLOPS = 989e12
_COMPUTE_SHARE = 0.5
_GIB = 2**30
_KV_CACHE_BYTES = 0.9 * 79.6 * _GIB - 14.99 * _GIB - 4 * _GIB


@dataclass(frozen=True)
class ReplicaProfile:
    """What one replica can hold and how long its steps take (sim seconds); `slowdown` stretches every step."""

    name: str
    max_num_seqs: int
    kv_cache_tokens: int
    base_s: float
    per_seq_s: float
    per_context_token_s: float
    prefill_token_s: float
    block_tokens: int = 16  # vLLM's KV block: a prefix is cached in whole blocks
    slowdown: float = 1.0

    def step_s(self, batch: int, context_tokens: int, prefill_tokens: int = 0) -> float:
        """One engine step over `batch` running sequences that hold `context_tokens` of KV cache."""
        return self.slowdown * (self.base_s + self.per_seq_s * batch + self.per_context_token_s * context_tokens
                                + self.prefill_token_s * prefill_tokens)

    def slower(self, factor: float) -> "ReplicaProfile":
        """The same replica with every step `factor` times as long (a slower or throttled GPU)."""
        return replace(self, name=f"{self.name} ({factor:g}x slower)", slowdown=self.slowdown * factor)


H100_LLAMA_8B = ReplicaProfile(
    name="Llama-3.1-8B bf16 on H100 SXM (vLLM)",
    max_num_seqs=256,
    kv_cache_tokens=int(_KV_CACHE_BYTES // _KV_BYTES_PER_TOKEN),
    base_s=_WEIGHT_BYTES / (_BANDWIDTH_SHARE * _HBM_BYTES_PER_S),
    per_seq_s=2 * _PARAMS / (_COMPUTE_SHARE * _BF16_FLOPS),
    per_context_token_s=_KV_BYTES_PER_TOKEN / (_BANDWIDTH_SHARE * _HBM_BYTES_PER_S),
    prefill_token_s=2 * _PARAMS / (_COMPUTE_SHARE * _BF16_FLOPS),
)

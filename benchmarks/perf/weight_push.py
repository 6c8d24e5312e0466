"""What a weight push costs: the disk transport (the trainer writes a safetensors folder, vLLM reloads it) against the
collective one (gloo: the model's tensors over a process group into vLLM's weight-transfer engine, no folder), per
push and per step of the push, with the bytes each moves.

    python -m benchmarks.perf.weight_push [--pushes 3] [--models smollm2-135m,llama-0.5b,llama-0.7b] [--quick]

Three models of one architecture (Llama, as SmolLM2), float32 on both sides: the bundled SmolLM2-135M-Instruct with
its weights, and two larger ones from a config alone (vLLM starts them with `--load-format dummy`, the trainer's copy
is randomly initialised: nothing is downloaded). One vLLM per model (CPU build, dev mode, our gloo engine) takes both
transports in turn: a first push of each (the gloo one sets up the process group), then `--pushes` timed pushes of
each, interleaved, so both see the same machine. A dummy-started vLLM cannot reload a folder with its dummy loader, so
before the disk pushes the benchmark switches its loader to safetensors (the worker's `update_config`).

Memory: the collective push holds a staged copy of the weights in vLLM's worker until it is applied, so a model takes
about three times its float32 size (the trainer's copy, vLLM's, the staged one) plus vLLM's KV cache and some 4 GiB of
processes: about 12 GiB for llama-0.7b. A 1B model (17 GiB) was killed by the kernel's OOM killer on this 24 GiB
machine shared with other work; 1.5B would not fit at all.

Writes benchmarks/results/weight_push.json: per model its parameters, each transport's mean, best and every push time,
the mean seconds and share of each step, the bytes moved per push, gloo over disk (goal at most 0.3 for the
bundled model), and `cpu_repack`: the time to pack the model's matrices into oneDNN's format as vLLM's CPU layers do
after every load, alone and over the disk push. Both transports' last step (vLLM's reload, our engine's apply) pays it,
so it is a floor under any transport's ratio on this CPU (the median of 5 repacks, each recorded).
"""

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import httpx
import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

from benchmarks.perf.lifecycle import child_process
from benchmarks.perf.results import BenchmarkFailed, recording
from benchmarks.perf.vllm_server import MODEL_DIR, wait_ready
from nemo_gym.experience.generation import VllmHttpGeneration
from nemo_gym.experience.generation.weight_source import ModuleWeights
from nemo_gym.experience.generation.weights import write_weights
from nemo_gym.responses_api_models.local_vllm_model.weight_transfer import weight_transfer_args
from nemo_gym.server.supervisor import free_port

SERVED = "model"
REPACKS = 5  # one repack timing swung 0.36 to 0.26 s between runs, and was not monotonic in model size: the median of 5
# Config overrides of the bundled SmolLM2-135M's (Llama) config; None: the bundled model itself, with its weights.
MODELS: dict[str, dict[str, int] | None] = {
    "smollm2-135m": None,
    "llama-0.5b": {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
                   "num_attention_heads": 16, "num_key_value_heads": 16},
    "llama-0.7b": {"hidden_size": 1536, "intermediate_size": 4096, "num_hidden_layers": 24,
                   "num_attention_heads": 24, "num_key_value_heads": 8},
}


def _model_folder(name: str, workdir: Path) -> tuple[Path, PreTrainedModel]:
    """The folder vLLM starts from and the trainer's float32 model."""
    overrides = MODELS[name]
    if overrides is None:
        return MODEL_DIR, AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32)
    config = AutoConfig.from_pretrained(MODEL_DIR)
    for key, value in overrides.items():
        setattr(config, key, value)
    config.head_dim = config.hidden_size // config.num_attention_heads
    folder = workdir / name
    config.save_pretrained(folder)  # a config alone: vLLM's dummy loader makes the weights
    torch.manual_seed(0)
    return folder, AutoModelForCausalLM.from_config(config, dtype=torch.float32)


@contextmanager
def _vllm(folder: Path, dummy: bool, log: Path) -> Iterator[str]:
    port = free_port()
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder),
               "--tokenizer", str(MODEL_DIR), "--served-model-name", SERVED, "--host", "127.0.0.1",
               "--port", str(port), "--dtype", "float32", "--max-model-len", "512", "--enforce-eager",
               *weight_transfer_args(gpu=False), *(["--load-format", "dummy"] if dummy else [])]
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    url = f"http://127.0.0.1:{port}/v1"
    with open(log, "wb") as out, child_process(command, env=env, stdout=out, stderr=out) as popen:
        started = time.monotonic()
        asyncio.run(wait_ready(url, popen))
        print(f"vLLM ready after {time.monotonic() - started:.0f} s", flush=True)
        yield url


def _folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.iterdir() if path.is_file())


def _steps(backend: VllmHttpGeneration) -> dict[str, float]:
    (steps,) = backend.last_weight_update.values()
    return dict(steps)


def _summary(pushes: list[dict[str, Any]], bytes_moved: int) -> dict[str, Any]:
    totals = [push["total_s"] for push in pushes]
    names = list(dict.fromkeys(step for push in pushes for step in push["steps"]))
    mean_steps = {step: statistics.mean(push["steps"].get(step, 0.0) for push in pushes) for step in names}
    mean = statistics.mean(totals)
    return {"mean_s": round(mean, 3), "best_s": round(min(totals), 3), "pushes_s": [round(t, 3) for t in totals],
            "steps_mean_s": {step: round(s, 4) for step, s in mean_steps.items()},
            "steps_share": {step: round(s / mean, 3) for step, s in mean_steps.items()},
            "bytes_per_push": bytes_moved}


def measure(name: str, pushes: int, workdir: Path) -> dict[str, Any]:
    folder, model = _model_folder(name, workdir)
    source = ModuleWeights(model)
    tensor_bytes = sum(meta.nbytes for meta in source.metadata())
    config = {"model_name": SERVED, "max_new_tokens": 1, "max_seq_len": 512, "pad_token_id": 0}
    dummy = MODELS[name] is not None
    disk_runs: list[dict[str, Any]] = []
    gloo_runs: list[dict[str, Any]] = []
    with _vllm(folder, dummy, workdir / f"{name}.vllm.log") as url, \
            VllmHttpGeneration(config, url, weight_update_timeout_s=1800) as disk, \
            VllmHttpGeneration(config, url, weight_update_timeout_s=1800, weight_transport="gloo") as gloo:
        if dummy:  # the dummy loader reloads no folder: read the disk pushes with the safetensors one
            httpx.post(f"{url.removesuffix('/v1')}/collective_rpc", trust_env=False, timeout=60, json={
                "method": "update_config", "kwargs": {"overrides": {"load_config": {"load_format": "safetensors"}}}},
            ).raise_for_status()
        folder_bytes = 0
        for version in range(1, 2 * pushes + 3):
            if version % 2:
                target = workdir / f"{name}-v{version}"
                started = time.perf_counter()
                write_weights(model, target)
                written = time.perf_counter()
                disk.update_weights(target, version)
                done = time.perf_counter()
                folder_bytes = _folder_bytes(target)
                shutil.rmtree(target)
                disk_runs.append({"total_s": done - started, "steps": {"write": written - started, **_steps(disk)}})
            else:
                started = time.perf_counter()
                gloo.update_weights(model, version)
                gloo_runs.append({"total_s": time.perf_counter() - started, "steps": _steps(gloo)})
            print(f"{name} push {version} ({'disk' if version % 2 else 'gloo'}): "
                  f"{(disk_runs if version % 2 else gloo_runs)[-1]['total_s']:.2f} s", flush=True)
    first_disk, first_gloo = disk_runs.pop(0), gloo_runs.pop(0)
    result = {"parameters": sum(p.numel() for p in model.parameters()),
              "config": MODELS[name] or "the bundled SmolLM2-135M-Instruct",
              "tensors": len(source.metadata()), "tensor_bytes": tensor_bytes,
              # the disk push writes the folder and vLLM reads it back; the gloo push sends each tensor once
              "disk": {**_summary(disk_runs, 2 * folder_bytes), "first_push_s": round(first_disk["total_s"], 3)},
              "gloo": {**_summary(gloo_runs, tensor_bytes), "first_push_s": round(first_gloo["total_s"], 3),
                       "rendezvous_s": round(first_gloo["steps"].get("init_weight_transfer_engine", 0.0), 3)}}
    result["gloo_over_disk"] = round(result["gloo"]["mean_s"] / result["disk"]["mean_s"], 3)
    repacks_s = _cpu_repacks_s(model, REPACKS)
    repack_s = statistics.median(repacks_s)
    result["cpu_repack"] = {"s": round(repack_s, 3), "runs_s": [round(s, 3) for s in repacks_s],
                            "over_disk": round(repack_s / result["disk"]["mean_s"], 3)}
    return result


def _cpu_repacks_s(model: PreTrainedModel, runs: int) -> list[float]:
    """Seconds to pack every matrix of `model` into oneDNN's format, one thread, as vLLM's CPU linear and embedding
    layers do after every load (`create_onednn_mm`), `runs` times: what any transport's apply pays on this CPU, a
    floor under it."""
    from vllm import _custom_ops as ops  # the benchmark's own process loads vLLM's kernels only here

    matrices = [tensor.detach() for tensor in model.parameters() if tensor.ndim == 2]  # a tied matrix once
    ops.create_onednn_mm(matrices[0].t(), 32)  # the first call loads the library
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        for matrix in matrices:
            ops.create_onednn_mm(matrix.t(), 32)
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pushes", type=int, default=3, help="timed pushes per transport and model")
    parser.add_argument("--models", default=",".join(MODELS), help=f"a comma-separated subset of {list(MODELS)}")
    parser.add_argument("--quick", action="store_true", help="the bundled model, one timed push each")
    args = parser.parse_args()
    names = ["smollm2-135m"] if args.quick else args.models.split(",")
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        parser.error(f"unknown models {unknown}; known: {list(MODELS)}")
    pushes = 1 if args.quick else args.pushes
    torch.set_num_threads(1)  # the trainer's side: one core, vLLM's worker has the other
    with recording("weight_push", quick=args.quick) as recorder, \
            tempfile.TemporaryDirectory(prefix="weight_push-") as tmp:
        models = {name: measure(name, pushes, Path(tmp)) for name in names}
        if any(m["gloo"]["mean_s"] <= 0 or m["disk"]["mean_s"] <= 0 for m in models.values()):
            raise BenchmarkFailed(f"a push took no time: {json.dumps(models)}")
        recorder.write({f"gloo_over_disk_{name}": m["gloo_over_disk"] for name, m in models.items()},
                       {"settings": {"pushes_per_transport": pushes, "dtype": "float32", "replicas": 1,
                                     "models": names},
                        "models": models})


if __name__ == "__main__":
    main()

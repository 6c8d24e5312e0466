"""Weight updates into a real vLLM (the bundled model, float32, dev mode on loopback): pushed weights change its
output, the originals restore it token for token, every replica takes the version or the error names who did not,
a bad folder leaves the server serving, a generation in flight when weights change says so, and the collector's
in-flight refits with KV-cache recomputation run on it. Every test pushes the bundled weights back at its end."""

import os
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import httpx
import orjson
import psutil
import pytest
from transformers import AutoTokenizer

from nemo_gym.experience.collector.prompt_loader import StatefulPromptLoader
from nemo_gym.experience.collector.replay_buffer import ReplayBuffer
from nemo_gym.experience.collector.trajectory_collector import AsyncTrajectoryCollector
from nemo_gym.experience.datasets import datum_from_row
from nemo_gym.experience.environments.math_environment import MathEnvironment
from nemo_gym.experience.errors import ReplicaPausedError, WeightUpdateError
from nemo_gym.experience.generation import VllmHttpGeneration
from nemo_gym.experience.turns.chat_template import ChatTemplate
from tests.experience.generation_support import FakeVllm, LoopbackServer, chat_prompt, generated_part, make_batch
from tests.experience.weight_folders import removed_after, write_weight_folders
from tests.helpers.model import MODEL_DIR
from tests.helpers.stack import REPO_ROOT

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]
TOKENIZER = AutoTokenizer.from_pretrained(MODEL_DIR)
QUESTIONS = ("What is 2 + 3?", "What is the capital of France?")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    with removed_after(tmp_path_factory.mktemp("weights")) as root:
        yield write_weight_folders(root)


def config(server: Any, max_new_tokens: int = 16) -> dict[str, Any]:
    return {"model_name": server.model, "max_new_tokens": max_new_tokens, "max_seq_len": 2048,
            "pad_token_id": TOKENIZER.pad_token_id}


@pytest.fixture
def server(vllm_weights_server: Any, folders: dict[str, Path]) -> Iterator[Any]:
    """The weight-updatable vLLM, given back with the bundled weights whatever the test did."""
    yield vllm_weights_server
    with VllmHttpGeneration(config(vllm_weights_server), vllm_weights_server.base_url) as backend:
        backend.update_weights(folders["original"], 0)


def root(server: Any) -> str:
    return server.base_url.removesuffix("/v1")


def greedy(backend: VllmHttpGeneration) -> tuple[list[tuple[list[int], list[float]]], list[tuple[int, ...]]]:
    data = make_batch([chat_prompt(TOKENIZER, q) for q in QUESTIONS], TOKENIZER.pad_token_id)
    out = backend.generate(data, greedy=True)
    return [generated_part(out, data, row) for row in range(len(QUESTIONS))], out["weight_versions"]


def max_difference(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def test_pushed_weights_change_the_output_and_the_originals_restore_it_token_for_token(
        server: Any, folders: dict[str, Path]) -> None:
    with VllmHttpGeneration(config(server), server.base_url) as backend:
        before, versions = greedy(backend)
        assert versions == [(0,), (0,)]
        backend.update_weights(folders["layers"], 1)
        changed, versions = greedy(backend)
        assert backend.weight_version == 1 and versions == [(1,), (1,)]
        assert any(ids != old for (ids, _), (old, _) in zip(changed, before))
        assert all(abs(lps[0] - old[0]) > 1e-2 for (_, lps), (_, old) in zip(changed, before))
        backend.update_weights(folders["original"], 2)
        restored, versions = greedy(backend)
        assert backend.weight_version == 2 and versions == [(2,), (2,)]
    for (ids, lps), (old_ids, old_lps) in zip(restored, before):
        assert ids == old_ids and max_difference(lps, old_lps) <= 1e-5
    assert httpx.get(f"{root(server)}/weight_info", trust_env=False).json() == {"weight_version": "2"}


def test_every_replica_takes_the_version_or_the_error_names_who_did_not(server: Any,
                                                                       folders: dict[str, Path]) -> None:
    # Two replicas: the same vLLM under two names (a second one would cost another cold start).
    alias = server.base_url.replace("127.0.0.1", "localhost")
    with VllmHttpGeneration(config(server), [server.base_url, alias]) as backend:
        backend.update_weights(folders["layers"], 1)
        assert backend.weight_version == 1
        changed, versions = greedy(backend)  # round-robin: one sample on each name
        assert versions == [(1,), (1,)]

    failing = FakeVllm(fail={"/collective_rpc": (500, {"error": "Worker failed with error 'out of memory'"})})
    with LoopbackServer(failing) as stub, VllmHttpGeneration(config(server), [server.base_url, stub.base_url],
                                                             weight_version=1) as backend:
        started = time.monotonic()
        with pytest.raises(WeightUpdateError) as failure:
            backend.update_weights(folders["original"], 2)
        assert time.monotonic() - started < 60
        assert backend.weight_version == 1
    error, stub_root = failure.value, stub.base_url.removesuffix("/v1")
    assert error.updated == [root(server)] and list(error.failed) == [stub_root]
    assert "http_5xx at reload_weights" in error.failed[stub_root] and "out of memory" in error.failed[stub_root]
    # A reload that failed may have left the stub's model part new: it stays paused, and says so.
    assert isinstance(error, ReplicaPausedError) and error.paused == {stub_root: "reload_weights"}
    assert [r["path"] for r in stub.requests][-1] == "/collective_rpc"
    # The real replica did take version 2, and the error said so: it serves the originals again.
    with VllmHttpGeneration(config(server), server.base_url) as backend:
        restored, _ = greedy(backend)
    assert restored != changed


@pytest.mark.parametrize("damage", ["missing", "truncated", "no_safetensors"])
def test_a_bad_weights_folder_is_a_typed_error_and_vllm_keeps_serving_the_old_weights(
        server: Any, folders: dict[str, Path], tmp_path: Path, damage: str) -> None:
    folder = tmp_path / "bad"
    if damage != "missing":
        folder.mkdir()
        (folder / "config.json").write_bytes((folders["layers"] / "config.json").read_bytes())
    if damage == "truncated":  # the header and the first MiB of a real file: what a crashed writer leaves
        with open(folders["layers"] / "model.safetensors", "rb") as source:
            (folder / "model.safetensors").write_bytes(source.read(1 << 20))
    with VllmHttpGeneration(config(server), server.base_url) as backend:
        before, _ = greedy(backend)
        started = time.monotonic()
        with pytest.raises(WeightUpdateError, match="invalid_weights") as failure:
            backend.update_weights(folder, 1)
        assert time.monotonic() - started < 10
        assert root(server) in str(failure.value) and failure.value.version == 1 and backend.weight_version == 0
        after, versions = greedy(backend)
    assert versions == [(0,), (0,)]
    # The same tokens, log-probs within float32 noise (a batch's kernels may differ between two requests; a weight
    # change moves the first log-prob by over 1e-2, as the test above shows).
    for (ids, lps), (old_ids, old_lps) in zip(after, before):
        assert ids == old_ids and max_difference(lps, old_lps) <= 1e-5


def generated_so_far(server: Any) -> float:
    metrics = httpx.get(f"{root(server)}/metrics", trust_env=False).text
    return float(re.search(r"^vllm:generation_tokens_total\{[^}]*\} (\S+)$", metrics, re.M).group(1))


def engine_core(server: Any) -> psutil.Process:
    """The process that schedules and runs the model (the API server only relays to it)."""
    if server.pid is None:
        pytest.fail("this test freezes vLLM's engine process, so it needs a vLLM the session started")
    return next(child for child in psutil.Process(server.pid).children(recursive=True)
                if "EngineCore" in " ".join(child.cmdline()) or "EngineCore" in child.name())


def queued_input_bytes(process: psutil.Process) -> int:
    """Bytes sent to `process` over Unix sockets that it has not read yet (ss: Recv-Q per socket inode)."""
    inodes = set()
    for fd in Path(f"/proc/{process.pid}/fd").iterdir():
        target = os.readlink(fd) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    listing = subprocess.run(["ss", "-x", "-n"], capture_output=True, text=True, check=True).stdout.splitlines()
    fields = [line.split() for line in listing[1:]]
    return sum(int(row[2]) for row in fields if len(row) > 5 and row[5] in inodes)


def test_a_generation_in_flight_when_weights_change_reports_both_versions_and_follows_the_new_weights(
        server: Any, folders: dict[str, Path]) -> None:
    data = make_batch([chat_prompt(TOKENIZER, "Count from 1 to 100, separated by commas.")], TOKENIZER.pad_token_id)
    engine = engine_core(server)
    with VllmHttpGeneration(config(server, max_new_tokens=96), server.base_url) as backend, \
            ThreadPoolExecutor(2) as pool:
        old_ids, old_lps = generated_part(backend.generate(data, greedy=True), data, 0)
        assert len(old_ids) == 96  # greedy, so always: the count runs past the cap
        before = generated_so_far(server)
        # Let the engine run only in short slices, and read its count only while it is frozen: the count lags what
        # the engine did (the API server relays it), so a request watched while running can reach its end before
        # the count shows its first tokens. In slices, it runs past its fourth token by a slice or two at most.
        engine.suspend()
        try:
            running = pool.submit(backend.generate, data, True)
            while generated_so_far(server) < before + 4 and not running.done():
                engine.resume()
                time.sleep(0.005)
                engine.suspend()
            # Still frozen, so the request cannot run to its end whatever the machine's speed: let it go only once
            # the pause (what update_weights does first) waits unread at its door: it reads that before its next
            # step. Then drop the request's keys and values while it is frozen: it must recompute them on resume,
            # the path `recompute_kv_cache_after_weight_updates` takes.
            assert generated_so_far(server) < before + 90
            unread = queued_input_bytes(engine)  # not zero: ZMQ's own wake-ups wait there too
            pausing = pool.submit(httpx.post, f"{root(server)}/pause", params={"mode": "keep"}, trust_env=False,
                                  timeout=60)
            while queued_input_bytes(engine) <= unread and not pausing.done():
                time.sleep(0.01)
        finally:
            engine.resume()
        assert pausing.result().status_code == 200
        assert not running.done()
        assert backend.invalidate_kv_cache() is True
        assert not running.done()
        backend.update_weights(folders["final_norm"], 1)
        out = running.result(timeout=300)
        ids, lps = generated_part(out, data, 0)
        assert out["weight_versions"] == [(0, 1)]
        # Tokens before the update are the old weights' greedy ones; from the first that differs (in id or
        # log-prob) on, they are what the new weights choose after that prefix.
        # (A token generated after the update may still match the old one within 1e-3: the switch is the first
        # token whose log-prob moved at all; the continuation check below proves every later one is the new weights'.)
        switch = next((i for i in range(len(ids)) if ids[i] != old_ids[i] or abs(lps[i] - old_lps[i]) > 1e-5),
                      len(ids))
        assert 4 <= switch < len(ids), "the in-flight generation never moved to the new weights"
        prefix = make_batch([data["input_ids"][0].tolist() + ids[:switch]], TOKENIZER.pad_token_id)
        new_ids, new_lps = generated_part(backend.generate(prefix, greedy=True), prefix, 0)
        assert new_ids[:len(ids) - switch] == ids[switch:]
        assert max_difference(new_lps[:len(ids) - switch], lps[switch:]) <= 1e-4


def test_the_collector_refits_in_flight_and_recomputes_kv_caches_on_vllm(server: Any,
                                                                         folders: dict[str, Path]) -> None:
    class CountingInvalidations(VllmHttpGeneration):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.invalidations: list[tuple[int, bool]] = []

        def invalidate_kv_cache(self) -> bool:
            done = super().invalidate_kv_cache()
            self.invalidations.append((self.weight_version, done))
            return done

    prompts, max_age, steps = 2, 1, 3
    master = {"grpo": {"num_prompts_per_step": prompts, "num_generations_per_prompt": 2, "max_rollout_turns": 1,
                       "async_grpo": {"max_trajectory_age_steps": max_age, "in_flight_weight_updates": True,
                                      "recompute_kv_cache_after_weight_updates": True}},
              "policy": {"max_total_sequence_length": 2048, "generation": {"max_new_tokens": 48, "temperature": 1.0}}}
    rows = [orjson.loads(line) for line in
            (REPO_ROOT / "nemo_gym/resources_servers/math/data/arithmetic_example.jsonl").read_bytes().splitlines()]
    template = ChatTemplate(TOKENIZER)
    datums = [datum_from_row(row, template, "math", i) for i, row in enumerate(rows[:12])]
    with CountingInvalidations({**config(server), **master["policy"]["generation"]}, server.base_url) as backend, \
            MathEnvironment() as env:
        buffer = ReplayBuffer(prompts * (max_age + 1) * 2)
        collector = AsyncTrajectoryCollector(backend, TOKENIZER, {"math": env}, master, buffer)
        collector.start_collection(StatefulPromptLoader(datums, batch_size=prompts, seed=0))
        try:
            for step in range(steps):
                batch = buffer.sample_blocking(prompts, step, max_age, timeout_s=300)
                for entry in batch["entries"]:
                    for completion in entry.trajectory.completions:
                        versions = completion.generation_weight_versions
                        assert versions and entry.generation_weight_version <= versions[0] <= versions[-1] <= step
                collector.prepare_for_refit()  # in flight: returns at once, generations go on
                backend.update_weights(folders["layers" if step % 2 == 0 else "original"], step + 1)
                collector.set_weight_version(step + 1)
                collector.resume_after_refit()
                assert backend.invalidations[-1] == (step + 1, True)
        finally:
            collector.shutdown()
    assert len(backend.invalidations) == steps
    assert collector.get_metrics()["groups_failed"] == 0

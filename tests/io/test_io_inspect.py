"""inspect-ai eval logs written by inspect-ai itself (a task run on its offline mockllm model,
with a tool it runs), compared message by message with what ``read_eval_log`` reads back."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import sessionkit as sk

# one inspect-ai eval log (a module fixture, seconds to import and run inspect-ai) serves every
# test, in one worker
pytestmark = [pytest.mark.xdist_group("test_io_inspect"), pytest.mark.slow]


def _add_tool():
    """inspect-ai's tool adding two numbers (inspect-ai is imported here, not at collection:
    its import takes seconds)."""
    from inspect_ai.tool import tool

    @tool
    def add():
        async def execute(x: int, y: int):
            """Add two numbers.

            Args:
                x: the first number
                y: the second number
            """
            return x + y

        return execute

    return add


@pytest.fixture(scope="module")
def eval_log(tmp_path_factory):
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, get_model
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate, use_tools

    add = _add_tool()
    # inspect counts tokens with tiktoken's o200k_base; litellm ships that file, so no download
    tokenizers = Path(importlib.util.find_spec("litellm").origin).parent / "litellm_core_utils" / "tokenizers"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", str(tokenizers))
        model = get_model(
            "mockllm/model",
            custom_outputs=[
                ModelOutput.for_tool_call(model="mockllm/model", tool_name="add", tool_arguments={"x": 1, "y": 2}),
                ModelOutput.from_content(model="mockllm/model", content="3"),
                ModelOutput.from_content(model="mockllm/model", content="6"),
            ],
        )
        task = Task(
            dataset=[
                Sample(input="What is 1+2?", target="3", id="q1"),
                Sample(input="What is 2+3?", target="5", id="q2"),
            ],
            solver=[use_tools([add()]), generate()],
            scorer=match(),
        )
        (log,) = eval(task, model=model, log_dir=str(tmp_path_factory.mktemp("logs")), display="none", max_samples=1)
    assert log.status == "success", log.error
    return Path(log.location)


def test_samples_message_by_message(store, eval_log):
    from inspect_ai.log import read_eval_log

    sessions = sk.io.import_inspect(store, eval_log)
    log = read_eval_log(str(eval_log))
    assert [s.session_id for s in sessions] == [f"{log.eval.eval_id}/{s.id}/{s.epoch}" for s in log.samples]
    for session, sample in zip(sessions, log.samples):
        history = session.get_history()
        kept = [m for m in sample.messages if m.role != "tool"]
        assert [m["id"] for m in history] == [m.id for m in kept]
        assert [m["role"] for m in history] == [m.role for m in kept]
        assert [m["parts"][0]["text"] if m["parts"] and m["parts"][0]["type"] == "text" else None for m in history] == [
            m.text or None for m in kept
        ]
        calls = {p["toolCallId"]: p for m in history for p in m["parts"] if p["type"].startswith("tool-")}
        expected = {c.id: (c.function, c.arguments) for m in kept for c in (getattr(m, "tool_calls", None) or [])}
        assert {k: (p["type"][5:], p["input"]) for k, p in calls.items()} == expected
        for m in sample.messages:
            if m.role == "tool":
                assert calls[m.tool_call_id]["output"] == m.text
        last = history[-1]["metadata"]["inspect"]
        assert last["scores"]["match"]["value"] == sample.scores["match"].value
        assert last["model_usage"]["mockllm/model"]["total_tokens"] == sample.model_usage["mockllm/model"].total_tokens
        ((_, record),) = store.session_records.get(session.session_id, "inspect.sample")
        assert (record["sample_id"], record["target"], record["task"]) == (sample.id, sample.target, log.eval.task)
    # one right answer, one wrong, as scored
    assert sorted(s.scores["match"].value for s in log.samples) == ["C", "I"]
    before = [len(s) for s in sessions]
    assert [len(s) for s in sk.io.import_inspect(store, eval_log)] == before


def test_not_a_log(tmp_path):
    bad = tmp_path / "x.eval"
    bad.write_bytes(b"not a zip")
    with sk.open_store() as store:
        with pytest.raises(sk.io.MalformedInput, match="x.eval: not an inspect-ai eval log"):
            sk.io.import_inspect(store, bad)

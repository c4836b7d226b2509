"""``sk.scorers.llm_judge`` through the real litellm code path, offline with ``mock_response``."""

from __future__ import annotations

import json
import threading

import pytest
from helpers import msg

import sessionkit as sk

GOOD = json.dumps({"tag": "answers", "rating": 4, "rationale": "It answers the question."})


class Sequenced(sk.LiteLLMModel):
    """A litellm model answering each call with the next mock response (and keeping what it was sent)."""

    def __init__(self, responses, **options):
        super().__init__("gpt-4o-mini", stream=False, response_format={"type": "json_object"}, **options)
        self.responses = list(responses)
        self.sent: list[list[dict]] = []
        self.lock = threading.Lock()

    def call_options(self, messages, tools):
        options = super().call_options(messages, tools)
        with self.lock:
            self.sent.append(messages)
            options["mock_response"] = self.responses.pop(0)
        return options


def _store(new_store, kind="sqlite"):
    store = new_store(kind)
    s = store.session("s")
    s.append(msg("u1", "What is the capital of France?"))
    s.append(msg("a1", "Paris.", "assistant"))
    s.append(msg("u2", "And of Italy?"))
    s.append(msg("a2", "Rome.", "assistant"))
    return store


def test_the_judge_labels_each_turn_and_its_calls_are_runs(new_store):
    store = _store(new_store)
    judge = sk.scorers.llm_judge(
        "Does the reply answer the user's question?",
        model="gpt-4o-mini",
        tags=["answers", "evades"],
        scale=(1, 5),
        name="answers",
        version=2,
        mock_response=GOOD,
    )
    counts = store.score(judge, progress=False)
    assert counts["labelled"] == 2
    labels = sorted(store.labels(), key=lambda x: x.message_id)  # (asked at once: stored as they came)
    assert [(x.message_id, x.tag, x.rating, x.source, x.scorer) for x in labels] == [
        ("a1", "answers", 4.0, "llm", "answers@2"),
        ("a2", "answers", 4.0, "llm", "answers@2"),
    ]
    assert {x.rationale for x in labels} == {"It answers the question."}
    runs = store.sql("SELECT * FROM runs ORDER BY started_at_message, run_id")
    assert len(runs) == 2 and set(runs["status"]) == {"completed"}
    assert set(runs["model"]) == {"gpt-4o-mini"} and (runs["tokens_in"] > 0).all() and (runs["tokens_out"] > 0).all()
    assert (runs["cost_usd"] > 0).all() and (runs["ended_at"] >= runs["started_at"]).all()
    metas = sorted((json.loads(m)["unit"], json.loads(m)["label"], json.loads(m)["scorer"]) for m in runs["meta"])
    assert metas == sorted((x.message_id, x.id, "answers@2") for x in labels)
    assert all("And of Italy?" in text or "capital of France" in text for text in runs["input"])
    assert store.score(judge, progress=False)["scored"] == 0  # nothing asked twice


def test_the_prompt_shows_rubric_context_unit_and_the_answer_format(new_store):
    store = _store(new_store)
    judge = sk.scorers.llm_judge("Be strict.", model="gpt-4o-mini", tags=["answers", "evades"], mock_response=GOOD)
    seen = []

    def keep(unit):
        seen.append(unit)
        return None

    store.score(sk.scorers.scorer(keep, name="keep"), progress=False)
    second = next(u for u in seen if u.message_id == "a2")
    system, user = judge.prompt(second)
    assert system["role"] == "system" and '"tag": one of ["answers", "evades"]' in system["content"]
    assert "rating" not in system["content"]
    assert user["content"].startswith("Rubric:\nBe strict.")
    context, _, judged = user["content"].partition("The turn to judge:")
    assert "What is the capital of France?" in context and "[assistant] Paris." in context
    assert "[user] And of Italy?" in judged and "[assistant] Rome." in judged and "Paris" not in judged
    no_history = sk.scorers.llm_judge("Be strict.", model="gpt-4o-mini", history=False)
    assert "France" not in no_history.prompt(second)[1]["content"]


def test_a_malformed_reply_is_asked_once_more(new_store):
    store = _store(new_store)
    store.session("s").delete("u2", subtree=True)  # one turn
    model = Sequenced(["Sure! It answers.", GOOD])
    judge = sk.scorers.llm_judge("Answers?", model=model, tags=["answers", "evades"], scale=(1, 5))
    assert store.score(judge, progress=False)["labelled"] == 1
    assert len(model.sent) == 2 and model.responses == []
    retry = model.sent[1]
    assert retry[:2] == model.sent[0] and retry[2] == {"role": "assistant", "content": "Sure! It answers."}
    assert "not a JSON object" in retry[3]["content"]
    (label,) = store.labels()
    assert (label.tag, label.rating) == ("answers", 4.0)
    (run,) = store.runs("s")
    assert run.usage["in"] > 0 and run.status == "completed"


@pytest.mark.parametrize(
    "replies, words",
    [
        (["nope", "still no"], "not a JSON object"),
        (['{"tag": "great", "rating": 3}', '{"tag": "great", "rating": 3}'], "not one of"),
        (['{"tag": "answers", "rating": 9}', '{"tag": "answers", "rating": 9}'], "outside 1 to 5"),
        (['{"tag": "answers"}', '["answers"]'], "not an object"),
    ],
)
def test_two_malformed_replies_fail_naming_the_unit_and_store_nothing(new_store, replies, words):
    store = _store(new_store)
    store.session("s").delete("u2", subtree=True)
    model = Sequenced(replies)
    judge = sk.scorers.llm_judge("Answers?", model=model, tags=["answers", "evades"], scale=(1, 5))
    with pytest.raises(sk.ModelError, match=words) as info:
        store.score(judge, progress=False)
    assert "judge@1" in str(info.value) and "'a1'" in str(info.value)
    assert len(model.sent) == 2 and store.labels() == [] and store.runs("s") == []


def test_a_rating_judge_tags_with_its_name_and_bad_settings_are_refused(new_store):
    store = _store(new_store)
    judge = sk.scorers.llm_judge(
        "Rate the reply.", model="gpt-4o-mini", scale=(0, 1), name="quality", mock_response='{"rating": 0.5}'
    )
    store.score(judge, level="path", progress=False)
    (label,) = store.labels()
    assert (label.tag, label.rating, label.target, label.scorer) == ("quality", 0.5, "branch", "quality@1")
    with pytest.raises(ValueError, match="rubric"):
        sk.scorers.llm_judge(" ", model="gpt-4o-mini")
    with pytest.raises(ValueError, match="scale"):
        sk.scorers.llm_judge("x", model="gpt-4o-mini", scale=(5, 1))
    with pytest.raises(sk.InvalidLabel):
        sk.scorers.llm_judge("x", model="gpt-4o-mini", tags=["two\nlines"])
    with pytest.raises(TypeError, match="model object carries its own"):
        sk.scorers.llm_judge("x", model=sk.LiteLLMModel("gpt-4o-mini"), temperature=0)

"""The model layer without a model: message conversion, usage sums, tool schemas."""

from __future__ import annotations

import dataclasses
import enum
import subprocess
import sys
from collections.abc import Callable
from typing import Annotated, Literal

import pydantic
import pytest

from sessionkit.agent.models import add_usage, from_chat_messages, make_usage, to_chat_messages
from sessionkit.agent.tools import Tool, as_tool, json_safe, parse_docstring


def user(mid, text, **extra):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}], **extra}


def test_text_messages_become_chat_messages_after_the_system_prompt():
    chat = to_chat_messages(
        [
            user("u1", "Hi, I'm Ada"),
            {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "Hello Ada"}]},
        ],
        system="Be brief.",
    )
    assert chat == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi, I'm Ada"},
        {"role": "assistant", "content": "Hello Ada"},
    ]


def test_tool_parts_become_tool_calls_followed_by_tool_messages():
    msg = {
        "id": "a1",
        "role": "assistant",
        "parts": [
            {"type": "reasoning", "text": "I should add."},
            {"type": "text", "text": "Let me add."},
            {
                "type": "tool-add",
                "toolCallId": "c1",
                "state": "output-available",
                "input": {"a": 1},
                "output": {"sum": 3},
            },
            {
                "type": "tool-div",
                "toolCallId": "c2",
                "state": "output-error",
                "input": {"a": 1},
                "errorText": "ZeroDivisionError: division by zero",
            },
            {"type": "tool-slow", "toolCallId": "c3", "state": "input-available", "input": {}},
        ],
    }
    assert to_chat_messages([msg]) == [
        {
            "role": "assistant",
            "content": "Let me add.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}},
                {"id": "c2", "type": "function", "function": {"name": "div", "arguments": '{"a": 1}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"sum": 3}'},
        {"role": "tool", "tool_call_id": "c2", "content": "Error: ZeroDivisionError: division by zero"},
    ]


def test_a_multi_step_assistant_message_is_split_into_steps():
    msg = {
        "id": "a1",
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {"type": "tool-get", "toolCallId": "c1", "state": "output-available", "input": {}, "output": "ok"},
            {"type": "text", "text": "Done."},
            {"type": "data-custom", "data": 1},
        ],
    }
    assert to_chat_messages([msg]) == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "assistant", "content": "Done."},
    ]


def test_user_files_become_content_blocks_and_empty_messages_are_skipped():
    msg = {
        "id": "u1",
        "role": "user",
        "parts": [
            {"type": "text", "text": "What is this?"},
            {"type": "file", "mediaType": "image/png", "data": "iVBORw0KGgo="},
            {
                "type": "file",
                "mediaType": "application/pdf",
                "url": "data:application/pdf;base64,JVBERi0=",
                "filename": "a.pdf",
            },
        ],
    }
    empty = {"id": "a0", "role": "assistant", "parts": []}
    assert to_chat_messages([empty, msg]) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"}},
            ],
        }
    ]


def test_chat_messages_convert_back_with_tool_results_paired():
    chat = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "add 1 and 2"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
        {"role": "assistant", "content": "3"},
    ]
    messages = from_chat_messages(chat)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "assistant"]
    assert messages[2]["parts"] == [
        {"type": "tool-add", "toolCallId": "c1", "state": "output-available", "input": {"a": 1, "b": 2}, "output": 3}
    ]
    # and back again: the same chat
    assert to_chat_messages(messages) == chat


def test_usage_sums_and_an_unknown_cost_stays_unknown():
    a = make_usage(model="m", input_tokens=10, output_tokens=2, cost_usd=0.5)
    b = make_usage(model="m", input_tokens=5, output_tokens=1, cache_read=4, cost_usd=0.25)
    total = add_usage(a, b)
    assert total == {"in": 15, "out": 3, "cache_read": 4, "cache_write": 0, "cost_usd": 0.75, "model": "m"}
    assert add_usage(total, make_usage(model="m", cost_usd=None))["cost_usd"] is None


# ---------------------------------------------------------------------------- tools


class Unit(enum.Enum):
    C = "C"
    F = "F"


@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0


def get_weather(city: str, unit: Unit = Unit.C, days: int = 1, tags: list[str] | None = None) -> str:
    """Current weather for a city.

    Looks it up somewhere.

    Args:
        city: The city name,
            for example "Paris".
        unit: Temperature unit.
        days (int): How many days.

    Returns:
        A sentence.
    """
    return f"sunny in {city}"


def test_tool_schema_comes_from_signature_and_google_docstring():
    tool = as_tool(get_weather)
    assert tool.name == "get_weather"
    assert tool.schema() == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.\n\nLooks it up somewhere.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": 'The city name, for example "Paris".'},
                    "unit": {"enum": ["C", "F"], "type": "string", "description": "Temperature unit.", "default": "C"},
                    "days": {"type": "integer", "description": "How many days.", "default": 1},
                    "tags": {"type": "array", "items": {"type": "string"}, "default": None},
                },
                "required": ["city"],
            },
        },
    }


def test_tool_schema_reads_numpy_and_sphinx_docstrings_and_rich_types():
    def numpy_style(mode: Literal["a", "b"], point: Point, extra: Annotated[int, "an extra number"] = 2):
        """Do a thing.

        Parameters
        ----------
        mode : str
            Which mode.
        point : Point
            Where.
        """

    def sphinx_style(count: int, ratio: float | None = None, table: dict[str, int] | None = None):
        """Count things.

        :param count: How many.
        :param ratio: A ratio.
        """

    props = as_tool(numpy_style).parameters["properties"]
    assert props["mode"] == {"enum": ["a", "b"], "type": "string", "description": "Which mode."}
    assert props["point"] == {
        "type": "object",
        "properties": {"x": {"type": "number"}, "y": {"type": "number", "default": 0.0}},
        "required": ["x"],
        "description": "Where.",
    }
    assert props["extra"] == {"type": "integer", "description": "an extra number", "default": 2}
    sphinx = as_tool(sphinx_style)
    assert sphinx.description == "Count things."
    assert sphinx.parameters["properties"]["count"] == {"type": "integer", "description": "How many."}
    assert sphinx.parameters["properties"]["ratio"] == {"type": "number", "description": "A ratio.", "default": None}
    assert sphinx.parameters["properties"]["table"]["additionalProperties"] == {"type": "integer"}
    assert sphinx.parameters["required"] == ["count"]


class Address(pydantic.BaseModel):
    """A postal address."""

    title: str = pydantic.Field(description="Mr, Ms...")
    city: str
    zip_code: str | None = None


class Customer(pydantic.BaseModel):
    name: str
    home: Address
    work: Address | None = None


@dataclasses.dataclass
class Folder:
    name: str
    children: list[Folder]


def test_tool_schemas_are_flat_untitled_and_keep_only_recursive_definitions():
    def register(customer: Customer, tags: list[Annotated[int, pydantic.Field(ge=1)] | None], root: Folder):
        """Register a customer."""

    parameters = as_tool(register).parameters
    address = {
        "type": "object",
        "description": "A postal address.",
        "properties": {
            # a property named "title" is data, not the keyword
            "title": {"type": "string", "description": "Mr, Ms..."},
            "city": {"type": "string"},
            "zip_code": {"type": "string", "default": None},
        },
        "required": ["title", "city"],
    }
    assert parameters["properties"]["customer"] == {
        "type": "object",
        "properties": {"name": {"type": "string"}, "home": address, "work": {**address, "default": None}},
        "required": ["name", "home"],
    }
    assert parameters["properties"]["tags"] == {"type": "array", "items": {"type": "integer", "minimum": 1}}
    # a recursive type cannot be inlined: its definition stays, referenced from the parameters' root
    folder = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/Folder"}}},
        "required": ["name", "children"],
    }
    assert parameters["properties"]["root"] == folder
    assert parameters["$defs"] == {"Folder": folder}
    assert parameters["required"] == ["customer", "tags", "root"]


class Connection:
    """Not a JSON value."""


def test_a_parameter_type_without_a_json_schema_is_refused_by_name():
    def query(sql: str, conn: Connection, rows: int = 10):
        """Run a query."""

    with pytest.raises(TypeError, match=r"tool 'query': parameter 'conn' is annotated Connection, which has no JSON"):
        as_tool(query)

    def on_done(callback: Callable[[int], int]):
        """Call back."""

    with pytest.raises(TypeError, match=r"parameter 'callback' is annotated .*Callable"):
        as_tool(on_done)

    def untyped(a, b=2):
        """No hints: any value."""

    assert as_tool(untyped).parameters == {
        "type": "object",
        "properties": {"a": {}, "b": {"default": 2}},
        "required": ["a"],
    }


def test_docstring_parser_stops_the_description_at_the_first_section():
    description, params = parse_docstring("Summary line.\n\nArgs:\n    x: the x\n\nRaises:\n    ValueError: never")
    assert description == "Summary line."
    assert params == {"x": "the x"}


def test_tools_with_unusable_names_are_refused():
    with pytest.raises(ValueError, match="not allowed"):
        as_tool(lambda x: x)
    with pytest.raises(TypeError, match="function"):
        as_tool("not a function")
    custom = Tool(name="lookup", description="Find it.", parameters={"type": "object", "properties": {}}, fn=len)
    assert as_tool(custom) is custom


def test_tool_outputs_are_made_json_safe():
    assert json_safe({"a": [1, 2]}) == {"a": [1, 2]}
    assert json_safe(Point(1.0)) == {"x": 1.0, "y": 0.0}
    assert sorted(json_safe({1, 2})) == [1, 2]
    assert json_safe(Unit.F) == "F"
    assert json_safe(float("nan")) == "nan"
    assert json_safe(object()).startswith("<object object")


def test_importing_the_agent_package_does_not_import_litellm():
    code = "import sys, sessionkit.agent, sessionkit.testing.scripted; print('litellm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

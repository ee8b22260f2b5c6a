"""What tests/integrations/test_openai_agents.py runs, in its own process and in others.

- ``ScriptedModel``: an Agents SDK ``Model`` that answers from a script, without a
  network: a user message ``"add A and B"`` gets a call of the ``add`` tool, the
  tool's output gets a message with the sum, anything else a message quoting it.
  Every answer also says how many items the model was given, so a history that
  lost or repeated an item changes what the agent says next.
- ``run_turns(session, turns)``: an agent with that model, run by ``Runner`` one turn
  per text over the session; the final outputs.
- ``turns_process``: the same in a process of its own; ``add_process`` and
  ``pop_process``: concurrent writers, each in a process of its own
  (multiprocessing).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any

from agents import (
    Agent,
    Model,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    RunConfig,
    Runner,
    Session,
    TResponseInputItem,
    Usage,
    function_tool,
)
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

import a2sql
from a2sql.integrations.openai_agents import A2Session

_ADD = re.compile(r"add (-?\d+) and (-?\d+)")


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _text(item: Any) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [])


def _message(text: str, number: int) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=f"msg_{number}",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


class ScriptedModel(Model):
    """A model whose answers are a function of its input alone (see the module)."""

    def _answer(self, items: Sequence[TResponseInputItem]) -> ModelResponse:
        last: Any = items[-1]
        seen = len(items)
        if last.get("type") == "function_call_output":
            output = [_message(f"The sum is {last['output']} ({seen} items seen).", seen)]
        else:
            text = _text(last)
            found = _ADD.fullmatch(text)
            if found:
                arguments = json.dumps({"a": int(found[1]), "b": int(found[2])})
                output = [
                    ResponseFunctionToolCall(
                        type="function_call",
                        id=f"fc_{seen}",
                        call_id=f"call_{seen}",
                        name="add",
                        arguments=arguments,
                        status="completed",
                    )
                ]
            else:
                output = [_message(f"You said {text!r} ({seen} items seen).", seen)]
        return ModelResponse(output=list(output), usage=Usage(), response_id=None)

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        items: list[Any] = [{"role": "user", "content": input}] if isinstance(input, str) else input
        return self._answer(items)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model does not stream")


async def run_turns(session: Session, turns: Sequence[str]) -> list[str]:
    """One ``Runner.run`` per turn over ``session``; each turn's final output."""
    agent = Agent(name="scripted", instructions="Be brief.", model=ScriptedModel(), tools=[add])
    config = RunConfig(tracing_disabled=True)
    outputs = []
    for turn in turns:
        result = await Runner.run(agent, turn, session=session, run_config=config)
        outputs.append(str(result.final_output))
    return outputs


def turns_process(url: str, session_id: str, facade: str, turns: list[str], outputs: Any) -> None:
    """The turns run in a process of its own, on a store it opens (``sync``: a ``Store``,
    ``async``: an ``AsyncStore``); puts their outputs on the queue ``outputs``."""

    async def turning() -> list[str]:
        if facade == "async":
            async with a2sql.create_async_store(url) as astore:
                return await run_turns(A2Session(session_id, astore), turns)
        with a2sql.create_store(url) as store:
            return await run_turns(A2Session(session_id, store), turns)

    outputs.put(asyncio.run(turning()))


def add_process(url: str, session_id: str, writer: str, batches: int, start: Any) -> None:
    """A concurrent adder (a process of its own): ``batches`` calls of ``add_items``, each
    of two items, after every process has reached the barrier ``start``."""

    async def adding() -> None:
        with a2sql.create_store(url) as store:
            session = A2Session(session_id, store)
            await session.get_items(1)  # a connection open before the start
            start.wait(60)
            for n in range(batches):
                await session.add_items(
                    [
                        {"role": "user", "content": f"{writer}:{n}:0"},
                        {"role": "user", "content": f"{writer}:{n}:1"},
                    ]
                )

    asyncio.run(adding())


def pop_process(url: str, session_id: str, start: Any, popped: Any) -> None:
    """A concurrent popper (a process of its own, on an ``AsyncStore``): pops until the
    conversation is empty, after every process has reached the barrier ``start``;
    puts the list of what it popped, in order, on the queue ``popped``."""

    async def popping() -> list[Any]:
        mine = []
        async with a2sql.create_async_store(url) as astore:
            session = A2Session(session_id, astore)
            await session.get_items(1)
            start.wait(60)
            while (item := await session.pop_item()) is not None:
                mine.append(item)
        return mine

    popped.put(asyncio.run(popping()))

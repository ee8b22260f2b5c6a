"""A LangGraph graph with a human in the loop, for tests/integrations/test_langgraph.py.

``write`` drafts a post, ``review`` stops for a human's verdict (``interrupt``), and
``publish`` records it. Run as a script, it resumes a thread from its checkpoint in
a process of its own: ``python -m tests.integrations.langgraph_app URL THREAD VERDICT``
prints the final state as JSON.
"""

from __future__ import annotations

import json
import operator
import sys
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt

import a2sql
from a2sql.integrations.langgraph import A2Saver


class Post(TypedDict):
    topic: str
    draft: str
    verdict: str
    steps: Annotated[list[str], operator.add]


def write(state: Post) -> dict[str, Any]:
    return {"draft": f"a post on {state['topic']}", "steps": ["write"]}


def review(state: Post) -> dict[str, Any]:
    verdict = interrupt({"draft": state["draft"]})
    return {"verdict": verdict, "steps": ["review"]}


def publish(state: Post) -> dict[str, Any]:
    return {"steps": [f"publish:{state['verdict']}"]}


def build(checkpointer: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any, Any, Any, Any]:
    builder = StateGraph(Post)
    builder.add_node("write", write)
    builder.add_node("review", review)
    builder.add_node("publish", publish)
    builder.add_edge(START, "write")
    builder.add_edge("write", "review")
    builder.add_edge("review", "publish")
    builder.add_edge("publish", END)
    return builder.compile(checkpointer=checkpointer)


def main(url: str, thread_id: str, verdict: str) -> None:
    with a2sql.create_store(url) as store:
        graph = build(A2Saver(store))
        final = graph.invoke(Command(resume=verdict), {"configurable": {"thread_id": thread_id}})
        print(json.dumps(final, sort_keys=True))


if __name__ == "__main__":
    main(*sys.argv[1:4])

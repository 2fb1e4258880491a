"""A LangGraph agent checkpointed in turnlog, with LangChain's fake chat model (no network, no key).

    python scripts/examples/langgraph_example.py [path/to/turnlog.db]

A tool-calling agent runs with ``checkpointer=TurnlogSaver(db=...)``; then the same store is read
back with turnlog's own view: the thread's conversation as the model's budgeted context.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from turnlog import open_store
from turnlog.integrations.langgraph import TurnlogSaver
from turnlog.projections.context import ContextPolicy, build_context

db = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "turnlog.db"
call = {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1", "type": "tool_call"}
model = GenericFakeChatModel(
    messages=iter([AIMessage("", tool_calls=[call]), AIMessage("It is sunny in Paris.")])
)


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny, 21 C in {city}"


graph = StateGraph(MessagesState)
graph.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
graph.add_node("tools", ToolNode([get_weather]))
graph.add_edge(START, "agent")
graph.add_conditional_edges("agent", tools_condition)
graph.add_edge("tools", "agent")

# The one line that plugs turnlog in (instead of InMemorySaver / SqliteSaver):
with TurnlogSaver(db=db) as checkpointer:
    app = graph.compile(checkpointer=checkpointer)
    config = {"configurable": {"thread_id": "weather-thread"}}
    app.invoke({"messages": [HumanMessage("Weather in Paris?")]}, config)
    print("checkpoints:", len(list(app.get_state_history(config))))

with open_store(db) as store:  # the thread is an ordinary turnlog session
    for message in build_context(store, "weather-thread", ContextPolicy(budget=4000)).messages:
        print(f"  {message.role}: {message.content or [c.name for c in message.tool_calls]}")
    print("verify:", "ok" if store.verify().ok else "FAILED")
print(f"store: {db}  (try: turnlog --db {db} log weather-thread)")

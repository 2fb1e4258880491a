"""LangChain chat history kept in turnlog, with LangChain's fake chat model (no network, no key).

    python scripts/examples/langchain_example.py [path/to/turnlog.db]

A tool-calling turn goes through TurnlogChatMessageHistory; then the same store is read back with
turnlog's own views: the event log and the model's budgeted context.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from turnlog import open_store
from turnlog.integrations.langchain import TurnlogChatMessageHistory

db = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "turnlog.db"
call = {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1", "type": "tool_call"}
model = GenericFakeChatModel(
    messages=iter([AIMessage("", tool_calls=[call]), AIMessage("It is sunny in Paris.")])
)

# The one line that plugs turnlog in (instead of SQLChatMessageHistory / InMemoryChatMessageHistory):
history = TurnlogChatMessageHistory("weather-chat", db=db)
history.add_messages([SystemMessage("Be brief."), HumanMessage("Weather in Paris?")])
reply = model.invoke(history.messages)
history.add_message(reply)
for tool_call in reply.tool_calls:  # run the tool; its result goes into the history too
    history.add_message(ToolMessage("sunny, 21 C", tool_call_id=tool_call["id"], name=tool_call["name"]))
history.add_message(model.invoke(history.messages))
history.close()

print("LangChain reads back:")
for message in TurnlogChatMessageHistory("weather-chat", db=db).messages:
    print(f"  {message.type:>6}: {message.text or getattr(message, 'tool_calls', '')}")
with open_store(db) as store:
    print("turnlog events:", ", ".join(r.type for r in store.read_session("weather-chat")))
    print("verify:", "ok" if store.verify().ok else "FAILED")
print(f"store: {db}  (try: turnlog --db {db} log weather-chat)")

"""pydantic-ai conversations kept in turnlog: two turns with a tool, then what turnlog recorded.

Run: python scripts/examples/pydantic_ai_example.py   (uses pydantic-ai's FunctionModel, no API key)
"""

import asyncio
import tempfile
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from turnlog.integrations.pydantic_ai import TurnlogConversationStore


def fake_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if messages[-1].parts[-1].part_kind == "user-prompt":  # first ask the tool, then answer
        return ModelResponse(
            parts=[ToolCallPart("get_weather", {"city": "Paris"}, tool_call_id=f"c{len(messages)}")]
        )
    return ModelResponse(parts=[TextPart("It is sunny in Paris.")])


agent = Agent(FunctionModel(fake_model), instructions="Be brief.")


@agent.tool_plain
def get_weather(city: str) -> str:
    return f"sunny in {city}"


async def main() -> None:
    db = Path(tempfile.mkdtemp()) / "turnlog.db"
    store = TurnlogConversationStore(db=db)  # the one line: instead of InMemoryConversationStore()
    for question in ["Weather in Paris?", "And tomorrow?"]:
        conversation = await store.load("trip") or Conversation(conversation_id="trip")
        result = await agent.run(question, conversation=conversation)
        await store.save(result)
        print(f"user: {question}\nagent: {result.output}")
    loaded = await store.load("trip")
    assert loaded is not None
    usage = loaded.usage
    print(f"\nstored {len(loaded.messages)} messages, {usage.input_tokens} in / {usage.output_tokens} out")
    for recorded in store.store.read_session("trip"):
        print(f"  turnlog v{recorded.version}: {recorded.type}")
    print(f"\ninspect it: turnlog --db {db} log trip")
    store.close()


asyncio.run(main())

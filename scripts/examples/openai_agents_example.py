"""An OpenAI Agents SDK agent whose conversation is kept by turnlog: the one-line change is the
session (``SQLiteSession("conv-1", "agent.db")`` -> ``TurnlogSession("conv-1", db="turnlog.db")``).

Runs offline with the SDK's scripted test model. Usage: python openai_agents_example.py [STORE]
Then: turnlog --db STORE log conv-1 / context conv-1 --budget 2000 / audit conv-1 / verify
"""

import asyncio
import sys

from agents import Agent, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from turnlog.integrations.openai_agents import TurnlogSession


@function_tool
def get_weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}"


async def main(db: str) -> None:
    session = TurnlogSession("conv-1", db=db)
    model = ScriptedModel(
        [
            [function_call("get_weather", {"city": "Paris"}, call_id="call_1")],
            [assistant_message("It is sunny in Paris.")],
        ]
    )
    agent = Agent(name="weather", instructions="Be brief.", model=model, tools=[get_weather])
    result = await Runner.run(agent, "Weather in Paris?", session=session)
    print("agent answered:", result.final_output)
    print(f"the SDK reads back {len(await session.get_items())} items; turnlog's log of the session:")
    for record in session.store.read_session("conv-1"):
        print(f"  v{record.version} {record.type}")
    session.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "turnlog.db"))

"""sessionkit as the session store of other agent frameworks, and traces in.

Each integration is a module of its own with an optional extra, imported only when used
(``import sessionkit`` loads none of the frameworks):

- ``sessionkit.integrations.openai_agents``: a session of the OpenAI Agents SDK
  (``pip install 'sessionkit[openai-agents]'``);
- ``sessionkit.integrations.langgraph``: a LangGraph checkpointer (``[langgraph]``);
- ``sessionkit.integrations.adk``: a Google ADK session service (``[adk]``);
- ``sessionkit.integrations.otel``: OpenTelemetry traces (OTLP) as conversations (``[otel]``);
- ``sessionkit.integrations.litellm``: ``sk.capture``, every litellm completion recorded.
"""

"""Model adapters: a provider's SDK client as a ``steering_loop`` model, and its two converters.

Each provider has a module (import it directly; each needs its SDK, an extra
of runwire): ``openai_chat`` and ``openai_responses`` (``runwire[openai]``),
``anthropic`` (``runwire[anthropic]``), ``pydantic_ai`` (``runwire[pydantic-ai]``)
and ``openai_agents`` (``runwire[openai-agents]``). One shape across them:

* ``<provider>_model(client, model, system=..., tools=...)`` returns
  ``model(messages, signal)``, a model ``steering_loop`` takes: one streamed
  call, yielding UI chunks;
* a converter from the Run's conversation (``run.history()``) to the
  provider's input, for users who write their own loop;
* a converter from the provider's stream to UI chunks (text, reasoning, tool
  calls with streamed arguments, a ``finish`` chunk with usage in the
  message metadata, an ``error`` chunk with the provider's message).

``pipe()`` closes the provider's stream the moment steering or a cancel
aborts the call.
"""

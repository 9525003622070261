"""A small tool runner: ``tool()`` with pydantic parameters, and what ``run.run_tools`` does.

Theory of operation
-------------------
``tool()`` wraps a function that takes one pydantic model (the call's
arguments, validated) into a ``Tool`` with a name, a description (the
docstring) and the JSON schema a model needs. The function may be plain or
async; a plain one runs in a worker thread so it cannot stall the event loop.

``execute_tools`` runs the tool calls of one model response as one step of the
Run: it opens a response, writes each result the moment its call finishes
(so a crash later loses nothing that finished), and closes the response.
Calls run one after another, or with ``parallel=True`` side by side, at most
``max_parallel`` at once; ``timeout`` bounds each call. When the Run's signal
fires (a cancel) the step stops as the seed says:

* calls not started get ``Aborted before dispatch: the run stopped before this
  tool call started`` (``ABORTED_BEFORE_DISPATCH``);
* calls that finished keep their results;
* a call still running gets no result: it is cancelled (an async tool) or left
  behind (a plain tool in its thread), and its late result is never written.
  History repair later answers it ``OUTCOME_UNKNOWN``.

Failures are results the model reads, with a code: ``TOOL_NOT_FOUND``,
``VALIDATION_ERROR`` (arguments that do not fit the parameters; the pydantic
errors in the message), ``TOOL_TIMEOUT``, ``TOOL_ERROR`` (the tool raised), or
the code of a ``RunwireError`` the tool raised.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, overload

import anyio
from pydantic import BaseModel, ValidationError

from transport.asyncio.abort import AbortSignal
from transport.errors import VALIDATION_ERROR, RunwireError
from transport.frames import EntryBody, ResponseAppend, ResponseClose, ResponseOpen
from transport.history import ABORTED_BEFORE_DISPATCH, ABORTED_BEFORE_DISPATCH_TEXT
from transport.messages import ToolCallPart, ToolResultPart, UIMessage

from .pipe import MessageBuilder

__all__ = [
    "TOOL_ERROR",
    "TOOL_NOT_FOUND",
    "TOOL_TIMEOUT",
    "Tool",
    "ToolResult",
    "execute_tools",
    "tool",
    "tool_calls",
]

log = logging.getLogger("runwire.agent")

TOOL_NOT_FOUND = "TOOL_NOT_FOUND"
"""The model called a tool the runner was not given."""
TOOL_TIMEOUT = "TOOL_TIMEOUT"
"""The call ran longer than ``timeout``."""
TOOL_ERROR = "TOOL_ERROR"
"""The tool raised (anything but a ``RunwireError``, whose own code is kept)."""

P = TypeVar("P", bound=BaseModel)
Execute = Callable[[Any], Any]


@dataclass(frozen=True)
class Tool:
    """A tool a model may call: ``execute(params)`` gets the validated ``parameters`` model."""

    name: str
    description: str
    parameters: type[BaseModel]
    execute: Execute

    def schema(self) -> dict[str, Any]:
        """What a model is told about the tool: name, description, JSON schema of the arguments."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters.model_json_schema(),
        }


@overload
def tool(fn: Callable[[P], Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: type[BaseModel] | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: type[BaseModel] | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a ``Tool`` of ``fn(params)``; use as ``@tool`` or ``@tool(name=..., ...)``.

    ``parameters`` defaults to the pydantic model annotating ``fn``'s first
    parameter, ``name`` to ``fn.__name__``, ``description`` to its docstring.
    Raises ``TypeError`` when no pydantic model is given or annotated.
    """

    def make(func: Callable[..., Any]) -> Tool:
        model = parameters or _annotated_model(func)
        if model is None:
            raise TypeError(
                f"tool {func.__name__!r}: annotate its first parameter with a pydantic model "
                "or pass parameters=..."
            )
        return Tool(
            name=name or func.__name__,
            description=description or inspect.getdoc(func) or "",
            parameters=model,
            execute=func,
        )

    return make(fn) if fn is not None else make


def _annotated_model(func: Callable[..., Any]) -> type[BaseModel] | None:
    try:
        hints = inspect.get_annotations(func, eval_str=True)
    except Exception:
        return None
    params = list(inspect.signature(func).parameters)
    if not params:
        return None
    hint = hints.get(params[0])
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        return hint
    return None


@dataclass(frozen=True)
class ToolResult:
    """How one call ended.

    ``status``: ``ok``, ``error`` (a failure written as an error result),
    ``aborted`` (never started: ``ABORTED_BEFORE_DISPATCH``) or ``unknown``
    (running when the Run stopped: nothing written). ``output`` is what was
    written (``{"code", "message"}`` for errors).
    """

    tool_call_id: str
    tool_name: str
    status: Literal["ok", "error", "aborted", "unknown"]
    output: Any = None
    code: str | None = None

    @property
    def is_error(self) -> bool:
        """True for a written failure (``error`` or ``aborted``)."""
        return self.status in ("error", "aborted")

    def chunk(self) -> dict[str, Any]:
        """The stream chunk that writes this result."""
        if self.status == "ok":
            return {
                "type": "tool-output-available",
                "toolCallId": self.tool_call_id,
                "toolName": self.tool_name,
                "output": self.output,
            }
        return {
            "type": "tool-output-error",
            "toolCallId": self.tool_call_id,
            "toolName": self.tool_name,
            "errorText": self.output["message"],
            "errorCode": self.code,
        }


def _failed(call: ToolCallPart, code: str, message: str, status: str = "error") -> ToolResult:
    return ToolResult(
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        status="aborted" if status == "aborted" else "error",
        output={"code": code, "message": message},
        code=code,
    )


def tool_calls(message: UIMessage | None) -> list[ToolCallPart]:
    """The tool calls of a message that the message itself does not answer."""
    if message is None:
        return []
    answered = {p.tool_call_id for p in message.parts if isinstance(p, ToolResultPart)}
    return [
        p for p in message.parts if isinstance(p, ToolCallPart) and p.tool_call_id not in answered
    ]


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


async def _call(tool: Tool, call: ToolCallPart, timeout: float | None) -> ToolResult:
    try:
        params = tool.parameters.model_validate(call.input if call.input is not None else {})
    except ValidationError as exc:
        return _failed(call, VALIDATION_ERROR, f"invalid arguments for {tool.name}: {exc}")
    try:
        with anyio.fail_after(timeout) if timeout is not None else nullcontext():
            if inspect.iscoroutinefunction(tool.execute):
                output = await tool.execute(params)
            else:
                output = await anyio.to_thread.run_sync(
                    tool.execute, params, abandon_on_cancel=True
                )
                if inspect.isawaitable(output):
                    output = await output
    except TimeoutError:
        return _failed(call, TOOL_TIMEOUT, f"{tool.name} timed out after {timeout}s")
    except RunwireError as exc:
        return _failed(call, exc.code, exc.message)
    except Exception as exc:
        return _failed(call, TOOL_ERROR, f"{tool.name} failed: {exc}")
    return ToolResult(call.tool_call_id, call.tool_name, "ok", _jsonable(output))


@dataclass
class _Step:
    results: dict[str, ToolResult] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)


async def execute_tools(
    calls: Sequence[ToolCallPart],
    tools: Iterable[Tool],
    *,
    run_id: str,
    message_id: str,
    signal: AbortSignal,
    publish: Callable[[EntryBody], Awaitable[object]],
    entry_id: Callable[[], str],
    parallel: bool = False,
    max_parallel: int | None = None,
    timeout: float | None = None,
) -> tuple[list[ToolResult], UIMessage]:
    """Run ``calls`` as one step (see the module docstring); their results and the message.

    ``publish`` sends an entry and returns once the relay acknowledged it.
    Raises ``RunwireError`` if a publish fails.
    """
    if max_parallel is not None and max_parallel < 1:
        raise ValueError("max_parallel must be at least 1")
    by_name = {t.name: t for t in tools}
    builder = MessageBuilder(message_id)
    step = _Step()
    lock = anyio.Lock()

    async def write(result: ToolResult) -> None:
        chunk = result.chunk()
        builder.apply(chunk)
        with anyio.CancelScope(shield=True):
            async with lock:
                await publish(
                    ResponseAppend(
                        id=entry_id(), run_id=run_id, message_id=message_id, chunks=[chunk]
                    )
                )

    async def one(call: ToolCallPart, limiter: anyio.CapacityLimiter | None) -> None:
        async with limiter if limiter is not None else nullcontext():
            if signal.aborted:
                return
            step.started.add(call.tool_call_id)
            found = by_name.get(call.tool_name)
            if found is None:
                result = _failed(call, TOOL_NOT_FOUND, f"there is no tool {call.tool_name!r}")
            else:
                result = await _call(found, call, timeout)
            if signal.aborted:
                return  # the Run stopped while it ran: a late result is never written
            step.results[call.tool_call_id] = result
            await write(result)

    await publish(ResponseOpen(id=entry_id(), run_id=run_id, message_id=message_id))
    async with signal.scope():
        if parallel:
            limiter = anyio.CapacityLimiter(max_parallel or max(1, len(calls)))
            async with anyio.create_task_group() as tg:
                for call in calls:
                    tg.start_soon(one, call, limiter)
        else:
            for call in calls:
                await one(call, None)
    out: list[ToolResult] = []
    for call in calls:
        result = step.results.get(call.tool_call_id)
        if result is None and call.tool_call_id not in step.started:
            result = _failed(
                call, ABORTED_BEFORE_DISPATCH, ABORTED_BEFORE_DISPATCH_TEXT, status="aborted"
            )
            step.results[call.tool_call_id] = result
            await write(result)
        if result is None:
            result = ToolResult(call.tool_call_id, call.tool_name, "unknown")
        out.append(result)
    message = builder.message()
    await publish(
        ResponseClose(id=entry_id(), run_id=run_id, message_id=message_id, message=message)
    )
    return out, message

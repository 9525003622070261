"""A small tool runner: ``tool()`` with pydantic parameters, and what ``run.run_tools`` does.

``tool()`` wraps a function that takes one pydantic model, the call's
validated arguments, into a ``Tool``. The tool has a name, a description (the
docstring) and the JSON schema a model needs. A plain function runs in a worker
thread, so it cannot stall the event loop.

``execute_tools`` runs the tool calls of one model response as one step of the
Run. It opens a response, writes each result the moment its call finishes, and
closes the response. Calls run one after another, or side by side with
``parallel=True``. A cancel stops the step: calls not started are answered
``ABORTED_BEFORE_DISPATCH``, finished calls keep their results, and a running
call gets no result.

A tool may ask a person through its ``ToolContext`` (``agent_side._asking``).
Failures are results the model reads, with a code: ``TOOL_NOT_FOUND``,
``VALIDATION_ERROR``, ``TOOL_TIMEOUT``, ``TOOL_ERROR``, or the code of a
``RunwireError`` the tool raised. docs/explanation/agent-runs.md tells the
whole story.
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

from transport import _tracing as tracing
from transport._history import ABORTED_BEFORE_DISPATCH, ABORTED_BEFORE_DISPATCH_TEXT
from transport._interrupts import NOT_STARTED_TEXT
from transport.asyncio._abort import AbortSignal
from transport.errors import VALIDATION_ERROR, RunwireError
from transport.frames import (
    EntryBody,
    Interrupt,
    ResponseAppend,
    ResponseOpen,
)
from transport.messages import ToolCallPart, ToolResultPart, UIMessage

from ._asking import APPROVAL_SCHEMA, Approval, Pause, Paused, ToolContext, Unanswered
from ._durable import tool_step_metadata
from ._pipe import MessageBuilder, close_entry

__all__ = [
    "APPROVAL_SCHEMA",
    "INTERRUPTED",
    "TOOL_ERROR",
    "TOOL_NOT_FOUND",
    "TOOL_TIMEOUT",
    "Approval",
    "Pause",
    "Tool",
    "ToolContext",
    "ToolResult",
    "approval_request",
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

INTERRUPTED = "INTERRUPTED"
"""A call's question was not answered: it expired, the user moved on or declined."""

P = TypeVar("P", bound=BaseModel)
M = TypeVar("M", bound=BaseModel)


Execute = Callable[[Any], Any]


@dataclass(frozen=True)
class Tool:
    """A tool a model may call: ``execute(params)`` gets the validated ``parameters`` model."""

    name: str
    description: str
    parameters: type[BaseModel]
    execute: Execute
    requires_approval: bool | Callable[[Any], bool | str] = False
    """Ask a person to approve a call before it runs (an ``approval`` interrupt): always,
    or when this rule, given the call's arguments, says so (a text it returns is the
    reason the request gives)."""

    @property
    def takes_context(self) -> bool:
        """True when ``execute`` takes a second parameter (the ``ToolContext``)."""
        try:
            return len(inspect.signature(self.execute).parameters) >= 2
        except (TypeError, ValueError):  # pragma: no cover
            return False

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
def tool(fn: Callable[[P, ToolContext], Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: type[BaseModel] | None = None,
    requires_approval: bool | Callable[[Any], bool | str] = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: type[BaseModel] | None = None,
    requires_approval: bool | Callable[[Any], bool | str] = False,
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
            requires_approval=requires_approval,
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
    (running when the Run stopped: nothing written) or ``paused`` (it asked a
    question nobody answered yet: nothing written). ``output`` is what was
    written (``{"code", "message"}`` for errors).
    """

    tool_call_id: str
    tool_name: str
    status: Literal["ok", "error", "aborted", "unknown", "paused"]
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
    """The tool calls of a message that the message itself does not answer.

    A call whose input never became whole (``input_text`` set) is left out.
    """
    if message is None:
        return []
    answered = {p.tool_call_id for p in message.parts if isinstance(p, ToolResultPart)}
    return [
        p
        for p in message.parts
        if isinstance(p, ToolCallPart) and p.tool_call_id not in answered and p.input_text is None
    ]


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


async def _call(
    tool: Tool, call: ToolCallPart, timeout: float | None, ctx: ToolContext
) -> ToolResult:
    arguments = call.input if call.input is not None else {}
    try:
        asked = approval_request(tool, arguments)
        if asked is not None:
            decision = await ctx.approval(f"Run {tool.name}?", arguments, asked)
            if not decision.approved:
                why = f": {decision.reason}" if decision.reason else ""
                return _failed(call, INTERRUPTED, f"The user did not approve {tool.name}{why}")
            if decision.updated_arguments is not None:
                arguments = decision.updated_arguments
        try:
            params = tool.parameters.model_validate(arguments)
        except ValidationError as exc:
            return _failed(call, VALIDATION_ERROR, f"invalid arguments for {tool.name}: {exc}")
        args: tuple[Any, ...] = (params, ctx) if tool.takes_context else (params,)
        with anyio.fail_after(timeout) if timeout is not None else nullcontext():
            if inspect.iscoroutinefunction(tool.execute):
                output = await tool.execute(*args)
            else:
                output = await anyio.to_thread.run_sync(tool.execute, *args, abandon_on_cancel=True)
                if inspect.isawaitable(output):
                    output = await output
    except Paused:
        raise
    except Unanswered as exc:
        return _failed(call, INTERRUPTED, exc.text)
    except TimeoutError:
        return _failed(call, TOOL_TIMEOUT, f"{tool.name} timed out after {timeout}s")
    except RunwireError as exc:
        return _failed(call, exc.code, exc.message)
    except Exception as exc:
        return _failed(call, TOOL_ERROR, f"{tool.name} failed: {exc}")
    return ToolResult(call.tool_call_id, call.tool_name, "ok", _jsonable(output))


def approval_request(tool: Tool, arguments: Any) -> dict[str, Any] | None:
    """The details of the approval a call of ``tool`` asks for, or ``None`` when it asks none.

    ``reason``: why it asks (the text a rule returned, or a sentence saying which
    rule). ``rule``: ``"always"`` (``requires_approval=True``) or the rule's
    function name (``"rule"`` for a lambda). ``suggested_rule``: what answering
    ``remember: true`` adds, approving the tool's later calls in the Run. A rule
    that raises asks too (fail closed), its reason naming the failure.
    """
    rule = tool.requires_approval
    if rule is False:
        return None
    if rule is True:
        name = "always"
        reason = f"{tool.name} always asks for approval"
    else:
        name = getattr(rule, "__name__", "rule")
        name = "rule" if name == "<lambda>" else name
        try:
            verdict = rule(arguments)
        except Exception as exc:
            verdict = f"the approval rule of {tool.name} failed ({type(exc).__name__})"
            log.warning("approval rule of tool %s failed; asking for approval", tool.name)
        if not verdict:
            return None
        reason = (
            verdict
            if isinstance(verdict, str)
            else f"the approval rule of {tool.name} matched these arguments"
        )
    return {
        "reason": reason,
        "rule": name,
        "suggested_rule": {"tool": tool.name, "decision": "approve", "scope": "run"},
    }


@dataclass
class _Step:
    results: dict[str, ToolResult] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    questions: list[Interrupt] = field(default_factory=list)


def result_from_dict(data: dict[str, Any]) -> ToolResult:
    """A ``ToolResult`` kept in a pause checkpoint."""
    return ToolResult(
        tool_call_id=data["tool_call_id"],
        tool_name=data["tool_name"],
        status=data["status"],
        output=data.get("output"),
        code=data.get("code"),
    )


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
    pause: Pause | None = None,
    finished: dict[str, ToolResult] | None = None,
    max_close_bytes: int | None = None,
) -> tuple[list[ToolResult], UIMessage, list[Interrupt]]:
    """Run ``calls`` as one step (see the module docstring).

    Returns their results, the message and the questions nobody answered yet
    (then the response is left open and the step is to run again on resume).
    ``pause`` holds the answers of a resumed step, ``finished`` the results
    its calls had before it paused. ``publish`` sends an entry and returns
    once the relay acknowledged it. The step's close carries the message
    unless it is over ``max_close_bytes`` (``pipe.close_entry``: the results
    were appended one by one, so readers keep them). Raises ``RunwireError``
    if a publish fails.
    """
    pause = pause or Pause()
    finished = finished or {}
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

    waited = {q.get("tool_call_id") for q in pause.asked.values()}

    async def one(
        call: ToolCallPart, limiter: anyio.CapacityLimiter | None, together: bool = False
    ) -> None:
        async with limiter if limiter is not None else nullcontext():
            # Calls that run together all start, questions or not; a later one does not.
            if signal.aborted or (step.questions and not together):
                return
            step.started.add(call.tool_call_id)
            kept = finished.get(call.tool_call_id)
            found = by_name.get(call.tool_name)
            if kept is not None:
                result = kept
            elif pause.settled and call.tool_call_id not in waited:
                result = _failed(call, INTERRUPTED, NOT_STARTED_TEXT)
            elif found is None:
                result = _failed(call, TOOL_NOT_FOUND, f"there is no tool {call.tool_name!r}")
            else:
                ctx = ToolContext(call.tool_call_id, call.tool_name, pause)
                try:
                    attributes = {"runwire.tool": call.tool_name}
                    with tracing.span("runwire.tool", attributes=attributes):
                        result = await _call(found, call, timeout, ctx)
                except Paused as paused:
                    step.questions.append(paused.question)
                    return
            if signal.aborted:
                return  # the Run stopped while it ran: a late result is never written
            step.results[call.tool_call_id] = result
            await write(result)

    step_metadata = tool_step_metadata(calls, parallel=parallel)
    builder.metadata.update(step_metadata)  # the close keeps it
    await publish(
        ResponseOpen(id=entry_id(), run_id=run_id, message_id=message_id, metadata=step_metadata)
    )
    async with signal.scope():
        if parallel:
            width = max_parallel or max(1, len(calls))
            limiter = anyio.CapacityLimiter(width)
            async with anyio.create_task_group() as tg:
                for i, call in enumerate(calls):
                    tg.start_soon(one, call, limiter, i < width)
        else:
            for call in calls:
                await one(call, None)
    if step.questions and not signal.aborted:
        paused = {q.tool_call_id for q in step.questions}
        out_paused: list[ToolResult] = []
        for call in calls:
            result = step.results.get(call.tool_call_id)
            if result is None:
                status: Literal["paused", "unknown"] = (
                    "paused" if call.tool_call_id in paused else "unknown"
                )
                result = ToolResult(call.tool_call_id, call.tool_name, status)
            out_paused.append(result)
        return out_paused, builder.message(), step.questions
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
        close_entry(entry_id=entry_id(), run_id=run_id, message=message, max_bytes=max_close_bytes)
    )
    return out, message, []

"""Handlers by queue and the middleware around them (docs/client-spec.md, points 12 to 14),
shared by the sync Worker and the AsyncWorker.

A registered handler's parameters are filled by their annotations: the one annotated with the
worker's context class (``TaskContext``, ``AsyncTaskContext``), or named ``ctx`` without an
annotation, gets the task's context; the other one (at most one) gets the payload decoded into
its annotated type by the worker's serializer (``bytes``: the raw payload; no annotation or
``Any``: the JSON value as is). Its return value is the task's result: ``bytes`` as they are,
``None`` as empty, anything else encoded by the serializer.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import typing
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from taskbroker.errors import PermanentError, RetryableError
from taskbroker.serde import Serializer, decode_payload, encode_payload, one_line

#: Around every handler call: ``middleware(ctx, call_next)`` returns the outcome (``call_next()``'s
#: or another) or raises. The first registered is the outermost.
Middleware = Callable[[Any, Callable[[], Any]], Any]
#: The same for the AsyncWorker: ``async def middleware(ctx, call_next)``, ``await call_next()``.
AsyncMiddleware = Callable[[Any, Callable[[], Awaitable[Any]]], Awaitable[Any]]


@dataclasses.dataclass(frozen=True)
class Registered:
    """One queue's handler and how to call it."""

    queue: str
    fn: Callable[..., Any]
    #: For each parameter in order: "ctx", or "payload".
    params: tuple[str, ...]
    #: The payload parameter's type (Any when it has none).
    payload_type: Any
    #: False for the handler given to the constructor: called with the context only, its
    #: result bytes, str or None (the raw contract).
    typed: bool = True

    def args(self, ctx: Any, serializer: Serializer) -> list[Any]:
        """The call's arguments; raises PayloadError when the payload does not decode."""
        if not self.typed:
            return [ctx]
        payload: Any = None
        if "payload" in self.params:
            payload = decode_payload(serializer, ctx.payload, self.payload_type, self.queue)
        return [ctx if p == "ctx" else payload for p in self.params]


def register(queue: str, fn: Callable[..., Any], context_type: type) -> Registered:
    """Reads ``fn``'s parameters; raises TypeError (at registration, not per task) for a
    handler whose parameters cannot be filled."""
    if not queue:
        raise ValueError("a handler's queue is empty")
    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError) as err:
        raise TypeError(f"handler for queue {queue}: its type hints do not resolve: {err}") from err
    params: list[str] = []
    payload_type: Any = Any
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is not p.empty:
            continue
        if p.kind is p.KEYWORD_ONLY:
            raise TypeError(f"handler for queue {queue}: keyword-only parameter {p.name} cannot be filled")
        hint = hints.get(p.name)
        is_ctx = (isinstance(hint, type) and issubclass(hint, context_type)) or (hint is None and p.name == "ctx")
        if is_ctx:
            params.append("ctx")
            continue
        if "payload" in params:
            raise TypeError(
                f"handler for queue {queue}: takes more than one payload parameter; "
                f"annotate the context's with {context_type.__name__}"
            )
        params.append("payload")
        payload_type = Any if hint is None else hint
    return Registered(queue, fn, tuple(params), payload_type)


def raw(queue: str, fn: Callable[..., Any]) -> Registered:
    """The constructor's handler: called with the context, its result bytes, str or None."""
    return Registered(queue, fn, ("ctx",), bytes, typed=False)


def encode_result(reg: Registered, serializer: Serializer, result: Any) -> bytes:
    """A handler's return value as the task's result; TypeError naming the type when it
    cannot be stored (the attempt then fails)."""
    if not reg.typed:
        if not isinstance(result, (bytes, bytearray, str, type(None))):
            raise TypeError(f"handler returned {type(result).__name__}, not bytes, str or None")
        return result.encode() if isinstance(result, str) else bytes(result or b"")
    if result is None:
        return b""
    try:
        return encode_payload(serializer, result)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"handler returned {type(result).__name__}, which {type(serializer).__name__} cannot encode: {one_line(err)}"
        ) from err


def chain(middleware: Sequence[Middleware], ctx: Any, call: Callable[[], Any]) -> Any:
    """Runs ``call`` inside every middleware, the first outermost."""

    def at(i: int) -> Any:
        if i == len(middleware):
            return call()
        return middleware[i](ctx, lambda: at(i + 1))

    return at(0)


async def chain_async(middleware: Sequence[AsyncMiddleware], ctx: Any, call: Callable[[], Awaitable[Any]]) -> Any:
    """The same for ``async`` middleware."""

    async def at(i: int) -> Any:
        if i == len(middleware):
            return await call()
        return await middleware[i](ctx, lambda: at(i + 1))

    return await at(0)


def log_failure(log: logging.Logger, ctx: Any, error: BaseException) -> None:
    """Logs a handler's failure by docs/client-spec.md (point 11, Logging): the client's own
    failures (``RetryableError``, ``PermanentError``, a payload that does not decode) at WARN in
    one line without a stack, saying whether the task will be retried or goes DEAD (a
    ``PermanentError``, or the last of ``max_attempts``); any other exception, unexpected, at
    ERROR with its stack. A result of the wrong type (``TypeError`` from ``encode_result``) is
    logged by the caller."""
    task = ctx.task
    if isinstance(error, PermanentError):
        log.warning("task %s: failed permanently, the task goes DEAD: %s", ctx.task_id, error)
    elif not isinstance(error, RetryableError):
        log.error("task %s: handler raised %s: %s", ctx.task_id, type(error).__name__, error, exc_info=error)
    elif task.max_attempts and task.attempt >= task.max_attempts:
        log.warning(
            "task %s: attempt %d of %d failed, the task goes DEAD: %s",
            ctx.task_id, task.attempt, task.max_attempts, error,
        )
    else:
        log.warning(
            "task %s: attempt %d of %d failed, the task will be retried: %s",
            ctx.task_id, task.attempt, task.max_attempts, error,
        )

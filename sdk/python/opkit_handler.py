"""opkit's handler SDK for Python: one module, the standard library only.

A handler program registers a function per trigger and runs::

    import opkit_handler as opkit

    handlers = opkit.Handlers()

    @handlers.on("create", "update")
    def greet(ctx: opkit.Context[Greeting, GreetingSpec]) -> opkit.Result[GreetingStatus]:
        name = ctx["object"]["spec"]["name"]
        print(f"greeting {name}", file=sys.stderr)         # the run's log
        return {"status": {"greeting": f"Hello, {name}!"},
                "events": [opkit.normal("Greeted", f"Hello, {name}!")]}

    @handlers.on()                                        # the default: every other trigger
    def other(ctx: opkit.Context) -> None: ...

    if __name__ == "__main__":
        handlers.run()

The contract (docs/handlers.md; the JSON Schemas in docs/schemas/):

- The function registered for the binding context's ``trigger`` is called
  with the context (a dict); the default (``@handlers.on()`` or
  ``@handlers.on("*")``) for a trigger with none. A trigger with neither
  fails the run permanently, naming it and the triggers the program handles.
- It returns a result (a dict with the result schema's fields: status,
  events, requeueAfter, skipped, refuse, allowed, message, patch, warnings,
  error), or None, the empty result (written ``{}``). The result is checked
  before it is written: a field that is not one of these (a misspelling), an
  event whose type is not Normal or Warning, a requeueAfter that is not a
  positive Go duration, a field the trigger does not take, a result that
  is not JSON or nests deeper than 100 objects and arrays (opkit's limit),
  or that cannot be checked or written at all (a ``RecursionError``): the
  run fails permanently, with a message naming it. ``requeueAfter`` is
  what Go's ``time.ParseDuration`` reads, at least 1ns and at most Go's
  maximum, ``2562047h47m16.854775807s`` (``MAX_DURATION``); it may be a
  ``timedelta``, written as a Go duration (``requeue_after()`` does it
  too, and raises ValueError for one not positive or past the maximum).
- Errors raised by the function, and the exit status of a process per run:

  - ``PermanentError(M)``: ``{"error": {"message": M, "permanent": true}}``,
    the object is Stalled at once; exit 0.
  - ``TemporaryError(M)``: ``{"error": {"message": M}}``, retried with
    back-off; exit 75 (EX_TEMPFAIL).
  - any other exception (a bug): its traceback on stderr, and
    ``{"error": {"message": "<Type>: <message>"}}``, retried; exit 1.

  A binding context that is not a JSON object with a trigger is a
  permanent error too (exit 0); so is a result that fails its check. A
  result the function returns, an ``error`` in it or not, exits 0.
- Two modes, one program. With ``OPKIT_MODE=Serve`` in the environment
  (exec.mode Serve), ``run()`` loops: it reads a binding context per line of
  stdin and answers each with exactly one compact JSON line on stdout,
  flushed, after flushing stderr (the run's log); an empty line is answered
  with a permanent error, so that answers stay in step; an error, a
  result that fails its check or cannot be written included, is an
  answer and the loop goes on; it ends at the end of stdin, exit 0.
  Otherwise (a process per run) it reads all of stdin as one binding
  context, writes its result to stdout, and exits 0, 75 or 1 as above.
- stdout is the protocol's: ``run()`` keeps it for results alone. What the
  program prints is the run's log: while a function runs ``sys.stdout`` is
  stderr, and the process's file descriptor 1 is its stderr too, so that a
  child process (``subprocess.run(["kubectl", ...])``) or an extension that
  writes to stdout cannot break the protocol either. (What the program
  wrote to stdout before ``run()``, at import, is beyond it: print nothing
  there.)
- stdin is the protocol's too: ``run()`` reads the binding contexts from a
  copy of file descriptor 0, and makes fd 0 (and so ``sys.stdin``) /dev/null,
  in both modes. A child process the function starts without ``stdin=``
  (``subprocess.run(["cat"])``), or ``input()``, reads an empty stdin: it
  cannot block on the engine's stream, nor swallow the next context (in
  mode Serve, a context never answered). Contexts are read buffered, as
  UTF-8 (an invalid byte replaced), a line ending at "\\n".

Types: ``Context[O, Old]`` is a run's binding context, generic in the
object's type and the old spec's (the generated types of ``opkit generate
types`` plug in: ``Context[Greeting, GreetingSpec]``); ``Result[S]`` a
result, generic in the status's; ``ScheduleContext`` and ``EventContext``
an operator-wide schedule's and a webhook delivery's run (no object);
``AdmissionContext[O]`` and ``AdmissionResult`` an admission handler's
(docs/admission.md). Without parameters they default to ``KubeObject`` and
plain dicts. Where the engine sends null they say ``| None``: a Context's
``old`` (before the first create and update were done) and ``diff`` (in a
run not about a change: resume, schedule, requeue, when, enter, exit;
``for change in ctx["diff"] or []``).

In tests, ``handlers.call(ctx)`` runs the function for a context (a dict, or
JSON) in-process and returns the result as the protocol would write it,
errors turned into error results as above; ``handlers.run_once(stdin,
stdout, stderr)`` (it returns the exit status) and ``handlers.serve(stdin,
stdout, stderr)`` run the two modes on streams.
"""

import io
import json
import os
import re
import sys
import traceback
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    Literal,
    NoReturn,
    NotRequired,
    TextIO,
    TypedDict,
    cast,
)

if TYPE_CHECKING:
    # Type parameters with defaults (PEP 696) for the type checker, so that
    # a bare Context is Context[KubeObject, dict[str, Any]]; typing's
    # TypeVar takes a default from Python 3.13 only.
    from typing_extensions import TypeVar
else:
    from typing import TypeVar

__all__ = [
    "AdmissionContext",
    "AdmissionRequest",
    "AdmissionResult",
    "Change",
    "Context",
    "Delivery",
    "EX_TEMPFAIL",
    "Event",
    "EventContext",
    "GroupVersionKind",
    "GroupVersionResource",
    "Handlers",
    "KubeObject",
    "MAX_DURATION",
    "ManualRequest",
    "ObjectMeta",
    "OwnerReference",
    "PermanentError",
    "Result",
    "ResultError",
    "Schedule",
    "ScheduleContext",
    "TRIGGERS",
    "TemporaryError",
    "Trigger",
    "UserInfo",
    "normal",
    "requeue_after",
    "warning",
]

# ---------------------------------------------------------------------------
# The binding context (docs/schemas/binding-context.schema.json)

Trigger = Literal[
    "create", "update", "delete", "resume", "schedule", "when", "requeue",
    "event", "rerun", "manual", "enter", "exit", "validate", "mutate",
]
"""A run's trigger: the binding context's "trigger"."""

TRIGGERS: tuple[str, ...] = (
    "create", "update", "delete", "resume", "schedule", "when", "requeue",
    "event", "rerun", "manual", "enter", "exit", "validate", "mutate",
)

_ADMISSION_TRIGGERS = ("validate", "mutate")


class OwnerReference(TypedDict):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: NotRequired[bool]
    blockOwnerDeletion: NotRequired[bool]


class ObjectMeta(TypedDict):
    """An object's metadata. name is always there (but in an admission
    handler's create with generateName); the rest when the object has it."""

    name: str
    generateName: NotRequired[str]
    namespace: NotRequired[str]
    uid: NotRequired[str]
    generation: NotRequired[int]
    resourceVersion: NotRequired[str]
    labels: NotRequired[dict[str, str]]
    annotations: NotRequired[dict[str, str]]
    creationTimestamp: NotRequired[str]
    deletionTimestamp: NotRequired[str]
    deletionGracePeriodSeconds: NotRequired[int]
    finalizers: NotRequired[list[str]]
    ownerReferences: NotRequired[list[OwnerReference]]


class KubeObject(TypedDict):
    """A Kubernetes object of any kind: a child, a related or a watched
    object. Generated types (Greeting) have the same shape with their own
    spec and status."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: NotRequired[dict[str, Any]]
    status: NotRequired[dict[str, Any]]
    data: NotRequired[dict[str, Any]]


class Change(TypedDict):
    """One change of diff: from old to object.spec (a watched object's, from
    its root), e.g. {"op": "change", "path": "spec.language", "old": "en",
    "new": "fr"}."""

    op: Literal["add", "remove", "change"]
    path: str
    old: NotRequired[Any]
    new: NotRequired[Any]


class ManualRequest(TypedDict):
    """Who asked for an operator-wide schedule's run now (opkit schedule
    run), and why."""

    request: str
    by: str
    reason: NotRequired[str]


class Schedule(TypedDict):
    """The slot an operator-wide schedule's run is for (RFC 3339, UTC)."""

    slot: str
    manual: NotRequired[ManualRequest]


class Delivery(TypedDict):
    """The webhook delivery a run on event handles (docs/events.md)."""

    id: str
    source: str
    deliveryId: NotRequired[str]
    event: NotRequired[str]
    receivedAt: str
    headers: dict[str, str]
    payload: Any


if TYPE_CHECKING:
    O = TypeVar("O", default=KubeObject)
    Old = TypeVar("Old", default=dict[str, Any])
    S = TypeVar("S", default=dict[str, Any])
else:
    O = TypeVar("O")
    Old = TypeVar("Old")
    S = TypeVar("S")


class _Run(TypedDict):
    operator: str
    handler: str
    trigger: Trigger
    runId: str
    idempotencyKey: str
    attempt: int
    rerunOf: NotRequired[str]
    traceparent: NotRequired[str]
    tracestate: NotRequired[str]


class Context(_Run, Generic[O, Old]):
    """The binding context of a run for an object: a custom resource (O its
    generated type, Old its spec's) or a watched object (Old its
    projection). old is None before the object's first create and update
    handlers were done; diff is None in runs that are not about a change
    (resume, schedule, requeue, when, enter, exit: ``for change in
    ctx["diff"] or []``). children is {} when there are none (a delete
    run, a watched object): null only in the runs for no object,
    ScheduleContext's and EventContext's."""

    object: O
    old: Old | None
    diff: list[Change] | None
    children: dict[str, KubeObject]
    related: NotRequired[dict[str, KubeObject | list[KubeObject]]]
    schedule: NotRequired[Schedule]
    event: NotRequired[Delivery]


class ScheduleContext(_Run):
    """The binding context of an operator-wide schedule's run (trigger
    schedule, or manual when a person asked for it now): for no object."""

    object: None
    old: None
    diff: None
    children: None
    schedule: Schedule


class EventContext(_Run):
    """The binding context of a run on event: a webhook delivery, for the
    operator (no object)."""

    object: None
    old: None
    diff: None
    children: None
    event: Delivery


# ---------------------------------------------------------------------------
# The result (docs/schemas/result.schema.json)


class Event(TypedDict):
    """A Kubernetes Event to post on the object. normal() and warning()
    make one."""

    type: NotRequired[Literal["Normal", "Warning"]]
    reason: str
    message: str


class ResultError(TypedDict):
    """A failure the handler reports: permanent stops retries."""

    message: str
    permanent: NotRequired[bool]


class Result(TypedDict, Generic[S], total=False):
    """A run's result: every field optional, none other allowed. S is the
    type of status (a generated GreetingStatus). requeueAfter is a Go
    duration ("30s"), or a timedelta the SDK writes as one."""

    status: S
    events: list[Event]
    requeueAfter: str | timedelta
    skipped: bool
    refuse: str
    allowed: bool
    message: str
    patch: dict[str, Any]
    warnings: list[str]
    error: ResultError


# ---------------------------------------------------------------------------
# Admission handlers (docs/admission.md, admission-context.schema.json)


class UserInfo(TypedDict, total=False):
    username: str
    uid: str
    groups: list[str]
    extra: dict[str, Any]


class GroupVersionKind(TypedDict):
    group: str
    version: str
    kind: str


class GroupVersionResource(TypedDict):
    group: str
    version: str
    resource: str


class AdmissionRequest(TypedDict):
    uid: str
    kind: GroupVersionKind
    resource: GroupVersionResource
    subResource: NotRequired[str]
    namespace: NotRequired[str]
    name: NotRequired[str]


class AdmissionContext(TypedDict, Generic[O]):
    """The input of an admission handler (on validate or mutate). object is
    None for DELETE, oldObject for CREATE."""

    operator: str
    handler: str
    trigger: Literal["validate", "mutate"]
    runId: str
    traceparent: NotRequired[str]
    operation: Literal["CREATE", "UPDATE", "DELETE"]
    object: O | None
    oldObject: O | None
    userInfo: UserInfo
    dryRun: bool
    request: AdmissionRequest


class AdmissionResult(TypedDict, total=False):
    """An admission handler's answer: allowed is required of a validate
    handler; patch (a JSON merge patch of spec, metadata.labels and
    metadata.annotations) is a mutate handler's."""

    allowed: bool
    message: str
    patch: dict[str, Any]
    warnings: list[str]
    error: ResultError


# ---------------------------------------------------------------------------
# Errors and helpers


class TemporaryError(Exception):
    """Raised by a function: the run failed and is retried with back-off
    (result {"error": {"message": M}}; exit 75, EX_TEMPFAIL, in a process
    per run)."""


class PermanentError(Exception):
    """Raised by a function: retrying cannot help, the object is Stalled at
    once (result {"error": {"message": M, "permanent": true}}; exit 0)."""


def normal(reason: str, message: str = "") -> Event:
    """A Normal Event: normal("Greeted", "Hello, World!")."""
    return {"type": "Normal", "reason": reason, "message": message}


def warning(reason: str, message: str = "") -> Event:
    """A Warning Event: warning("QuotaLow", "3 left")."""
    return {"type": "Warning", "reason": reason, "message": message}


MAX_DURATION = "2562047h47m16.854775807s"
"""Go's longest duration (2**63 - 1 ns, about 292 years): the longest
requeueAfter opkit reads."""

_MAX_NS = (1 << 63) - 1


def requeue_after(after: timedelta | float) -> str:
    """A Go duration for requeueAfter, from a timedelta or seconds:
    requeue_after(30) == "30s", requeue_after(timedelta(minutes=10)) == "10m".
    ValueError for one that is not positive (at least a microsecond, its
    precision), or longer than Go's maximum, MAX_DURATION."""
    us = _micros(after)
    if us is None or us <= 0:
        raise ValueError(f"requeue_after takes a positive duration (a timedelta or seconds), got {after!r}")
    if us * 1000 > _MAX_NS:
        raise ValueError(f"requeue_after takes at most Go's maximum duration, {MAX_DURATION} (about 292 years), got {after!r}")
    for unit, size in (("h", 3_600_000_000), ("m", 60_000_000), ("s", 1_000_000), ("ms", 1000)):
        if us % size == 0:
            return f"{us // size}{unit}"
    return f"{us}us"


def _micros(after: object) -> int | None:
    if isinstance(after, timedelta):
        return (after.days * 86400 + after.seconds) * 1_000_000 + after.microseconds
    if isinstance(after, (int, float)) and not isinstance(after, bool):
        seconds = float(after)
        if seconds != seconds or seconds in (float("inf"), float("-inf")):
            return None
        return round(seconds * 1_000_000)
    return None


# ---------------------------------------------------------------------------
# The handler table

_Answer = Mapping[str, Any] | None
_Fn = TypeVar("_Fn", bound=Callable[[Any], "_Answer | Awaitable[_Answer]"])

EX_TEMPFAIL = 75
"""The exit status of a process per run whose function raised TemporaryError."""

MAX_RESULT_BYTES = 1 << 20
"""opkit reads a result of at most 1 MiB."""

MAX_RESULT_DEPTH = 100
"""opkit reads a result nested at most 100 objects and arrays deep."""


class Handlers:
    """A program's functions by trigger. Register with @handlers.on(...),
    then handlers.run(); in tests, handlers.call(ctx)."""

    def __init__(self) -> None:
        self._fns: dict[str, Callable[[Any], Any]] = {}

    def on(self, *triggers: Trigger | Literal["*"]) -> Callable[[_Fn], _Fn]:
        """Registers the decorated function for these triggers; with none
        (or "*"), as the default for every trigger without a function of
        its own. A trigger may have one function."""
        for trigger in triggers:
            if trigger != "*" and trigger not in TRIGGERS:
                raise ValueError(f'unknown trigger "{trigger}": a trigger is one of {", ".join(TRIGGERS)}, or "*" (the default)')
        keys: tuple[str, ...] = tuple(triggers) or ("*",)

        def register(fn: _Fn) -> _Fn:
            for key in keys:
                if key in self._fns:
                    what = "the default" if key == "*" else f'trigger "{key}"'
                    raise ValueError(f"{what} has a function already: {self._fns[key].__name__}; it cannot also be {fn.__name__}")
            for key in keys:
                self._fns[key] = fn
            return fn

        return register

    # -- in-process ----------------------------------------------------------

    def call(self, context: Mapping[str, Any] | str | bytes) -> dict[str, Any]:
        """Runs the function for context (a binding context: a dict, or its
        JSON) and returns the result as the protocol writes it: {} for
        None, errors turned into error results. A bug's traceback goes to
        sys.stderr."""
        text, _ = self._answer(context, sys.stderr, redirect=False)
        return cast(dict[str, Any], json.loads(text))

    # -- the two modes -------------------------------------------------------

    def run(self) -> NoReturn:
        """The program's main: serve() with OPKIT_MODE=Serve, else
        run_once(), on the process's stdin, stdout and stderr, then exit.
        stdout carries results alone: file descriptor 1 is made the
        process's stderr, and results go to a copy of the original. stdin
        is the SDK's alone too: contexts are read from a copy of file
        descriptor 0, which is made /dev/null for the rest of the process
        (a child process, input())."""
        stdin = _take_stdin()
        answers = _take_stdout()
        try:
            if os.environ.get("OPKIT_MODE") == "Serve":
                self.serve(stdin, answers, sys.stderr)
                code = 0
            else:
                code = self.run_once(stdin, answers, sys.stderr)
        finally:
            answers.flush()
        raise SystemExit(code)

    def run_once(self, stdin: TextIO, stdout: TextIO, stderr: TextIO | None = None) -> int:
        """A process per run: reads all of stdin as a binding context,
        writes its result to stdout, returns the exit status: 0, 75
        (TemporaryError) or 1 (a bug)."""
        log = stderr if stderr is not None else sys.stderr
        text, code = self._answer(stdin.read(), log, redirect=True)
        _flush(log)
        stdout.write(text + "\n")
        stdout.flush()
        return code

    def serve(self, stdin: TextIO, stdout: TextIO, stderr: TextIO | None = None) -> None:
        """exec.mode Serve: answers each line of stdin (a binding context)
        with one line of stdout, after flushing stderr, until stdin ends."""
        log = stderr if stderr is not None else sys.stderr
        while True:
            line = stdin.readline()
            if line == "":
                return
            text, _ = self._answer(line, log, redirect=True, line=True)
            _flush(log)
            stdout.write(text + "\n")
            stdout.flush()

    # -- one run -------------------------------------------------------------

    def _answer(self, context: Mapping[str, Any] | str | bytes, log: TextIO, *, redirect: bool, line: bool = False) -> tuple[str, int]:
        """The result's JSON for context, and the exit status of a process
        per run."""
        ctx, problem = _parse(context, line)
        if ctx is None:
            return _error(problem, permanent=True), 0
        trigger = ctx.get("trigger")
        if not isinstance(trigger, str) or trigger == "":
            return _error('the binding context has no "trigger"', permanent=True), 0
        fn = self._fns.get(trigger) or self._fns.get("*")
        if fn is None:
            return _error(self._no_function(trigger), permanent=True), 0

        saved = sys.stdout, sys.stderr
        if redirect:
            # What the function prints is the run's log.
            sys.stdout = sys.stderr = log
        try:
            out = fn(ctx)
            if isinstance(out, Awaitable):
                import asyncio  # here: its import is most of this module's start-up, and only async functions need it

                out = asyncio.run(_await(cast(Awaitable[Any], out)))
        except PermanentError as e:
            return _error(_message(e), permanent=True), 0
        except TemporaryError as e:
            return _error(_message(e)), EX_TEMPFAIL
        except Exception as e:
            _print_bug(e, log)
            return _error(_message(e, typed=True)), 1
        finally:
            if redirect:
                sys.stdout, sys.stderr = saved

        # Whatever the result holds, the run gets an answer: in mode Serve
        # an exception here would end the loop with the run unanswered.
        try:
            result, problem = _check(out, trigger)
        except Exception as e:
            return _error(f"the result could not be checked: {_message(e, typed=True)}", permanent=True), 0
        if result is None:
            return _error(problem, permanent=True), 0
        try:
            text = json.dumps(result, separators=(",", ":"), allow_nan=False)
        except RecursionError as e:
            return _error(f"the result is not JSON: RecursionError: {e}; opkit reads a result at most {MAX_RESULT_DEPTH} objects and arrays deep", permanent=True), 0
        except (TypeError, ValueError) as e:
            return _error(f"the result is not JSON: {e}", permanent=True), 0
        except Exception as e:
            return _error(f"the result is not JSON: {_message(e, typed=True)}", permanent=True), 0
        if len(text) > MAX_RESULT_BYTES:
            return _error(f"the result is {len(text)} bytes, more than opkit's limit of 1 MiB", permanent=True), 0
        at = _too_deep(text, MAX_RESULT_DEPTH)
        if at is not None:
            return _error(f"invalid result: nested deeper than {MAX_RESULT_DEPTH} objects and arrays (at byte {at}); opkit reads a result at most {MAX_RESULT_DEPTH} deep", permanent=True), 0
        return text, 0

    def _no_function(self, trigger: str) -> str:
        handled = [t for t in TRIGGERS if t in self._fns]
        if handled:
            these = "this program handles " + ", ".join(handled)
        else:
            these = "this program has no function"
        return f'no function for trigger "{trigger}": {these} (@handlers.on("{trigger}") registers one, @handlers.on() the default for every trigger)'


async def _await(aw: Awaitable[Any]) -> Any:
    return await aw


def _parse(context: Mapping[str, Any] | str | bytes, line: bool) -> tuple[dict[str, Any] | None, str]:
    if isinstance(context, Mapping):
        try:
            text: str | bytes = json.dumps(context)
        except (TypeError, ValueError) as e:
            return None, f"the binding context is not JSON: {e}"
    else:
        text = context
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            return None, f"the binding context is not UTF-8: {e}"
    if text.strip() == "":
        where = "an empty line" if line else "empty"
        return None, f"the binding context is {where}: expected a JSON object (docs/handlers.md, The binding context)"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as e:
        return None, f"the binding context is not JSON: {e}; it begins {_begins(text)}"
    if not isinstance(value, dict):
        return None, f"the binding context is {_kind(value)}, not a JSON object; it begins {_begins(text)}"
    return cast(dict[str, Any], value), ""


def _begins(text: str) -> str:
    text = text.strip()
    return json.dumps(text if len(text) <= 100 else text[:100] + "...")


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "a " + type(value).__name__


def _message(e: BaseException, typed: bool = False) -> str:
    text = str(e)
    name = type(e).__name__
    if typed:
        return f"{name}: {text}" if text else name
    return text or name


def _print_bug(e: BaseException, log: TextIO) -> None:
    # Leave out the SDK's own frame: the traceback starts at the function.
    tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
    traceback.print_exception(type(e), e, tb or e.__traceback__, file=log)


def _error(message: str, permanent: bool = False) -> str:
    err: dict[str, Any] = {"message": message}
    if permanent:
        err["permanent"] = True
    return json.dumps({"error": err}, separators=(",", ":"))


_JSON_BRACKETS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def _too_deep(text: str, limit: int) -> int | None:
    """The offset of the first bracket of JSON text nested deeper than
    limit objects and arrays, as opkit counts (its jsondepth.Check), or
    None. text is ASCII (json.dumps' ensure_ascii), so offsets are bytes."""
    if text.count("[") + text.count("{") <= limit:
        return None
    depth = 0
    for m in _JSON_BRACKETS.finditer(text):
        c = text[m.start()]
        if c == "[" or c == "{":
            depth += 1
            if depth > limit:
                return m.start()
        elif c == "]" or c == "}":
            depth -= 1
    return None


def _flush(stream: TextIO) -> None:
    try:
        stream.flush()
    except (OSError, ValueError):
        pass


def _take_stdin() -> TextIO:
    """A stream of the binding contexts, for the SDK alone: a copy of file
    descriptor 0, read buffered as UTF-8 (an invalid byte replaced); fd 0
    becomes /dev/null, so that a child process the handler starts
    (``subprocess.run`` without ``stdin=``) reads nothing of the engine's
    stream: in mode Serve it could block on it, or swallow the next
    context, which would then never be answered."""
    try:
        fd = os.dup(0)  # not inheritable: children never get it
    except OSError:
        fd = -1  # no stdin at all: no context
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        if null != 0:  # 0 when fd 0 was closed: /dev/null holds it now
            try:
                os.dup2(null, 0)
            finally:
                os.close(null)
    except OSError:
        if fd < 0:
            return io.StringIO("")
        os.close(fd)
        # fd 0 stays the engine's: read it as before, through sys.stdin.
        stdin = sys.stdin
        reconfigure = getattr(stdin, "reconfigure", None)  # io.TextIOWrapper's
        if reconfigure is not None:
            try:
                reconfigure(encoding="utf-8", errors="replace")
            except (ValueError, OSError):
                pass
        return stdin
    if fd < 0:
        return io.StringIO("")
    # newline="\n": lines end at "\n" alone, as sys.stdin's do on POSIX (a
    # "\r" in a context's white space does not split it).
    return open(fd, "r", encoding="utf-8", errors="replace", newline="\n", closefd=True)


def _take_stdout() -> TextIO:
    """A stream to the process's stdout for results alone; file descriptor
    1 becomes stderr, so that what else writes there (print before run(),
    a child process) goes to the log."""
    try:
        fd = os.dup(1)
        os.dup2(2, 1)
    except OSError:
        return sys.stdout
    _flush(sys.stdout)  # what is still buffered of prints before run(): to stderr
    return open(fd, "w", encoding="utf-8", newline="\n", closefd=True)


# ---------------------------------------------------------------------------
# Checking a result before it is written

_FIELDS = ("status", "events", "requeueAfter", "skipped", "refuse", "allowed", "message", "patch", "warnings", "error")
_ADMISSION_FIELDS = ("allowed", "message", "patch", "warnings", "error")
_RESERVED_STATUS = ("observedGeneration", "conditions", "opkit")
_UNITS = {"ns": 1, "us": 1000, "µs": 1000, "μs": 1000, "ms": 1_000_000, "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}


def _check(out: object, trigger: str) -> tuple[dict[str, Any] | None, str]:
    """out as the result to write, or None and why it is not one."""
    if out is None:
        out = {}
    if not isinstance(out, Mapping):
        return None, f"the function returned {_kind(out)}, not a result (a dict of {', '.join(_FIELDS)}) or None"
    result = dict(cast(Mapping[Any, Any], out))
    problems: list[str] = []
    for key in result:
        if key not in _FIELDS:
            import difflib  # here: only a result that fails its check needs it

            hint = difflib.get_close_matches(str(key), _FIELDS, n=1)
            did = f' (did you mean "{hint[0]}"?)' if hint else ""
            problems.append(f'result field "{key}" is not one of {", ".join(_FIELDS)}{did}')
    if problems:
        return None, "; ".join(problems)

    admission = trigger in _ADMISSION_TRIGGERS
    for key in result:
        if admission and key not in _ADMISSION_FIELDS:
            problems.append(f'result field "{key}" is not part of an admission handler\'s answer ({", ".join(_ADMISSION_FIELDS)})')
        elif not admission and key in _ADMISSION_FIELDS and key != "error":
            problems.append(f'result field "{key}" is only an admission handler\'s (on validate or mutate), not of a run on {trigger}')
        elif key == "refuse" and trigger != "event":
            problems.append(f'result field "refuse" is only for a run on event, not on {trigger}')

    def want(key: str, ok: bool, what: str) -> None:
        if key in result and not ok:
            problems.append(f'result field "{key}" must be {what}, not {_kind(result[key])}')

    want("status", isinstance(result.get("status"), Mapping), "an object of status fields")
    want("skipped", isinstance(result.get("skipped"), bool), "true or false")
    want("allowed", isinstance(result.get("allowed"), bool), "true or false")
    want("message", isinstance(result.get("message"), str), "a string")
    want("patch", isinstance(result.get("patch"), Mapping), "an object (a JSON merge patch)")
    want("refuse", isinstance(result.get("refuse"), str) and result.get("refuse") != "", "a reason (a string, not empty)")
    status = result.get("status")
    if isinstance(status, Mapping):
        for key in _RESERVED_STATUS:
            if key in status:
                problems.append(f"status.{key} is written by opkit and cannot be set by a handler")
    warnings = result.get("warnings")
    want("warnings", isinstance(warnings, list) and all(isinstance(w, str) for w in cast(list[Any], warnings)), "a list of strings")
    if "events" in result:
        problems += _check_events(result["events"])
    if "requeueAfter" in result:
        value, problem = _check_requeue(result["requeueAfter"])
        if problem:
            problems.append(problem)
        else:
            result["requeueAfter"] = value
    if "error" in result:
        problems += _check_error(result["error"])
    elif trigger == "validate" and "allowed" not in result:
        problems.append('a validate handler\'s result needs "allowed": true or false')
    if problems:
        return None, "invalid result: " + "; ".join(problems)
    return result, ""


def _check_events(events: object) -> list[str]:
    if not isinstance(events, list):
        return [f'result field "events" must be a list of events, not {_kind(events)}']
    problems: list[str] = []
    for i, event in enumerate(cast(list[Any], events)):
        if not isinstance(event, Mapping):
            problems.append(f"events[{i}] must be an event (type, reason, message; normal() and warning() make one), not {_kind(event)}")
            continue
        e = cast(Mapping[str, Any], event)
        for key in e:
            if key not in ("type", "reason", "message"):
                problems.append(f'events[{i}] field "{key}" is not one of type, reason, message')
        if "type" in e and e["type"] not in ("Normal", "Warning"):
            problems.append(f"events[{i}].type {json.dumps(e['type'], default=repr)} is not Normal or Warning")
        if not isinstance(e.get("reason"), str) or e.get("reason") == "":
            problems.append(f"events[{i}].reason is required: a string such as \"Greeted\"")
        if not isinstance(e.get("message"), str):
            problems.append(f"events[{i}].message is required: a string")
    return problems


def _check_requeue(value: object) -> tuple[str, str]:
    """requeueAfter as written, or why opkit would not read it: it takes
    what Go's time.ParseDuration reads, positive (at least 1ns) and at most
    MAX_DURATION."""
    if isinstance(value, timedelta):
        try:
            return requeue_after(value), ""
        except ValueError:
            if value > timedelta(0):
                return "", f"requeueAfter {value!r} is longer than Go's maximum duration, {MAX_DURATION}"
            return "", f"requeueAfter {value!r} is not a positive duration"
    if isinstance(value, str):
        ns = _go_duration(value)
        if isinstance(ns, int) and ns > 0:
            return value, ""
        if ns == "overflow" and not value.startswith("-"):
            return "", f"requeueAfter {json.dumps(value)} is longer than Go's maximum duration, {MAX_DURATION}"
        why = " (Go reads it as 0: a duration is at least 1ns)" if ns == 0 and re.search("[1-9]", value) else ""
        return "", f"requeueAfter {json.dumps(value)} is not a positive Go duration such as \"30s\", \"10m\" or \"1h30m\"{why}"
    return "", f"requeueAfter must be a Go duration such as \"30s\" (or a timedelta), not {_kind(value)}"


def _go_duration(s: str) -> int | Literal["invalid", "overflow"]:
    """Nanoseconds, as Go's time.ParseDuration reads s (a port of its
    go1.26 code, to the letter: a fraction rounded down, uint64
    arithmetic), or why it refuses s: "invalid" (not its syntax, a unit
    missing or unknown) or "overflow" (past 2**63 - 1 ns)."""
    neg = False
    if s[:1] in ("-", "+"):
        neg, s = s[0] == "-", s[1:]
    if s == "0":
        return 0
    if s == "":
        return "invalid"
    d = 0
    while s:
        if not (s[0] == "." or "0" <= s[0] <= "9"):
            return "invalid"
        # [0-9]*, leadingInt
        v, i = 0, 0
        while i < len(s) and "0" <= s[i] <= "9":
            if v > (1 << 63) // 10:
                return "overflow"
            v = v * 10 + ord(s[i]) - ord("0")
            if v > 1 << 63:
                return "overflow"
            i += 1
        pre, s = i > 0, s[i:]
        # (\.[0-9]*)?, leadingFraction: digits past 63 bits are ignored
        f, scale, post = 0, 1.0, False
        if s[:1] == ".":
            s = s[1:]
            i, overflow = 0, False
            while i < len(s) and "0" <= s[i] <= "9":
                if not overflow:
                    y = f * 10 + ord(s[i]) - ord("0")
                    if f > _MAX_NS // 10 or y > 1 << 63:
                        overflow = True
                    else:
                        f, scale = y, scale * 10
                i += 1
            post, s = i > 0, s[i:]
        if not pre and not post:
            return "invalid"
        i = 0
        while i < len(s) and not (s[i] == "." or "0" <= s[i] <= "9"):
            i += 1
        unit = _UNITS.get(s[:i])
        if unit is None:
            return "invalid"
        s = s[i:]
        if v > (1 << 63) // unit:
            return "overflow"
        v *= unit
        if f > 0:
            v += int(float(f) * (float(unit) / scale))
            if v > 1 << 63:
                return "overflow"
        d = (d + v) % (1 << 64)
        if d > 1 << 63:
            return "overflow"
    if neg:
        return -d
    if d > _MAX_NS:
        return "overflow"
    return d


def _check_error(err: object) -> list[str]:
    if not isinstance(err, Mapping):
        return [f'result field "error" must be an object {{"message": ..., "permanent": ...}}, not {_kind(err)}']
    e = cast(Mapping[str, Any], err)
    problems = [f'error field "{key}" is not one of message, permanent' for key in e if key not in ("message", "permanent")]
    if not isinstance(e.get("message"), str) or e.get("message") == "":
        problems.append("error.message is required: a string, not empty")
    if "permanent" in e and not isinstance(e["permanent"], bool):
        problems.append("error.permanent must be true or false")
    return problems

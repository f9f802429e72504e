"""Tests of opkit_handler, in-process: python3 -m unittest (in sdk/python)."""

import contextlib
import io
import json
import os
import sys
import unittest
from datetime import timedelta
from collections.abc import Callable
from typing import Any

import opkit_handler as opkit


def context(trigger: str = "create", name: str = "World", **extra: Any) -> dict[str, Any]:
    """A binding context of a Greeting."""
    ctx: dict[str, Any] = {
        "operator": "greetings",
        "handler": "greet",
        "trigger": trigger,
        "runId": "01jd5v3q8m2k4x7zab",
        "idempotencyKey": "0b6a3f2e/1/greet",
        "attempt": 1,
        "object": {
            "apiVersion": "demo.example.com/v1",
            "kind": "Greeting",
            "metadata": {"name": name.lower(), "namespace": "default", "generation": 1},
            "spec": {"name": name},
        },
        "old": None,
        "diff": [],
        "children": {},
    }
    ctx.update(extra)
    return ctx


def greeter() -> opkit.Handlers:
    """A program with greet on create and update, and a default."""
    handlers = opkit.Handlers()

    @handlers.on("create", "update")
    def greet(ctx: opkit.Context) -> opkit.Result:
        name = ctx["object"].get("spec", {})["name"]
        print(f"log: {ctx['trigger']} of {name}", file=sys.stderr)
        print(f"print: greeting {name}")
        if name == "temporary":
            raise opkit.TemporaryError("the greeting service is down")
        if name == "permanent":
            raise opkit.PermanentError("no greeting in Klingon")
        if name == "bug":
            return {"status": {"n": 1 / 0}}
        return {"status": {"greeting": f"Hello, {name}!"}, "events": [opkit.normal("Greeted", f"Hello, {name}!")]}

    @handlers.on()
    def other(ctx: opkit.Context) -> None:
        print(f"log: nothing to do on {ctx['trigger']}", file=sys.stderr)

    return handlers


def answer(result: Any) -> Callable[[opkit.Context], Any]:
    """A function that returns result."""

    def returns(ctx: opkit.Context) -> Any:
        return result

    return returns


def returning(result: Any, trigger: str = "create") -> dict[str, Any]:
    """The result written for a function on trigger that returns result."""
    handlers = opkit.Handlers()
    handlers.on()(answer(result))
    return handlers.call(context(trigger))


def nested(depth: int) -> Any:
    """A list in a list ... depth deep: [[...[]...]]."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def permanent(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "permanent": True}}


class Dispatch(unittest.TestCase):
    def test_trigger_calls_its_function(self) -> None:
        handlers = greeter()
        for trigger in ("create", "update"):
            with self.subTest(trigger=trigger), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                self.assertEqual(
                    handlers.call(context(trigger)),
                    {"status": {"greeting": "Hello, World!"}, "events": [{"type": "Normal", "reason": "Greeted", "message": "Hello, World!"}]},
                )

    def test_default_takes_other_triggers(self) -> None:
        log = io.StringIO()
        with contextlib.redirect_stderr(log):
            self.assertEqual(greeter().call(context("delete")), {})
        self.assertEqual(log.getvalue(), "log: nothing to do on delete\n")

    def test_star_is_the_default(self) -> None:
        handlers = opkit.Handlers()
        handlers.on("*")(answer({"skipped": True}))
        self.assertEqual(handlers.call(context("resume")), {"skipped": True})

    def test_trigger_without_function_fails_permanently(self) -> None:
        handlers = opkit.Handlers()
        handlers.on("update", "create")(answer(None))
        self.assertEqual(
            handlers.call(context("delete")),
            permanent('no function for trigger "delete": this program handles create, update (@handlers.on("delete") registers one, @handlers.on() the default for every trigger)'),
        )

    def test_program_without_functions(self) -> None:
        result = opkit.Handlers().call(context("create"))
        self.assertTrue(result["error"]["permanent"])
        self.assertIn('no function for trigger "create": this program has no function', result["error"]["message"])

    def test_unknown_trigger_is_refused_when_registered(self) -> None:
        with self.assertRaisesRegex(ValueError, r'unknown trigger "crate": a trigger is one of create, update, delete'):
            opkit.Handlers().on("crate")  # pyright: ignore[reportArgumentType]

    def test_a_trigger_has_one_function(self) -> None:
        handlers = opkit.Handlers()
        handlers.on("create")(answer(None))
        handlers.on()(answer({"skipped": True}))

        def second(ctx: opkit.Context) -> None: ...

        with self.assertRaisesRegex(ValueError, r'^trigger "create" has a function already: returns; it cannot also be second$'):
            handlers.on("update", "create")(second)
        with self.assertRaisesRegex(ValueError, r"^the default has a function already"):
            handlers.on("*")(second)
        self.assertEqual(handlers.call(context("update")), {"skipped": True}, "a refused registration registers nothing")

    def test_context_as_json(self) -> None:
        handlers = opkit.Handlers()

        @handlers.on("create")
        def see(ctx: opkit.Context) -> opkit.Result:
            return {"status": {"seen": ctx["object"].get("spec", {})["name"]}}

        self.assertEqual(handlers.call(json.dumps(context())), {"status": {"seen": "World"}})
        self.assertEqual(handlers.call(json.dumps(context()).encode()), {"status": {"seen": "World"}})

    def test_context_that_is_not_one(self) -> None:
        handlers = greeter()
        cases = {
            "{not json": 'the binding context is not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1); it begins "{not json"',
            "[1, 2]": 'the binding context is a list, not a JSON object; it begins "[1, 2]"',
            "": "the binding context is empty: expected a JSON object (docs/handlers.md, The binding context)",
            '{"operator": "greetings"}': 'the binding context has no "trigger"',
            b"\xff\xfe": "the binding context is not UTF-8: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte",
        }
        for text, message in cases.items():
            with self.subTest(text=text):
                self.assertEqual(handlers.call(text), permanent(message))

    def test_async_function(self) -> None:
        handlers = opkit.Handlers()

        @handlers.on("create")
        async def greet(ctx: opkit.Context) -> opkit.Result:
            return {"status": {"greeting": "async"}}

        self.assertEqual(handlers.call(context()), {"status": {"greeting": "async"}})


class Errors(unittest.TestCase):
    def call(self, name: str) -> tuple[dict[str, Any], str]:
        log = io.StringIO()
        with contextlib.redirect_stderr(log), contextlib.redirect_stdout(io.StringIO()):
            result = greeter().call(context("create", name))
        return result, log.getvalue()

    def test_permanent_error(self) -> None:
        self.assertEqual(self.call("permanent")[0], permanent("no greeting in Klingon"))

    def test_temporary_error(self) -> None:
        self.assertEqual(self.call("temporary")[0], {"error": {"message": "the greeting service is down"}})

    def test_bug_is_retried_with_its_type_and_traceback(self) -> None:
        result, log = self.call("bug")
        self.assertEqual(result, {"error": {"message": "ZeroDivisionError: division by zero"}})
        self.assertIn("Traceback (most recent call last):", log)
        self.assertIn('return {"status": {"n": 1 / 0}}', log)
        self.assertTrue(log.endswith("ZeroDivisionError: division by zero\n"), log)
        self.assertNotIn("in _answer", log, "the traceback starts at the function, not in the SDK")

    def test_errors_without_a_message(self) -> None:
        def raising(e: Exception) -> dict[str, Any]:
            def fn(ctx: opkit.Context) -> None:
                raise e

            handlers = opkit.Handlers()
            handlers.on()(fn)
            with contextlib.redirect_stderr(io.StringIO()):
                return handlers.call(context())

        self.assertEqual(raising(opkit.TemporaryError()), {"error": {"message": "TemporaryError"}})
        self.assertEqual(raising(opkit.PermanentError()), permanent("PermanentError"))
        self.assertEqual(raising(RuntimeError()), {"error": {"message": "RuntimeError"}})
        self.assertEqual(raising(KeyError("nmae")), {"error": {"message": "KeyError: 'nmae'"}})

    def test_returned_error_is_written_as_it_is(self) -> None:
        self.assertEqual(returning({"error": {"message": "quota exceeded"}}), {"error": {"message": "quota exceeded"}})
        self.assertEqual(returning({"error": {"message": "no", "permanent": True}}), permanent("no"))


class ResultCheck(unittest.TestCase):
    FIELDS = "status, events, requeueAfter, skipped, refuse, allowed, message, patch, warnings, error"

    def test_none_is_the_empty_result(self) -> None:
        self.assertEqual(returning(None), {})
        self.assertEqual(returning({}), {})

    def test_every_field(self) -> None:
        result: opkit.Result = {
            "status": {"phase": "done"},
            "events": [opkit.normal("Done", "backed up"), opkit.warning("Slow", "took 5m"), {"reason": "Plain", "message": ""}],
            "requeueAfter": "1h30m",
            "skipped": False,
        }
        self.assertEqual(returning(result), result)
        self.assertEqual(returning({"refuse": "not allowed to deploy"}, "event"), {"refuse": "not allowed to deploy"})

    def test_misspelled_field(self) -> None:
        self.assertEqual(
            returning({"statsu": {"greeting": "hi"}}),
            permanent(f'result field "statsu" is not one of {self.FIELDS} (did you mean "status"?)'),
        )
        self.assertEqual(
            returning({"status": {}, "xyz": 1}),
            permanent(f'result field "xyz" is not one of {self.FIELDS}'),
        )

    def test_events(self) -> None:
        cases: list[tuple[Any, str]] = [
            ([{"type": "Info", "reason": "R", "message": "m"}], 'events[0].type "Info" is not Normal or Warning'),
            ([opkit.normal("Ok"), {"message": "m"}], 'events[1].reason is required: a string such as "Greeted"'),
            ([{"reason": "R"}], "events[0].message is required: a string"),
            ([{"reason": "R", "message": "m", "note": "x"}], 'events[0] field "note" is not one of type, reason, message'),
            (["Greeted"], "events[0] must be an event (type, reason, message; normal() and warning() make one), not a string"),
            ({"reason": "R"}, 'result field "events" must be a list of events, not an object'),
        ]
        for events, message in cases:
            with self.subTest(events=events):
                self.assertEqual(returning({"events": events}), permanent("invalid result: " + message))

    def test_requeue_after(self) -> None:
        self.assertEqual(returning({"requeueAfter": "30s"}), {"requeueAfter": "30s"})
        self.assertEqual(returning({"requeueAfter": "1.5h"}), {"requeueAfter": "1.5h"})
        self.assertEqual(returning({"requeueAfter": timedelta(minutes=10)}), {"requeueAfter": "10m"})
        self.assertEqual(returning({"requeueAfter": timedelta(seconds=90)}), {"requeueAfter": "90s"})
        for bad in ("30 seconds", "0s", "-5s", "30", ""):
            with self.subTest(requeueAfter=bad):
                self.assertEqual(
                    returning({"requeueAfter": bad}),
                    permanent(f'invalid result: requeueAfter {json.dumps(bad)} is not a positive Go duration such as "30s", "10m" or "1h30m"'),
                )
        self.assertEqual(returning({"requeueAfter": 30}), permanent('invalid result: requeueAfter must be a Go duration such as "30s" (or a timedelta), not a number'))
        self.assertEqual(returning({"requeueAfter": timedelta(0)}), permanent("invalid result: requeueAfter datetime.timedelta(0) is not a positive duration"))

    def test_requeue_after_is_what_go_reads(self) -> None:
        # What Go's time.ParseDuration reads, positive and at most its
        # maximum, is written as it is (python_test.go compares with Go's
        # own on many more).
        for good in ("1ns", "+30s", ".5s", "1.s", "5µs", "5μs", "1h30m0.5s", opkit.MAX_DURATION):
            with self.subTest(requeueAfter=good):
                self.assertEqual(returning({"requeueAfter": good}), {"requeueAfter": good})
        # Not a Go duration at all: a newline or a space after it (re.match
        # with $ let "30s\n" through), a unit missing.
        for bad in ("30s\n", " 30s", "30s ", "1h 30m", "s", ".s", "1e3s"):
            with self.subTest(requeueAfter=bad):
                self.assertEqual(
                    returning({"requeueAfter": bad}),
                    permanent(f'invalid result: requeueAfter {json.dumps(bad)} is not a positive Go duration such as "30s", "10m" or "1h30m"'),
                )
        # Less than 1ns, which Go reads as 0.
        for zero in ("0.0000000001s", "0.9ns"):
            with self.subTest(requeueAfter=zero):
                self.assertEqual(
                    returning({"requeueAfter": zero}),
                    permanent(f'invalid result: requeueAfter "{zero}" is not a positive Go duration such as "30s", "10m" or "1h30m" (Go reads it as 0: a duration is at least 1ns)'),
                )
        # Past Go's maximum, 2**63 - 1 ns.
        for long in ("2562047h47m16.854775808s", "2562048h", "4800000h", "9223372036854775808ns", "99999999999999999999h"):
            with self.subTest(requeueAfter=long):
                self.assertEqual(
                    returning({"requeueAfter": long}),
                    permanent(f'invalid result: requeueAfter "{long}" is longer than Go\'s maximum duration, 2562047h47m16.854775807s'),
                )
        self.assertEqual(
            returning({"requeueAfter": timedelta(days=200000)}),
            permanent("invalid result: requeueAfter datetime.timedelta(days=200000) is longer than Go's maximum duration, 2562047h47m16.854775807s"),
        )
        self.assertEqual(returning({"requeueAfter": timedelta(days=106751)}), {"requeueAfter": "2562024h"})

    def test_requeue_after_helper(self) -> None:
        self.assertEqual(opkit.requeue_after(30), "30s")
        self.assertEqual(opkit.requeue_after(1.5), "1500ms")
        self.assertEqual(opkit.requeue_after(0.000002), "2us")
        self.assertEqual(opkit.requeue_after(timedelta(minutes=10)), "10m")
        self.assertEqual(opkit.requeue_after(timedelta(hours=2)), "2h")
        self.assertEqual(opkit.requeue_after(timedelta(days=1, seconds=1)), "86401s")
        for bad in (0, -1, timedelta(0), float("nan"), float("inf")):
            with self.subTest(after=bad), self.assertRaisesRegex(ValueError, "requeue_after takes a positive duration"):
                opkit.requeue_after(bad)
        # At most Go's maximum duration, 2**63 - 1 ns (not "4800000h").
        longest = timedelta(microseconds=((1 << 63) - 1) // 1000)
        self.assertEqual(opkit.requeue_after(longest), "9223372036854775us")
        for long in (timedelta(days=200000), longest + timedelta(microseconds=1), 1e12, 9223372036.854776):
            with self.subTest(after=long), self.assertRaisesRegex(ValueError, r"requeue_after takes at most Go's maximum duration, 2562047h47m16\.854775807s \(about 292 years\), got "):
                opkit.requeue_after(long)

    def test_event_helpers(self) -> None:
        self.assertEqual(opkit.normal("Greeted", "hi"), {"type": "Normal", "reason": "Greeted", "message": "hi"})
        self.assertEqual(opkit.warning("QuotaLow"), {"type": "Warning", "reason": "QuotaLow", "message": ""})

    def test_field_types(self) -> None:
        cases: list[tuple[dict[str, Any], str]] = [
            ({"status": "done"}, 'result field "status" must be an object of status fields, not a string'),
            ({"skipped": "yes"}, 'result field "skipped" must be true or false, not a string'),
            ({"status": {"conditions": [], "opkit": {}}}, "status.conditions is written by opkit and cannot be set by a handler; status.opkit is written by opkit and cannot be set by a handler"),
            ({"error": "oops"}, 'result field "error" must be an object {"message": ..., "permanent": ...}, not a string'),
            ({"error": {"message": "", "permanent": "yes", "code": 1}}, 'error field "code" is not one of message, permanent; error.message is required: a string, not empty; error.permanent must be true or false'),
        ]
        for result, message in cases:
            with self.subTest(result=result):
                self.assertEqual(returning(result), permanent("invalid result: " + message))

    def test_fields_by_trigger(self) -> None:
        self.assertEqual(returning({"allowed": True}), permanent('invalid result: result field "allowed" is only an admission handler\'s (on validate or mutate), not of a run on create'))
        self.assertEqual(returning({"refuse": "no"}, "schedule"), permanent('invalid result: result field "refuse" is only for a run on event, not on schedule'))
        self.assertEqual(
            returning({"status": {}, "allowed": True}, "validate"),
            permanent('invalid result: result field "status" is not part of an admission handler\'s answer (allowed, message, patch, warnings, error)'),
        )
        self.assertEqual(returning({"message": "fine"}, "validate"), permanent('invalid result: a validate handler\'s result needs "allowed": true or false'))
        self.assertEqual(returning(None, "mutate"), {})
        self.assertEqual(returning({"patch": {"spec": {"replicas": 1}}, "warnings": ["defaulted"]}, "mutate"), {"patch": {"spec": {"replicas": 1}}, "warnings": ["defaulted"]})
        self.assertEqual(returning({"allowed": False, "message": "no"}, "validate"), {"allowed": False, "message": "no"})
        self.assertEqual(returning({"error": {"message": "down"}}, "validate"), {"error": {"message": "down"}})

    def test_not_a_result(self) -> None:
        self.assertEqual(returning(["status"]), permanent(f"the function returned a list, not a result (a dict of {self.FIELDS}) or None"))
        self.assertEqual(returning({"status": {"when": {1, 2}}}), permanent("the result is not JSON: Object of type set is not JSON serializable"))
        self.assertEqual(returning({"status": {"x": float("nan")}}), permanent("the result is not JSON: Out of range float values are not JSON compliant"))
        big = returning({"status": {"x": "y" * (1 << 20)}})
        self.assertTrue(big["error"]["permanent"])
        self.assertRegex(big["error"]["message"], r"^the result is \d+ bytes, more than opkit's limit of 1 MiB$")

    def test_depth(self) -> None:
        # opkit reads a result nested at most 100 objects and arrays deep:
        # the result and its status are two.
        self.assertEqual(returning({"status": {"x": nested(98)}}), {"status": {"x": nested(98)}})
        at = len('{"status":{"x":') + 98
        self.assertEqual(
            returning({"status": {"x": nested(99)}}),
            permanent(f"invalid result: nested deeper than 100 objects and arrays (at byte {at}); opkit reads a result at most 100 deep"),
        )
        # Brackets in strings are not nesting.
        self.assertEqual(returning({"status": {"x": "[{" * 200}}), {"status": {"x": "[{" * 200}})
        self.assertEqual(returning({"status": {"x": ['"[\\"' * 200, nested(97)]}}), {"status": {"x": ['"[\\"' * 200, nested(97)]}})

    def test_too_deep_to_encode(self) -> None:
        # json.dumps raises RecursionError: a permanent error naming it.
        deep = returning({"status": {"x": nested(100_000)}})
        self.assertTrue(deep["error"]["permanent"], deep)
        self.assertRegex(deep["error"]["message"], r"^the result is not JSON: RecursionError: .*; opkit reads a result at most 100 objects and arrays deep$")
        # So does checking an event's type, which quotes it.
        deep = returning({"events": [{"type": nested(100_000), "reason": "R", "message": "m"}]})
        self.assertTrue(deep["error"]["permanent"], deep)
        self.assertRegex(deep["error"]["message"], r"^the result could not be checked: RecursionError: ")


class Timeline:
    """What a program wrote, in order: a stderr reaches it when flushed, as
    the engine reads it only then; stdout when written."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def stderr(self) -> "Stream":
        return Stream(self, "stderr", buffered=True)

    def stdout(self) -> "Stream":
        return Stream(self, "stdout", buffered=False)

    def lines(self, name: str) -> list[str]:
        return "".join(text for where, text in self.events if where == name).splitlines()


class Stream(io.StringIO):
    def __init__(self, timeline: Timeline, name: str, buffered: bool) -> None:
        super().__init__()
        self.timeline, self.name, self.buffered = timeline, name, buffered
        self.pending = ""

    def write(self, s: str) -> int:
        if self.buffered:
            self.pending += s
        else:
            self.timeline.events.append((self.name, s))
        return len(s)

    def flush(self) -> None:
        if self.pending:
            self.timeline.events.append((self.name, self.pending))
            self.pending = ""


class Serve(unittest.TestCase):
    def serve(self, *lines: str) -> Timeline:
        timeline = Timeline()
        stdout_before = sys.stdout
        greeter().serve(io.StringIO("".join(lines)), timeline.stdout(), timeline.stderr())
        self.assertIs(sys.stdout, stdout_before, "serve puts sys.stdout back")
        return timeline

    def test_answers_each_line_in_order(self) -> None:
        timeline = self.serve(
            json.dumps(context("create", "Alice")) + "\n",
            json.dumps(context("update", "bug")) + "\n",
            json.dumps(context("delete", "Bob")) + "\n",
            json.dumps(context("update", "Carol")) + "\n",
        )
        answers = [json.loads(line) for line in timeline.lines("stdout")]
        self.assertEqual(
            answers,
            [
                {"status": {"greeting": "Hello, Alice!"}, "events": [{"type": "Normal", "reason": "Greeted", "message": "Hello, Alice!"}]},
                {"error": {"message": "ZeroDivisionError: division by zero"}},
                {},
                {"status": {"greeting": "Hello, Carol!"}, "events": [{"type": "Normal", "reason": "Greeted", "message": "Hello, Carol!"}]},
            ],
        )
        for line in timeline.lines("stdout"):
            self.assertEqual(line, json.dumps(json.loads(line), separators=(",", ":")), "an answer is compact JSON")

    def test_log_before_its_answer_and_prints_in_the_log(self) -> None:
        timeline = self.serve(json.dumps(context("create", "Alice")) + "\n", json.dumps(context("update", "Bob")) + "\n")
        seen: list[str] = []
        for where, text in timeline.events:
            if where == "stderr":
                seen += text.splitlines()
            else:
                seen.append("answer: " + json.loads(text)["status"]["greeting"])
        self.assertEqual(
            seen,
            [
                "log: create of Alice",
                "print: greeting Alice",
                "answer: Hello, Alice!",
                "log: update of Bob",
                "print: greeting Bob",
                "answer: Hello, Bob!",
            ],
        )

    def test_empty_line_is_answered_with_an_error(self) -> None:
        timeline = self.serve("\n", "  \r\n", json.dumps(context("create", "Alice")) + "\n")
        answers = [json.loads(line) for line in timeline.lines("stdout")]
        empty = permanent("the binding context is an empty line: expected a JSON object (docs/handlers.md, The binding context)")
        self.assertEqual(answers[:2], [empty, empty])
        self.assertEqual(answers[2]["status"], {"greeting": "Hello, Alice!"})

    def test_bad_line_is_answered_and_the_loop_goes_on(self) -> None:
        timeline = self.serve("{nope\n", json.dumps(context("create", "Alice")))  # the last line without its newline
        answers = [json.loads(line) for line in timeline.lines("stdout")]
        self.assertEqual(len(answers), 2)
        self.assertTrue(answers[0]["error"]["permanent"])
        self.assertEqual(answers[1]["status"], {"greeting": "Hello, Alice!"})

    def test_end_of_input_writes_nothing(self) -> None:
        self.assertEqual(self.serve().events, [])

    def test_result_too_deep_is_answered_and_the_loop_goes_on(self) -> None:
        handlers = opkit.Handlers()

        @handlers.on()
        def deep(ctx: opkit.Context) -> opkit.Result:
            depth = int(ctx["object"]["metadata"]["name"])
            return {"status": {"x": nested(depth)}}

        timeline = Timeline()
        lines = [json.dumps(context("update", str(depth))) + "\n" for depth in (100_000, 99, 98)]
        handlers.serve(io.StringIO("".join(lines)), timeline.stdout(), timeline.stderr())
        answers = [json.loads(line) for line in timeline.lines("stdout")]
        self.assertEqual(len(answers), 3, answers)
        self.assertTrue(answers[0]["error"]["permanent"], answers[0])
        self.assertIn("RecursionError", answers[0]["error"]["message"])
        self.assertTrue(answers[1]["error"]["permanent"], answers[1])
        self.assertIn("nested deeper than 100 objects and arrays", answers[1]["error"]["message"])
        self.assertEqual(answers[2], {"status": {"x": nested(98)}})


class RunOnce(unittest.TestCase):
    def run_once(self, name: str) -> tuple[int, str, str]:
        stdout, stderr = io.StringIO(), io.StringIO()
        code = greeter().run_once(io.StringIO(json.dumps(context("create", name))), stdout, stderr)
        return code, stdout.getvalue(), stderr.getvalue()

    def test_exit_status_and_output(self) -> None:
        cases = {
            "Alice": (0, '{"status":{"greeting":"Hello, Alice!"},"events":[{"type":"Normal","reason":"Greeted","message":"Hello, Alice!"}]}\n'),
            "permanent": (0, '{"error":{"message":"no greeting in Klingon","permanent":true}}\n'),
            "temporary": (75, '{"error":{"message":"the greeting service is down"}}\n'),
            "bug": (1, '{"error":{"message":"ZeroDivisionError: division by zero"}}\n'),
        }
        for name, (code, out) in cases.items():
            with self.subTest(name=name):
                got_code, got_out, log = self.run_once(name)
                self.assertEqual((got_code, got_out), (code, out))
                self.assertTrue(log.startswith(f"log: create of {name}\nprint: greeting {name}\n"), log)

    def test_not_json(self) -> None:
        stdout = io.StringIO()
        self.assertEqual(greeter().run_once(io.StringIO("hello"), stdout, io.StringIO()), 0)
        self.assertEqual(json.loads(stdout.getvalue())["error"]["permanent"], True)


class TypedExamples(unittest.TestCase):
    """testdata/good.py, which pyright checks, runs as it says."""

    def test_good(self) -> None:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata"))
        try:
            import good  # pyright: ignore[reportMissingImports]
        finally:
            sys.path.pop(0)
        g: Any = good
        with contextlib.redirect_stderr(io.StringIO()):
            g.test_greet()
            # diff is None in runs not about a change; greet takes it.
            self.assertEqual(g.handlers.call(context("update", diff=None))["status"], {"greeting": "Hello, World!"})
            self.assertEqual(g.handlers.call(context("requeue"))["requeueAfter"], "5m")
            self.assertEqual(g.handlers.call(context("delete")), {"error": {"message": "not deleted yet"}})
            self.assertEqual(g.handlers.call(context("resume"))["events"][0]["type"], "Warning")
        tick = g.operator_wide.call({"trigger": "manual", "object": None, "schedule": {"slot": "2026-11-25T08:00:00Z", "manual": {"request": "r1", "by": "jane"}}})
        self.assertEqual(tick, {"events": [{"type": "Normal", "reason": "Ticked", "message": "2026-11-25T08:00:00Z by jane"}]})
        refused = g.operator_wide.call({"trigger": "event", "event": {"headers": {"x-github-event": "push"}, "event": "push"}})
        self.assertEqual(refused, {"refuse": "not a comment: push"})
        denied = g.admission.call({"trigger": "validate", "object": {"spec": {"name": ""}}, "userInfo": {}})
        self.assertEqual(denied, {"allowed": False, "message": "spec.name must not be empty"})
        self.assertEqual(g.admission.call({"trigger": "mutate"}), {"patch": {"spec": {"language": "en"}}})


if __name__ == "__main__":
    unittest.main()

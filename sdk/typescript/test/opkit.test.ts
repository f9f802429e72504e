// The SDK's own tests (node --test), in-process: dispatch, the default, a
// trigger without a function, errors, the result's checks, async
// functions, and the Serve loop over streams. sdk/typescript_test.go
// compiles them with the SDK and runs them.
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import test from "node:test";

import {
  Handlers,
  PermanentError,
  TemporaryError,
  duration,
  normal,
  warning,
  type Context,
  type Result,
} from "../opkit.js";

interface Spec {
  name: string;
}
interface Thing {
  apiVersion: string;
  kind: string;
  metadata: { name: string };
  spec: Spec;
}

/** A binding context of trigger for a Thing named name. */
function context(trigger: string, name = "world"): Record<string, unknown> {
  return {
    operator: "things",
    handler: "greet",
    trigger,
    runId: "01jd5v3q8m2k4x7zab",
    idempotencyKey: `uid/1/greet`,
    attempt: 1,
    object: { apiVersion: "demo.example.com/v1", kind: "Thing", metadata: { name }, spec: { name } },
    old: null,
    diff: null,
    children: {},
  };
}

const allFields = "status, events, requeueAfter, skipped, refuse, allowed, message, patch, warnings, error";

test("dispatch: each trigger runs its own function, with the context", async () => {
  const handlers = new Handlers<Thing, Spec>();
  handlers.on(["create", "update"], (ctx): Result => ({ status: { by: `${ctx.trigger} of ${ctx.object.spec.name}` } }));
  handlers.on("delete", (ctx): Result => ({ events: [normal("Deleted", ctx.object.metadata.name)] }));
  assert.deepEqual(await handlers.call(context("create")), { status: { by: "create of world" } });
  assert.deepEqual(await handlers.call(context("update", "ada")), { status: { by: "update of ada" } });
  assert.deepEqual(await handlers.call(context("delete")), {
    events: [{ type: "Normal", reason: "Deleted", message: "world" }],
  });
  // The JSON text of a context does as well as the object.
  assert.deepEqual(await handlers.call(JSON.stringify(context("create", "json"))), { status: { by: "create of json" } });
});

test("dispatch: the function gets a copy of the context, as a process would", async () => {
  const handlers = new Handlers<Thing, Spec>();
  handlers.on("create", (ctx) => {
    ctx.object.spec.name = "changed";
  });
  const ctx = context("create");
  await handlers.call(ctx);
  assert.deepEqual(ctx, context("create"));
});

test("the default runs for triggers without a function of their own", async () => {
  const handlers = new Handlers();
  handlers.on("create", (): Result => ({ message: "create's own" }));
  handlers.on((ctx): Result => ({ message: `default for ${ctx.trigger}` }));
  assert.deepEqual(await handlers.call(context("create")), { message: "create's own" });
  assert.deepEqual(await handlers.call(context("resume")), { message: "default for resume" });

  const star = new Handlers().on("*", (ctx): Result => ({ message: `* for ${ctx.trigger}` }));
  assert.deepEqual(await star.call(context("schedule")), { message: "* for schedule" });
});

test("a trigger with no function and no default fails permanently, naming both", async () => {
  const handlers = new Handlers().on(["create", "update"], () => {}).on("delete", () => {});
  const a = await handlers.answer(context("resume"));
  assert.deepEqual(a.result, {
    error: {
      message:
        'no function for trigger "resume": this program handles create, update, delete (handlers.on("resume", fn) registers one, handlers.on(fn) the default for every trigger)',
      permanent: true,
    },
  });
  assert.equal(a.exitCode, 0);

  const none = await new Handlers().call(context("create"));
  assert.match(none.error?.message ?? "", /^no function for trigger "create": this program has no function \(/);
});

test("on refuses what is not a trigger, a trigger twice, and no triggers", () => {
  const handlers = new Handlers().on("create", () => {});
  assert.throws(() => handlers.on(["crate" as "create"], () => {}), /"crate" is not a trigger: one of create, update, .*, enter, exit, validate, mutate, or "\*" for the default/);
  assert.throws(() => handlers.on(["update", "create"], () => {}), /trigger "create" has a function already/);
  assert.deepEqual(handlers.on("update", (): Result => ({ skipped: true })) === handlers, true);
  handlers.on(() => {});
  assert.throws(() => handlers.on("*", () => {}), /the default has a function already/);
  assert.throws(() => handlers.on([], () => {}), /no triggers/);
});

test("returning nothing is the empty result", async () => {
  const handlers = new Handlers();
  handlers.on("create", () => {});
  handlers.on("update", async () => {});
  handlers.on("delete", () => null as unknown as Result);
  for (const trigger of ["create", "update", "delete"]) {
    const a = await handlers.answer(context(trigger));
    assert.deepEqual([a.result, a.line, a.exitCode], [{}, "{}", 0], trigger);
  }
});

test("errors: temporary, permanent, and a bug", async () => {
  const handlers = new Handlers<Thing, Spec>();
  handlers.on("create", () => {
    throw new TemporaryError("the greeting service is down");
  });
  handlers.on("update", () => {
    throw new PermanentError("no greeting in Klingon");
  });
  handlers.on("delete", (ctx) => {
    const missing = (ctx.object.spec as unknown as { lang?: { code: string } }).lang;
    return { message: missing!.code };
  });

  const temporary = await handlers.answer(context("create"));
  assert.deepEqual(temporary.result, { error: { message: "the greeting service is down" } });
  assert.equal(temporary.line, '{"error":{"message":"the greeting service is down"}}');
  assert.equal(temporary.exitCode, 75);
  assert.equal(temporary.trace, undefined);

  const permanent = await handlers.answer(context("update"));
  assert.deepEqual(permanent.result, { error: { message: "no greeting in Klingon", permanent: true } });
  assert.equal(permanent.exitCode, 0);

  const bug = await handlers.answer(context("delete"));
  assert.deepEqual(bug.result, { error: { message: "TypeError: Cannot read properties of undefined (reading 'code')" } });
  assert.equal(bug.exitCode, 1);
  assert.match(bug.trace ?? "", /^TypeError: Cannot read properties of undefined \(reading 'code'\)\n\s+at /);
});

test("errors: names, empty messages, causes and things thrown that are not Errors", async () => {
  class QuotaExceeded extends Error {}
  const cases: [unknown, string, boolean?][] = [
    [new QuotaExceeded("no more greetings"), "QuotaExceeded: no more greetings"],
    [new RangeError("too far"), "RangeError: too far"],
    [new Error(""), "Error"],
    ["a string", 'a non-Error was thrown: "a string"'],
    [new TemporaryError(""), "temporary error"],
    [new PermanentError(""), "permanent error", true],
  ];
  for (const [err, message, permanent] of cases) {
    const r = await new Handlers().on("create", () => Promise.reject(err)).call(context("create"));
    assert.deepEqual(r, { error: permanent ? { message, permanent } : { message } });
  }
  const caused = await new Handlers()
    .on("create", () => {
      throw new Error("greeting failed", { cause: new Error("connection refused") });
    })
    .answer(context("create"));
  assert.match(caused.trace ?? "", /^Error: greeting failed\n[\s\S]*\ncaused by: Error: connection refused\n/);
  // A TemporaryError's cause goes to the log; its own stack, which says nothing new, does not.
  const temporary = await new Handlers()
    .on("create", () => {
      throw new TemporaryError("the greeting service is down", { cause: new Error("503 Service Unavailable") });
    })
    .answer(context("create"));
  assert.deepEqual([temporary.result, temporary.exitCode], [{ error: { message: "the greeting service is down" } }, 75]);
  assert.match(temporary.trace ?? "", /^TemporaryError: the greeting service is down\ncaused by: Error: 503 Service Unavailable\n\s+at /);
});

test("async functions: a result, and errors, as a sync one's", async () => {
  const handlers = new Handlers<Thing, Spec>();
  handlers.on("create", async (ctx): Promise<Result> => {
    await new Promise((resolve) => setTimeout(resolve, 5));
    return { status: { greeting: `Hello, ${ctx.object.spec.name}!` }, requeueAfter: duration({ minutes: 5 }) };
  });
  handlers.on("update", async () => {
    await Promise.resolve();
    throw new TemporaryError("later");
  });
  assert.deepEqual(await handlers.call(context("create")), { status: { greeting: "Hello, world!" }, requeueAfter: "5m" });
  const a = await handlers.answer(context("update"));
  assert.deepEqual([a.result, a.exitCode], [{ error: { message: "later" } }, 75]);
});

test("the result is checked: a wrong field fails the run permanently, saying what is wrong", async () => {
  const cases: [unknown, string][] = [
    [{ statsu: { greeting: "hi" } }, `result field "statsu" is not one of ${allFields} (did you mean "status"?)`],
    [{ status: {}, greeting: "hi" }, `result field "greeting" is not one of ${allFields}`],
    [{ status: "done" }, 'result field "status" must be an object of status fields, e.g. {"status": {"phase": "done"}}, not a string ("done")'],
    [{ status: { conditions: [] } }, 'result field "status" has "conditions", written by opkit: a handler cannot set it'],
    [{ events: [{ type: "Info", reason: "R", message: "m" }] }, 'result field "events" has events[0] of type "Info", not Normal or Warning'],
    [{ events: [normal("Ok", "m"), { reason: "", message: "m" }] }, 'result field "events" has events[1] without a reason'],
    [{ events: [{ reason: "R", message: "m", msg: "x" }] }, 'result field "events" has events[0] with "msg", not one of type, reason, message'],
    [{ events: normal("R", "m") }, 'result field "events" must be a list of events, e.g. [normal("Greeted", "said hello")], not an object'],
    [{ requeueAfter: "5 minutes" }, 'result field "requeueAfter" "5 minutes" is not a positive Go duration such as "30s", "5m" or "1h30m" (duration({ minutes: 5 }) makes one)'],
    [{ requeueAfter: "0s" }, 'result field "requeueAfter" "0s" is not a positive Go duration such as "30s", "5m" or "1h30m" (duration({ minutes: 5 }) makes one)'],
    [{ requeueAfter: 30 }, 'result field "requeueAfter" 30 is not a positive Go duration such as "30s", "5m" or "1h30m" (duration({ minutes: 5 }) makes one)'],
    [{ skipped: "yes" }, 'result field "skipped" must be true or false, not a string ("yes")'],
    [{ refuse: "" }, 'result field "refuse" must be the reason, a string that is not empty, not a string ("")'],
    [{ warnings: ["a", 1] }, 'result field "warnings" must be a list of strings'],
    [{ error: { message: "x", retry: true } }, 'result field "error" has "retry": an error has message and permanent only'],
    [{ error: { message: "" } }, 'result field "error" must have a message, a string that is not empty'],
    ["done", "the handler returned a string (\"done\"), not a result object (or nothing)"],
    [[{ status: {} }], "the handler returned a list, not a result object (or nothing)"],
    [{ statsu: {}, requeAfter: "1m" }, `result field "statsu" is not one of ${allFields} (did you mean "status"?); result field "requeAfter" is not one of ${allFields} (did you mean "requeueAfter"?)`],
  ];
  for (const [value, message] of cases) {
    const a = await new Handlers().on("create", () => value as Result).answer(context("create"));
    assert.deepEqual(a.result, { error: { message, permanent: true } }, JSON.stringify(value));
    assert.equal(a.exitCode, 0);
  }
  // What JSON leaves out is not written, and so not checked.
  const r = await new Handlers().on("create", () => ({ status: { at: new Date(0) }, requeueAfter: undefined }) as unknown as Result).call(context("create"));
  assert.deepEqual(r, { status: { at: "1970-01-01T00:00:00.000Z" } });
});

test("NaN and ±Infinity, which JSON.stringify writes null (in a merge patch, a delete), fail the run permanently, naming their path", async () => {
  const cases: [string, unknown, string][] = [
    ["create", { status: { ratio: NaN } }, "result field status.ratio is NaN: not a JSON number"],
    ["create", { status: { load: { avg: [0.5, Infinity] } } }, "result field status.load.avg[1] is Infinity: not a JSON number"],
    ["create", { status: { "app.kubernetes.io/x": -Infinity } }, 'result field status["app.kubernetes.io/x"] is -Infinity: not a JSON number'],
    ["create", { status: { boxed: new Number(NaN) } }, "result field status.boxed is NaN: not a JSON number"],
    ["create", { status: { a: NaN, b: [{ c: 1 / 0 }] } }, "result field status.a is NaN: not a JSON number; result field status.b[0].c is Infinity: not a JSON number"],
    ["mutate", { patch: { spec: { replicas: NaN } } }, "result field patch.spec.replicas is NaN: not a JSON number"],
  ];
  for (const [trigger, value, message] of cases) {
    const a = await new Handlers().on(trigger as "create", () => value as Result).answer(context(trigger));
    assert.deepEqual(a.result, { error: { message, permanent: true } }, message);
    assert.equal(a.exitCode, 0);
  }
  // One object in two places is named where each is.
  const shared = { n: NaN };
  const r = await new Handlers().on("create", (): Result => ({ status: { one: shared, two: { shared } } })).call(context("create"));
  assert.equal(r.error?.message, "result field status.one.n is NaN: not a JSON number; result field status.two.shared.n is NaN: not a JSON number");
  // Finite numbers, and toJSON's, are as they were.
  const fine = await new Handlers().on("create", (): Result => ({ status: { n: [0, -1.5, 1e300, Number.MAX_VALUE] } })).call(context("create"));
  assert.deepEqual(fine, { status: { n: [0, -1.5, 1e300, Number.MAX_VALUE] } });
});

test("requeueAfter: what Go's time.ParseDuration refuses, rounds to 0 or reads over its maximum fails permanently, naming the field", async () => {
  const over = "is over 2562047h47m16.854775807s, the most a Go duration can be";
  const cases: [string, string | undefined][] = [
    ["0.0000000001s", 'result field "requeueAfter" "0.0000000001s" is less than a nanosecond: Go\'s time.ParseDuration reads it as 0, and it must be positive'],
    ["0.9ns", 'result field "requeueAfter" "0.9ns" is less than a nanosecond: Go\'s time.ParseDuration reads it as 0, and it must be positive'],
    ["0.0000000000001h", 'result field "requeueAfter" "0.0000000000001h" is less than a nanosecond: Go\'s time.ParseDuration reads it as 0, and it must be positive'],
    ["0m0s", 'result field "requeueAfter" "0m0s" is not a positive Go duration such as "30s", "5m" or "1h30m" (duration({ minutes: 5 }) makes one)'],
    ["2562048h", `result field "requeueAfter" "2562048h" ${over}`],
    ["2562047h47m16.854775808s", `result field "requeueAfter" "2562047h47m16.854775808s" ${over}`],
    ["9223372036854775808ns", `result field "requeueAfter" "9223372036854775808ns" ${over}`],
    ["99999999999999999999999999999s", `result field "requeueAfter" "99999999999999999999999999999s" ${over}`],
    ["9223372036854775807ns", undefined],
    ["2562047h47m16.854775807s", undefined],
    ["0.000000001s", undefined],
    ["0.0000000000003h", undefined],
    ["1.99999999999999999999999999ns", undefined],
    ["000000000000000000000000000001s", undefined],
    ["1h0.00000000000000000000000000001s", undefined],
    ["1µs", undefined],
  ];
  for (const [requeueAfter, message] of cases) {
    const a = await new Handlers().on("create", (): Result => ({ requeueAfter })).answer(context("create"));
    assert.deepEqual(a.result, message === undefined ? { requeueAfter } : { error: { message, permanent: true } }, requeueAfter);
  }
});

test("the result of every field, well formed, is written as it is", async () => {
  const result: Result = {
    status: { phase: "done", gone: null },
    events: [normal("Greeted", "hi"), warning("Slow", "took long"), { reason: "Plain", message: "no type" }],
    requeueAfter: "1h30m",
    skipped: false,
    refuse: "not allowed",
    error: { message: "x", permanent: false },
  };
  const a = await new Handlers().on("event", () => result).answer(context("event"));
  assert.deepEqual(a.result, result);
  assert.equal(a.line, JSON.stringify(result));
});

test("a result over 1 MiB fails permanently", async () => {
  const big = "é".repeat(600_000);
  const r = await new Handlers().on("create", (): Result => ({ status: { big } })).call(context("create"));
  assert.deepEqual(r, { error: { message: "the result is 1200021 bytes, over opkit's limit of 1048576 (1 MiB)", permanent: true } });
});

test("admission handlers: their fields only, and validate says allowed", async () => {
  const handlers = new Handlers();
  handlers.on("validate", (ctx) => (ctx.operation === "DELETE" ? {} : { allowed: ctx.userInfo.username === "admin", message: "admins only" }));
  handlers.on("mutate", (ctx) =>
    ctx.dryRun ? ({ allowed: true, status: { x: 1 } } as object) : { patch: { metadata: { labels: { by: ctx.userInfo.username ?? "" } } } },
  );
  const admission = (trigger: string, operation: string, username: string, dryRun = false): Record<string, unknown> => ({
    operator: "things",
    handler: "check",
    trigger,
    runId: "01jd5v3q8m2k4x7zab",
    operation,
    object: { apiVersion: "v1", kind: "Thing", metadata: { name: "a" } },
    oldObject: null,
    userInfo: { username },
    dryRun,
    request: { uid: "u", kind: { group: "", version: "v1", kind: "Thing" }, resource: { group: "", version: "v1", resource: "things" } },
  });
  assert.deepEqual(await handlers.call(admission("validate", "CREATE", "jane")), { allowed: false, message: "admins only" });
  assert.deepEqual(await handlers.call(admission("mutate", "CREATE", "jane")), { patch: { metadata: { labels: { by: "jane" } } } });
  assert.deepEqual(await handlers.call(admission("validate", "DELETE", "jane")), {
    error: { message: 'a validate handler\'s result must say "allowed": true or false', permanent: true },
  });
  assert.deepEqual(await handlers.call(admission("mutate", "CREATE", "jane", true)), {
    error: { message: 'result field "status" is not one of an admission handler\'s allowed, message, patch, warnings, error', permanent: true },
  });
});

test("a binding context that is not a JSON object fails permanently, saying what is wrong", async () => {
  const handlers = new Handlers().on(() => {});
  const cases: [string | object, RegExp][] = [
    ["{nope", /^the binding context is not valid JSON: .*; it begins "\{nope"$/],
    ["", /^the binding context is empty/],
    ["[1, 2]", /^the binding context is not a JSON object but a list$/],
    ["{}", /^the binding context has no "trigger"$/],
    [{ trigger: 7 }, /^the binding context has no "trigger"$/],
  ];
  for (const [input, pattern] of cases) {
    const a = await handlers.answer(input);
    assert.equal(a.result.error?.permanent, true, String(input));
    assert.match(a.result.error?.message ?? "", pattern);
    assert.equal(a.exitCode, 0);
  }
});

test("duration makes Go durations", () => {
  const cases: [Parameters<typeof duration>[0], string][] = [
    [{ seconds: 30 }, "30s"],
    [{ minutes: 5 }, "5m"],
    [{ seconds: 90 }, "1m30s"],
    [{ hours: 1, minutes: 30 }, "1h30m"],
    [{ hours: 2 }, "2h"],
    [{ hours: 1, seconds: 1 }, "1h1s"],
    [{ hours: 25, milliseconds: 1 }, "25h0.001s"],
    [{ milliseconds: 1500 }, "1.5s"],
    [{ milliseconds: 250 }, "250ms"],
    [{ milliseconds: 0.5 }, "500us"],
    [{ milliseconds: 2.25 }, "2.25ms"],
  ];
  for (const [parts, want] of cases) {
    assert.equal(duration(parts), want, JSON.stringify(parts));
  }
  assert.throws(() => duration({}), /^RangeError: duration\(\{\}\) is not positive: requeueAfter must be$/);
  assert.throws(() => duration({ seconds: -1 }), /^RangeError: duration\(\{ seconds: -1 \}\) is not positive/);
  assert.throws(() => duration({ seconds: NaN }), /^RangeError: duration\(\{ seconds: NaN \}\) is not a number$/);
  assert.throws(() => duration({ milliseconds: 0.0004 }), /^RangeError: duration\(\{ milliseconds: 0.0004 \}\) rounds to 0 at the microsecond/);
  // No more than the most a Go duration can be, 2^63-1 ns: the engine refuses more.
  const over = / is over 2562047h47m16\.854775807s, the most a Go duration \(requeueAfter\) can be$/;
  assert.throws(() => duration({ hours: 1e7 }), over);
  assert.throws(() => duration({ hours: 2562047, minutes: 47, seconds: 17 }), over);
  assert.throws(() => duration({ seconds: Infinity }), over);
  assert.throws(() => duration({ milliseconds: 1e300 }), over);
  assert.equal(duration({ hours: 2562047 }), "2562047h");
  assert.equal(duration({ hours: 2562047, minutes: 47, seconds: 16 }), "2562047h47m16s");
  assert.equal(duration({ milliseconds: 0.0005 }), "1us");
  // Exact, where floating point would not be: 100000h and a microsecond.
  assert.equal(duration({ hours: 100_000, milliseconds: 0.001 }), "100000h0.000001s");
});

test("what duration makes, the result's check (the engine's, as the Go tests show) passes", async () => {
  const handlers = new Handlers();
  handlers.on((ctx) => ({ requeueAfter: (ctx as unknown as { d: string }).d }));
  let made = 0;
  let seed = 1;
  for (let i = 0; i < 2000; i++) {
    // From a microsecond to past the most, on a log scale (a fixed sequence).
    seed = (seed * 48271) % 2147483647;
    const hours = 10 ** ((seed / 2147483647) * 16.5 - 10.5);
    let d: string;
    try {
      d = duration({ hours });
    } catch (err) {
      assert.ok(hours > 2562047 || hours < 1.4e-10, `duration({ hours: ${hours} }) throws ${String(err)}`);
      continue;
    }
    made++;
    assert.deepEqual(await handlers.call({ trigger: "create", d }), { requeueAfter: d }, `duration({ hours: ${hours} })`);
  }
  assert.ok(made > 1000);
});

test("serve: a line in, a line out, one run at a time, in order, until the end of input", async () => {
  const handlers = new Handlers<Thing, Spec>();
  let inFlight = 0;
  const order: string[] = [];
  handlers.on(["create", "update"], async (ctx: Context<Thing, Spec>): Promise<Result> => {
    const name = ctx.object.spec.name;
    assert.equal(inFlight++, 0, "two runs at once");
    order.push(`begin ${name}`);
    // The first run takes longest: a loop that did not wait would answer out of order.
    await new Promise((resolve) => setTimeout(resolve, name === "first" ? 30 : 1));
    order.push(`end ${name}`);
    inFlight--;
    if (name === "bug") {
      throw new SyntaxError("bad greeting");
    }
    return { status: { greeting: `Hello, ${name}!` } };
  });
  const input = new PassThrough();
  const output = new PassThrough();
  const log = new PassThrough();
  output.setEncoding("utf8");
  log.setEncoding("utf8");
  let out = "";
  output.on("data", (chunk: string) => {
    out += chunk;
  });
  let logged = "";
  log.on("data", (chunk: string) => {
    logged += chunk;
  });
  const served = handlers.serve(input, output, log);
  for (const name of ["first", "second", "bug"]) {
    input.write(JSON.stringify(context("create", name)) + "\n");
  }
  input.write("{not json\n");
  input.end(JSON.stringify(context("delete", "last"))); // the last line needs no newline
  await served;

  const lines = out.split("\n");
  assert.equal(lines.pop(), "", "every answer ends with a newline");
  const answers = lines.map((l) => JSON.parse(l) as Result);
  assert.match(answers[3]?.error?.message ?? "", /^the binding context is not valid JSON: /);
  assert.deepEqual(answers, [
    { status: { greeting: "Hello, first!" } },
    { status: { greeting: "Hello, second!" } },
    { error: { message: "SyntaxError: bad greeting" } },
    { error: { message: answers[3]?.error?.message, permanent: true } },
    {
      error: {
        message:
          'no function for trigger "delete": this program handles create, update (handlers.on("delete", fn) registers one, handlers.on(fn) the default for every trigger)',
        permanent: true,
      },
    },
  ]);
  assert.deepEqual(order, ["begin first", "end first", "begin second", "end second", "begin bug", "end bug"]);
  assert.match(logged, /^SyntaxError: bad greeting\n\s+at /);
});

/**
 * opkit's handler SDK for TypeScript and JavaScript (Node.js 20 or later,
 * its standard library only). A handler program registers a function per
 * trigger and runs:
 *
 * ```ts
 * import { Handlers, TemporaryError, normal, type Context, type Result } from "./opkit.js";
 *
 * const handlers = new Handlers();
 * handlers.on(["create", "update"], (ctx: Context<Greeting, GreetingSpec>): Result<GreetingStatus> => ({
 *   status: { greeting: `Hello, ${ctx.object.spec.name}!` },
 *   events: [normal("Greeted", `said hello to ${ctx.object.spec.name}`)],
 * }));
 * await handlers.run();
 * ```
 *
 * (A top-level `await`: a handler program is an ES module.)
 *
 * The contract (docs/handlers.md, docs/admission.md and the JSON Schemas
 * in docs/schemas are the truth):
 *
 * - Dispatch: the binding context's `trigger` picks the function registered
 *   for it; one registered with no trigger (or "*") is the default. A
 *   trigger with neither fails the run permanently, naming the trigger and
 *   the triggers the program handles. Functions may be async.
 * - Two modes, one program. With `OPKIT_MODE=Serve` in the environment,
 *   {@link Handlers.run} reads one binding context per line of stdin, one at
 *   a time, in order, and answers each with exactly one compact JSON line on
 *   stdout, written after what the run logged on stderr; at the end of stdin
 *   it exits 0. Otherwise it reads all of stdin as one binding context,
 *   writes the result to stdout and exits: 0, or 75 (EX_TEMPFAIL) for a
 *   {@link TemporaryError}, or 1 for a bug.
 * - Once `run` is called, stdout belongs to the answers: `console.log` and
 *   `process.stdout.write` by the program's code go to stderr (the run's
 *   log) instead. That is all the SDK can keep off stdout: Node.js cannot
 *   point file descriptor 1 elsewhere (it has no dup2), so what writes to
 *   fd 1 itself still lands among the answers and breaks them:
 *   `fs.writeSync(1, ...)`, and a child process that inherits it
 *   (`stdio: "inherit"`, `[0, 1, 2]`, `process.stdout`; `fork` by
 *   default). Spawn a child with `stdio: ["ignore", 2, 2]` (its output
 *   goes to the run's log) or "pipe" (its output is the program's to
 *   read); fork with `stdio: ["ignore", 2, 2, "ipc"]`. Give it no stdin
 *   ("ignore"): in mode Serve, stdin carries the binding contexts, and a
 *   child reading it would take the next binding context.
 * - Errors: a thrown {@link PermanentError} is the result
 *   `{"error": {"message": M, "permanent": true}}` (exit 0: the object is
 *   Stalled at once); a {@link TemporaryError} is `{"error": {"message": M}}`
 *   (exit 75, retried); anything else thrown is a bug: its stack goes to
 *   stderr and the result is `{"error": {"message": "<name>: <message>"}}`
 *   (exit 1, retried). In Serve mode nothing exits: the answer carries the
 *   error and the loop goes on. A binding context that is not JSON fails
 *   permanently, saying what is wrong.
 * - A function's promise that never settles (a callback never called, an
 *   `await` of something nothing resolves) would leave Node.js nothing to
 *   do, and the process would exit 0 having answered nothing: an empty
 *   result, a success. Instead, when Node.js is about to exit with a run's
 *   answer pending, the SDK answers it with the temporary error "the
 *   handler's promise never settled: it returned before its work was
 *   done" and exits 1, in either mode: a bug of the handler's, and so
 *   retried and reported as one (75 is for failures the handler knows to
 *   be temporary).
 * - The result is a {@link Result}: an object literal with a field that is
 *   not one of the result's is a type error where the function declares
 *   its return type (`: Result<GreetingStatus>`), and at run time every
 *   result is checked before it is written (`result field "statsu" is not
 *   one of status, events, ...`): a wrong one fails the run permanently.
 *   So does a number JSON has not, NaN or ±Infinity (JSON.stringify would
 *   write null, which in `status` deletes the field), naming its path:
 *   `result field status.ratio is NaN: not a JSON number`. Returning
 *   nothing is the empty result, `{}`.
 * - {@link Handlers.call} runs the table in-process, for tests: the result
 *   as the protocol would write it, errors included.
 *
 * A TypeScript project compiles its handlers with `tsc` (module
 * "nodenext", target ES2022, strict) beside a package.json that says
 * `"type": "module"`, and runs the JavaScript: opkit.js is this file
 * compiled, opkit.d.ts its types.
 *
 * @module
 */
// ---------------------------------------------------------------------------
// Errors and helpers.
/** A failure that may pass: the run is retried with back-off (per-run mode exits 75). */
export class TemporaryError extends Error {
    name = "TemporaryError";
}
/** A failure retrying cannot fix: the object is Stalled at once. */
export class PermanentError extends Error {
    name = "PermanentError";
}
/** A Normal Event. */
export function normal(reason, message) {
    return { type: "Normal", reason, message };
}
/** A Warning Event. */
export function warning(reason, message) {
    return { type: "Warning", reason, message };
}
/**
 * Writes a line to the run's log (stderr, `opkit logs RUN`): its parts
 * joined by spaces, strings as they are and anything else as JSON. It needs
 * no Node.js types; `console.log` and `console.error` do the same where
 * they are declared (`@types/node`), as stdout is the log's too while a
 * function runs.
 */
export function log(...parts) {
    process.stderr.write(parts.map((p) => (typeof p === "string" ? p : JSON.stringify(p))).join(" ") + "\n");
}
/**
 * A Go duration, for requeueAfter: `duration({ minutes: 5 })` is "5m",
 * `duration({ seconds: 90 })` "1m30s", `duration({ milliseconds: 1500 })`
 * "1.5s". It must be positive (to the microsecond, which it is rounded to)
 * and at most 2562047h47m16.854775807s, the most a Go duration can be
 * (2^63-1 nanoseconds, some 292 years): anything else throws a RangeError.
 */
export function duration(parts) {
    const ms = (parts.hours ?? 0) * 3_600_000 + (parts.minutes ?? 0) * 60_000 + (parts.seconds ?? 0) * 1000 + (parts.milliseconds ?? 0);
    const given = Object.entries(parts).map(([k, v]) => `${k}: ${typeof v === "string" ? JSON.stringify(v) : String(v)}`);
    const shown = `duration(${given.length > 0 ? `{ ${given.join(", ")} }` : "{}"})`;
    if (Number.isNaN(ms)) {
        throw new RangeError(`${shown} is not a number`);
    }
    if (ms <= 0) {
        throw new RangeError(`${shown} is not positive: requeueAfter must be`);
    }
    const us = Math.round(ms * 1000);
    if (us <= 0) {
        throw new RangeError(`${shown} rounds to 0 at the microsecond: requeueAfter must be positive`);
    }
    if (!Number.isFinite(us) || BigInt(us) * 1000n > maxNanoseconds) {
        throw new RangeError(`${shown} is over ${maxDuration}, the most a Go duration (requeueAfter) can be`);
    }
    const n = BigInt(us);
    if (n < 1000n) {
        return `${n}us`;
    }
    if (n < 1000000n) {
        return `${decimal(n, 1000n)}ms`;
    }
    const h = n / 3600000000n;
    const m = (n / 60000000n) % 60n;
    const s = n % 60000000n;
    return (h > 0n ? `${h}h` : "") + (m > 0n ? `${m}m` : "") + (s > 0n ? `${decimal(s, 1000000n)}s` : "");
}
/** n/unit, exactly, in decimal: unit is a power of ten. */
function decimal(n, unit) {
    const fraction = (n % unit).toString().padStart(unit.toString().length - 1, "0").replace(/0+$/, "");
    return `${n / unit}` + (fraction === "" ? "" : `.${fraction}`);
}
/** The most a Go duration can be, 2^63-1 nanoseconds. */
const maxNanoseconds = 9223372036854775807n;
const maxDuration = "2562047h47m16.854775807s";
const goUnits = new Map([
    ["ns", 1n],
    ["us", 1000n],
    ["\u00b5s", 1000n],
    ["\u03bcs", 1000n],
    ["ms", 1000000n],
    ["s", 1000000000n],
    ["m", 60000000000n],
    ["h", 3600000000000n],
]);
/**
 * The nanoseconds of a Go duration as Go's time.ParseDuration reads it
 * (fractions rounded down to the nanosecond as it does), or undefined for
 * what it refuses; over 2^63-1 (which it refuses) is returned as it is.
 */
function parseGoDuration(text) {
    let s = text;
    let negative = false;
    if (s.startsWith("-") || s.startsWith("+")) {
        negative = s.startsWith("-");
        s = s.slice(1);
    }
    if (s === "0") {
        return 0n;
    }
    if (s === "") {
        return undefined;
    }
    let total = 0n;
    while (s !== "") {
        const number = /^([0-9]*)(?:\.([0-9]*))?/.exec(s);
        const whole = number?.[1] ?? "";
        const fraction = number?.[2];
        if (number === null || (whole === "" && (fraction ?? "") === "")) {
            return undefined;
        }
        s = s.slice(number[0].length);
        const unitLength = s.search(/[0-9.]/);
        const unitName = unitLength < 0 ? s : s.slice(0, unitLength);
        const unit = goUnits.get(unitName);
        if (unit === undefined) {
            return undefined;
        }
        s = s.slice(unitName.length);
        const digits = whole.replace(/^0+/, "");
        if (digits.length > 20) {
            return maxNanoseconds + 1n; // far over; spare BigInt a long number
        }
        total += BigInt(digits === "" ? "0" : digits) * unit;
        if (fraction !== undefined) {
            // As Go's leadingFraction: digits past 2^63 of precision are dropped,
            // and the part of the unit they make is rounded down.
            let f = 0n;
            let scale = 1;
            for (const c of fraction) {
                const next = f * 10n + BigInt(c);
                if (f > (2n ** 63n - 1n) / 10n || next > 2n ** 63n) {
                    break;
                }
                f = next;
                scale *= 10;
            }
            if (f > 0n) {
                total += BigInt(Math.trunc(Number(f) * (Number(unit) / scale)));
            }
        }
    }
    return negative ? -total : total;
}
/** The fields of a result, in the schema's order. */
const resultFields = [
    "status",
    "events",
    "requeueAfter",
    "skipped",
    "refuse",
    "allowed",
    "message",
    "patch",
    "warnings",
    "error",
];
const knownTriggers = [
    "create",
    "update",
    "delete",
    "resume",
    "schedule",
    "when",
    "requeue",
    "event",
    "rerun",
    "manual",
    "enter",
    "exit",
    "validate",
    "mutate",
];
/** The exit status of a temporary failure (EX_TEMPFAIL). */
const exitTemporary = 75;
/** The most a result may be, in bytes (the engine's limit). */
const maxResultBytes = 1 << 20;
/**
 * A handler program's table: a function per trigger, and a default.
 *
 * O, Old and S type the contexts and results of functions that do not type
 * their own: `new Handlers<Greeting, GreetingSpec, GreetingStatus>()` makes
 * `handlers.on("create", (ctx) => ...)` know `ctx.object.spec`. Annotate a
 * function's return type (`(ctx: GreetContext): GreetResult => ...`) to
 * have a misspelled field of the object literal it returns refused:
 * TypeScript checks an object literal's fields against a type the code
 * declares, not against what a callback is expected to return. (A wrong
 * field gets past the type check that way fails at run time, permanently.)
 */
export class Handlers {
    #table = new Map();
    #default;
    /** Whether a run's answer is due: a function runs, or its answer is being written. */
    #answering = false;
    on(first, second) {
        const fn = typeof first === "function" ? first : second;
        if (typeof fn !== "function") {
            throw new TypeError("handlers.on(triggers, fn): fn must be a function");
        }
        const names = typeof first === "function" ? ["*"] : typeof first === "string" ? [first] : [...first];
        if (names.length === 0) {
            throw new TypeError('handlers.on: no triggers: name some, or register the default with handlers.on(fn) or handlers.on("*", fn)');
        }
        for (const name of names) {
            if (name !== "*" && !knownTriggers.includes(name)) {
                throw new TypeError(`handlers.on: ${JSON.stringify(name)} is not a trigger: one of ${knownTriggers.join(", ")}, or "*" for the default`);
            }
            if (name === "*" ? this.#default !== undefined : this.#table.has(name)) {
                throw new TypeError(`handlers.on: ${name === "*" ? "the default" : `trigger "${name}"`} has a function already`);
            }
        }
        for (const name of names) {
            if (name === "*") {
                this.#default = fn;
            }
            else {
                this.#table.set(name, fn);
            }
        }
        return this;
    }
    /**
     * Runs the function for a binding context (an object, or its JSON text)
     * in-process, and gives the result as the protocol would write it: an
     * error thrown becomes an error result, exactly as in a run. For tests.
     */
    async call(context) {
        return (await this.answer(context)).result;
    }
    /** As {@link call}, with the line written, the exit status of a process per run and a bug's stack. */
    async answer(context) {
        let ctx;
        if (typeof context === "string") {
            if (context.trim() === "") {
                return failed("the binding context is empty: a handler reads one JSON object on stdin", true);
            }
            try {
                ctx = JSON.parse(context);
            }
            catch (err) {
                return failed(`the binding context is not valid JSON: ${messageOf(err)}; it begins ${JSON.stringify(context.slice(0, 100))}`, true);
            }
        }
        else {
            try {
                ctx = JSON.parse(JSON.stringify(context));
            }
            catch (err) {
                return failed(`the binding context is not JSON: ${messageOf(err)}`, true);
            }
        }
        if (!isObject(ctx)) {
            return failed(`the binding context is not a JSON object but ${kindOf(ctx)}`, true);
        }
        const trigger = ctx["trigger"];
        if (typeof trigger !== "string" || trigger === "") {
            return failed('the binding context has no "trigger"', true);
        }
        const fn = this.#table.get(trigger) ?? this.#default;
        if (fn === undefined) {
            const handled = [...this.#table.keys()];
            const these = handled.length > 0 ? `this program handles ${handled.join(", ")}` : "this program has no function";
            return failed(`no function for trigger "${trigger}": ${these} (handlers.on("${trigger}", fn) registers one, handlers.on(fn) the default for every trigger)`, true);
        }
        let value;
        try {
            value = await fn(ctx);
        }
        catch (err) {
            return thrown(err);
        }
        return written(value, trigger);
    }
    /**
     * Runs the program: with OPKIT_MODE=Serve, {@link serve} on stdin and
     * stdout, then exit 0 at the end of stdin; otherwise one binding context
     * from all of stdin, its result on stdout, and exit (0; 75 for a
     * TemporaryError; 1 for a bug). Await it (top-level await). From here
     * on, what the program writes to stdout with console.log or
     * process.stdout.write goes to stderr; file descriptor 1 itself remains
     * the answers' (see the module's comment on child processes).
     *
     * Should Node.js run out of things to do while a run's answer is due (a
     * function's promise that nothing can settle), the run is answered with
     * a temporary error, "the handler's promise never settled: it returned
     * before its work was done", and the process exits 1, rather than
     * exiting 0 having answered nothing, which would be a success.
     */
    async run() {
        const out = process.stdout;
        const write = out.write;
        const answers = { write: (chunk, callback) => write.call(out, chunk, callback) };
        out.write = (...args) => process.stderr.write.apply(process.stderr, args);
        process.on("beforeExit", () => {
            if (!this.#answering) {
                return;
            }
            const error = { message: "the handler's promise never settled: it returned before its work was done" };
            const trace = "opkit: the handler's function returned a promise that never settled, and Node.js has nothing left to do that could settle it " +
                "(an await of a promise nothing resolves, a callback never called, an unref'd timer or socket?): the run fails, and is retried";
            answerOn({ result: { error }, line: JSON.stringify({ error }), exitCode: 1, trace }, answers, process.stderr).then(() => process.exit(1), () => process.exit(1));
        });
        try {
            if (process.env["OPKIT_MODE"] === "Serve") {
                await this.serve(process.stdin, answers, process.stderr);
                process.exit(0);
            }
            process.stdin.setEncoding("utf8");
            let text = "";
            for await (const chunk of process.stdin) {
                text += chunk;
            }
            process.exit(await this.#answerOn(text, answers, process.stderr));
        }
        catch (err) {
            process.stderr.write(`opkit: the handler program failed: ${traceOf(err)}\n`);
            process.exit(1);
        }
    }
    /**
     * The Serve loop: reads input a line at a time (a binding context per
     * line), runs each to its end before the next, and writes its result as
     * one line to output, after flushing what the run logged to stderr (and
     * a bug's stack to log). Resolves at the end of input.
     */
    async serve(input, output, log = process.stderr) {
        const { createInterface } = (await import(readlineModule));
        const lines = createInterface({ input, crlfDelay: Infinity, terminal: false });
        for await (const line of lines) {
            await this.#answerOn(line, output, log);
        }
    }
    /** Runs the function for a binding context and writes its answer; gives the exit status of a process per run. */
    async #answerOn(context, output, log) {
        this.#answering = true;
        try {
            const a = await this.answer(context);
            await answerOn(a, output, log);
            return a.exitCode;
        }
        finally {
            this.#answering = false;
        }
    }
}
// ---------------------------------------------------------------------------
// How a run's answer is made and written.
/** A permanent (or temporary) failure's answer. */
function failed(message, permanent) {
    const error = permanent ? { message, permanent: true } : { message };
    return { result: { error }, line: JSON.stringify({ error }), exitCode: permanent ? 0 : exitTemporary };
}
/** The answer of an error a function threw. */
function thrown(err) {
    if (err instanceof PermanentError || err instanceof TemporaryError) {
        const a = failed(err.message || (err instanceof PermanentError ? "permanent error" : "temporary error"), err instanceof PermanentError);
        // Its cause, if it has one, goes to the run's log.
        return err.cause === undefined ? a : { ...a, trace: `${err.name}: ${err.message}${causesOf(err)}` };
    }
    let message;
    if (err instanceof Error) {
        let name = err.name;
        const ctor = err.constructor?.name;
        if (name === "Error" && typeof ctor === "string" && ctor !== "" && ctor !== "Error") {
            name = ctor;
        }
        message = err.message ? `${name}: ${err.message}` : name;
    }
    else {
        message = `a non-Error was thrown: ${describe(err)}`;
    }
    const error = { message };
    return { result: { error }, line: JSON.stringify({ error }), exitCode: 1, trace: traceOf(err) };
}
/** The answer of what a function returned: the result, or why it is not one. */
function written(value, trigger) {
    if (value === undefined || value === null) {
        return { result: {}, line: "{}", exitCode: 0 };
    }
    if (!isObject(value)) {
        return failed(`the handler returned ${kindOf(value)}, not a result object (or nothing)`, true);
    }
    let line;
    const notNumbers = [];
    try {
        line = JSON.stringify(value, jsonNumbers(notNumbers));
    }
    catch (err) {
        return failed(`the result is not JSON: ${messageOf(err)}`, true);
    }
    if (notNumbers.length > 0) {
        // JSON.stringify wrote them as null, which in a merge patch deletes.
        const shown = notNumbers.length > 10 ? [...notNumbers.slice(0, 10), `and ${notNumbers.length - 10} more`] : notNumbers;
        return failed(shown.join("; "), true);
    }
    const result = JSON.parse(line);
    const problems = check(result, trigger);
    if (problems.length > 0) {
        const shown = problems.length > 10 ? [...problems.slice(0, 10), `and ${problems.length - 10} more`] : problems;
        return failed(shown.join("; "), true);
    }
    const bytes = utf8Length(line);
    if (bytes > maxResultBytes) {
        return failed(`the result is ${bytes} bytes, over opkit's limit of ${maxResultBytes} (1 MiB)`, true);
    }
    return { result: result, line, exitCode: 0 };
}
/**
 * A JSON.stringify replacer that adds to problems a problem for each number
 * JSON has not (NaN, Infinity, -Infinity), naming its path in the result.
 */
function jsonNumbers(problems) {
    // Where each object is in the result: JSON.stringify goes depth first,
    // so an object's path is the one of the place it is written at now.
    const paths = new WeakMap();
    return function (key, value) {
        const holder = this;
        const parent = typeof holder === "object" && holder !== null ? (paths.get(holder) ?? "") : "";
        const path = parent === "" && !Array.isArray(holder)
            ? key
            : Array.isArray(holder)
                ? `${parent}[${key}]`
                : /^[A-Za-z_][A-Za-z0-9_-]*$/.test(key)
                    ? `${parent}.${key}`
                    : `${parent}[${JSON.stringify(key)}]`;
        const n = value instanceof Number ? value.valueOf() : value;
        if (typeof n === "number" && !Number.isFinite(n)) {
            problems.push(`result field ${path} is ${n}: not a JSON number`);
        }
        else if (typeof value === "object" && value !== null) {
            paths.set(value, path);
        }
        return value;
    };
}
const admissionFields = ["allowed", "message", "patch", "warnings", "error"];
const reservedStatus = ["observedGeneration", "conditions", "opkit"];
const goDuration = /^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$/;
/** What is wrong with a result, as written, of a run on trigger. */
function check(result, trigger) {
    const problems = [];
    const admission = trigger === "validate" || trigger === "mutate";
    for (const [key, value] of Object.entries(result)) {
        if (!resultFields.includes(key)) {
            const near = resultFields.find((f) => distance(f.toLowerCase(), key.toLowerCase()) <= 2);
            problems.push(`result field ${JSON.stringify(key)} is not one of ${resultFields.join(", ")}` + (near ? ` (did you mean "${near}"?)` : ""));
            continue;
        }
        if (admission && !admissionFields.includes(key)) {
            problems.push(`result field "${key}" is not one of an admission handler's ${admissionFields.join(", ")}`);
            continue;
        }
        const problem = checkField(key, value);
        if (problem !== undefined) {
            problems.push(`result field "${key}" ${problem}`);
        }
    }
    if (trigger === "validate" && result["allowed"] === undefined && result["error"] === undefined) {
        problems.push('a validate handler\'s result must say "allowed": true or false');
    }
    if (trigger === "validate" && result["patch"] !== undefined) {
        problems.push("a validate handler cannot patch the object: make it a mutate handler");
    }
    return problems;
}
/** What is wrong with a result's field, or undefined. */
function checkField(key, value) {
    switch (key) {
        case "status": {
            if (!isObject(value)) {
                return `must be an object of status fields, e.g. {"status": {"phase": "done"}}, not ${kindOf(value)}`;
            }
            const reserved = reservedStatus.filter((k) => k in value);
            return reserved.length > 0 ? `has ${reserved.map((k) => `"${k}"`).join(", ")}, written by opkit: a handler cannot set it` : undefined;
        }
        case "events": {
            if (!Array.isArray(value)) {
                return `must be a list of events, e.g. [normal("Greeted", "said hello")], not ${kindOf(value)}`;
            }
            const problems = value.map((e, i) => checkEvent(e, i)).filter((p) => p !== undefined);
            return problems.length > 0 ? `has ${problems.join(", ")}` : undefined;
        }
        case "requeueAfter": {
            const ns = typeof value === "string" && goDuration.test(value) ? parseGoDuration(value) : undefined;
            if (ns !== undefined && ns > maxNanoseconds) {
                return `${JSON.stringify(value)} is over ${maxDuration}, the most a Go duration can be`;
            }
            if (ns === 0n && /[1-9]/.test(String(value))) {
                return `${JSON.stringify(value)} is less than a nanosecond: Go's time.ParseDuration reads it as 0, and it must be positive`;
            }
            return ns !== undefined && ns > 0n
                ? undefined
                : `${JSON.stringify(value)} is not a positive Go duration such as "30s", "5m" or "1h30m" (duration({ minutes: 5 }) makes one)`;
        }
        case "skipped":
        case "allowed":
            return typeof value === "boolean" ? undefined : `must be true or false, not ${kindOf(value)}`;
        case "refuse":
            return typeof value === "string" && value !== "" ? undefined : `must be the reason, a string that is not empty, not ${kindOf(value)}`;
        case "message":
            return typeof value === "string" ? undefined : `must be a string, not ${kindOf(value)}`;
        case "patch":
            return isObject(value) ? undefined : `must be a JSON merge patch of the object, e.g. {"spec": {"replicas": 1}}, not ${kindOf(value)}`;
        case "warnings":
            return Array.isArray(value) && value.every((w) => typeof w === "string") ? undefined : `must be a list of strings`;
        case "error": {
            if (!isObject(value)) {
                return `must be {"message": "...", "permanent": true or false}, not ${kindOf(value)}`;
            }
            const extra = Object.keys(value).filter((k) => k !== "message" && k !== "permanent");
            if (extra.length > 0) {
                return `has ${extra.map((k) => `"${k}"`).join(", ")}: an error has message and permanent only`;
            }
            if (typeof value["message"] !== "string" || value["message"] === "") {
                return "must have a message, a string that is not empty";
            }
            if (value["permanent"] !== undefined && typeof value["permanent"] !== "boolean") {
                return `"permanent" must be true or false`;
            }
            return undefined;
        }
    }
    return undefined;
}
function checkEvent(e, i) {
    if (!isObject(e)) {
        return `events[${i}], ${kindOf(e)}, not an event {type, reason, message}`;
    }
    const extra = Object.keys(e).filter((k) => k !== "type" && k !== "reason" && k !== "message");
    if (extra.length > 0) {
        return `events[${i}] with ${extra.map((k) => `"${k}"`).join(", ")}, not one of type, reason, message`;
    }
    if (e["type"] !== undefined && e["type"] !== "Normal" && e["type"] !== "Warning") {
        return `events[${i}] of type ${JSON.stringify(e["type"])}, not Normal or Warning`;
    }
    if (typeof e["reason"] !== "string" || e["reason"] === "") {
        return `events[${i}] without a reason`;
    }
    if (typeof e["message"] !== "string") {
        return `events[${i}] without a message`;
    }
    return undefined;
}
/** Writes an answer: a bug's stack to log, then, once stderr is flushed, the line. */
async function answerOn(a, output, log) {
    if (a.trace !== undefined) {
        await writeTo(log, a.trace + "\n");
    }
    await writeTo(log, "");
    if (log !== process.stderr) {
        await writeTo(process.stderr, "");
    }
    await writeTo(output, a.line + "\n");
}
/** Writes chunk and waits until it is flushed (an empty chunk: until what came before is). */
function writeTo(stream, chunk) {
    return new Promise((resolve, reject) => {
        stream.write(chunk, (err) => (err ? reject(err) : resolve()));
    });
}
// ---------------------------------------------------------------------------
// Small things.
function isObject(v) {
    return typeof v === "object" && v !== null && !Array.isArray(v);
}
function kindOf(v) {
    if (v === null) {
        return "null";
    }
    if (Array.isArray(v)) {
        return "a list";
    }
    if (typeof v === "object") {
        return "an object";
    }
    return `a ${typeof v} (${describe(v)})`;
}
function describe(v) {
    let s;
    try {
        s = typeof v === "string" ? JSON.stringify(v) : String(v);
    }
    catch {
        s = Object.prototype.toString.call(v);
    }
    return s.length > 100 ? s.slice(0, 100) + "..." : s;
}
function messageOf(err) {
    return err instanceof Error ? err.message : describe(err);
}
/** An error's stack, and its causes'. */
function traceOf(err) {
    return err instanceof Error ? (err.stack ?? `${err.name}: ${err.message}`) + causesOf(err) : `a non-Error was thrown: ${describe(err)}`;
}
/** An error's causes, a "caused by" line and stack each. */
function causesOf(err) {
    let causes = "";
    let cause = err.cause;
    for (let depth = 0; cause !== undefined && depth < 10; depth++) {
        causes += `\ncaused by: ${cause instanceof Error ? (cause.stack ?? `${cause.name}: ${cause.message}`) : describe(cause)}`;
        cause = cause instanceof Error ? cause.cause : undefined;
    }
    return causes;
}
/** The edit distance of a and b (for "did you mean"). */
function distance(a, b) {
    let row = Array.from({ length: b.length + 1 }, (_, j) => j);
    for (let i = 1; i <= a.length; i++) {
        const next = [i];
        for (let j = 1; j <= b.length; j++) {
            const cost = a[i - 1] === b[j - 1] ? 0 : 1;
            next.push(Math.min((row[j] ?? 0) + 1, (next[j - 1] ?? 0) + 1, (row[j - 1] ?? 0) + cost));
        }
        row = next;
    }
    return row[b.length] ?? 0;
}
/** The length of s in UTF-8. */
function utf8Length(s) {
    let n = 0;
    for (let i = 0; i < s.length; i++) {
        const c = s.charCodeAt(i);
        if (c < 0x80) {
            n += 1;
        }
        else if (c < 0x800) {
            n += 2;
        }
        else if (c >= 0xd800 && c < 0xdc00 && i + 1 < s.length) {
            n += 4;
            i++;
        }
        else {
            n += 3;
        }
    }
    return n;
}
/** node:readline, imported when serve runs (a name, so that its types are the ones above). */
const readlineModule = "node:readline";

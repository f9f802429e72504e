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
/** The triggers of a handler on objects, schedules, deliveries and states (enter, exit: docs/states.md). */
export type Trigger = "create" | "update" | "delete" | "resume" | "schedule" | "when" | "requeue" | "event" | "rerun" | "manual" | "enter" | "exit";
/** The triggers of an admission handler (docs/admission.md). */
export type AdmissionTrigger = "validate" | "mutate";
/** A Kubernetes owner reference. */
export interface OwnerReference {
    apiVersion: string;
    kind: string;
    name: string;
    uid: string;
    controller?: boolean;
    blockOwnerDeletion?: boolean;
}
/** A Kubernetes object's metadata (opkit leaves managedFields out). */
export interface ObjectMeta {
    name?: string;
    generateName?: string;
    namespace?: string;
    uid?: string;
    resourceVersion?: string;
    generation?: number;
    creationTimestamp?: string;
    deletionTimestamp?: string;
    deletionGracePeriodSeconds?: number;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    ownerReferences?: OwnerReference[];
    finalizers?: string[];
}
/** Any Kubernetes object: apiVersion, kind, metadata, and anything else. */
export interface KubeObject {
    apiVersion: string;
    kind: string;
    metadata: ObjectMeta;
    [field: string]: unknown;
}
/** One change of the binding context's diff, from old to the object. */
export interface Change {
    op: "add" | "remove" | "change";
    /** A dotted path from the object's root: spec.replicas, metadata.labels.team. */
    path: string;
    /** The value before (change, remove). */
    old?: unknown;
    /** The value after (add, change). */
    new?: unknown;
}
/** The delivery a run on `event` handles (docs/events.md); P is its payload's type. */
export interface Delivery<P = unknown> {
    /** The archive's id of the delivery: opkit events show ID. */
    id: string;
    /** The operator's source it came in on. */
    source: string;
    /** The sender's id of it, e.g. X-GitHub-Delivery. */
    deliveryId?: string;
    /** What the sender says the event is, e.g. issue_comment. */
    event?: string;
    /** When it came, RFC 3339. */
    receivedAt: string;
    /** Its headers by lower-case name, first value, credentials redacted. */
    headers: Record<string, string>;
    /** Its JSON body, as received. */
    payload: P;
    /** For a delivery redelivered on purpose: the id of the one it handles again, who asked and why. */
    redeliveryOf?: string;
    redeliveredBy?: string;
    redeliveryReason?: string;
}
/** Who asked for an operator-wide schedule's run now (opkit schedule run). */
export interface ManualRun {
    /** The request's id, the end of the run's idempotency key. */
    request: string;
    /** The Kubernetes user who asked. */
    by: string;
    /** Why, in their words. */
    reason?: string;
}
/** The slot of an operator-wide schedule's run. */
export interface Schedule {
    /** The time the run is for, RFC 3339 in UTC; for a run asked for by a person, when they asked. */
    slot: string;
    manual?: ManualRun;
}
/**
 * The binding context of a run: O is the object's type, Old the type of
 * `old` (for a custom resource, its spec's type). Generated types plug in:
 * `type GreetContext = Context<Greeting, GreetingSpec>`.
 *
 * `object` is null in an operator-wide schedule's run and a run on `event`,
 * which are for no object: type those contexts {@link ScheduleContext} and
 * {@link EventContext}.
 */
export interface Context<O = KubeObject, Old = Record<string, unknown>> {
    /** The Operator's name. */
    operator: string;
    /** The handler's name. */
    handler: string;
    trigger: Trigger;
    /** This run's id in the archive (opkit logs RUN). */
    runId: string;
    /** The same for every attempt of this piece of work (docs/handlers.md#idempotency-keys). */
    idempotencyKey: string;
    /** 1 for the first run of this key, then one more per failed run. */
    attempt: number;
    /** The object, without managedFields. */
    object: O;
    /** The spec as of the last generation every create and update handler was done with; null before the first. */
    old: Old | null;
    /** The changes from old to the object. */
    diff: Change[] | null;
    /** Each child's current object by id (Secrets without data). */
    children: Record<string, KubeObject> | null;
    /** Each related object by id: the object named, or the list a selector matched. */
    related?: Record<string, KubeObject | KubeObject[]>;
    /** Only in an operator-wide schedule's run. */
    schedule?: Schedule;
    /** Only in a run on event. */
    event?: Delivery;
    /** In a re-run (trigger rerun), the id of the run it repeats. */
    rerunOf?: string;
    /** The W3C trace context of the run's span, when it has one. */
    traceparent?: string;
    tracestate?: string;
}
/** The context of an operator-wide schedule's run (trigger schedule or manual): no object. */
export type ScheduleContext = Context<null, null> & {
    schedule: Schedule;
};
/** The context of a run on `event`: no object, a delivery whose payload is a P. */
export type EventContext<P = unknown> = Context<null, null> & {
    event: Delivery<P>;
};
/** A Kubernetes Event a result posts on the object. */
export interface Event {
    /** Normal when left out. */
    type?: "Normal" | "Warning";
    /** UpperCamelCase, e.g. Greeted. */
    reason: string;
    message: string;
}
/** A failure the handler detected: the run fails with this message. */
export interface ResultError {
    message: string;
    /** Retrying cannot help: the object is Stalled at once. */
    permanent?: boolean;
}
/**
 * A JSON merge patch (RFC 7386) of a T: each field optional, null removes
 * it, objects are patched field by field and lists replaced whole.
 */
export type MergePatch<T> = {
    [K in keyof T]?: PatchValue<T[K]> | null;
};
/** What a merge patch holds for a field of type T. */
export type PatchValue<T> = T extends readonly unknown[] ? T : T extends object ? MergePatch<T> : T;
/**
 * The result of a run: S is the type of the object's status, merged into
 * it as a JSON merge patch. An object literal with any other field is a
 * type error. Every field is optional: `{}`, or returning nothing, is the
 * empty result.
 */
export interface Result<S = Record<string, unknown>> {
    /** Merged into the object's .status; observedGeneration, conditions and opkit are opkit's. */
    status?: MergePatch<S>;
    /** Kubernetes Events on the object: {@link normal}, {@link warning}. */
    events?: Event[];
    /** Run this handler again after this long, a Go duration such as "30s" or "1h30m": {@link duration}. */
    requeueAfter?: string;
    /** The run found nothing to do: recorded Skipped, no Event. */
    skipped?: boolean;
    /** Only on event: turn the delivery down with this reason. */
    refuse?: string;
    /** Only of an admission handler: whether the request is allowed. */
    allowed?: boolean;
    /** Only of an admission handler: why the request is denied. */
    message?: string;
    /** Only of a mutate handler: a JSON merge patch of the object. */
    patch?: Record<string, unknown>;
    /** Only of an admission handler: warnings the client prints. */
    warnings?: string[];
    /** The run failed: thrown {@link TemporaryError} and {@link PermanentError} make it too. */
    error?: ResultError;
}
/** Who asks, as the API server authenticated them. */
export interface UserInfo {
    username?: string;
    uid?: string;
    groups?: string[];
    extra?: Record<string, string[]>;
}
/** The admission request's facts. */
export interface AdmissionRequest {
    /** The API server's id of the request. */
    uid: string;
    kind: {
        group: string;
        version: string;
        kind: string;
    };
    resource: {
        group: string;
        version: string;
        resource: string;
    };
    subResource?: string;
    namespace?: string;
    /** Empty for a create with generateName. */
    name?: string;
}
/** The binding context of an admission handler (trigger validate or mutate); O is the object's type. */
export interface AdmissionContext<O = KubeObject> {
    operator: string;
    handler: string;
    trigger: AdmissionTrigger;
    /** This call's id in the archive. */
    runId: string;
    traceparent?: string;
    operation: "CREATE" | "UPDATE" | "DELETE";
    /** The object as it would be stored; null for DELETE. */
    object: O | null;
    /** The object as stored; null for CREATE. */
    oldObject: O | null;
    userInfo: UserInfo;
    /** The request writes nothing (kubectl --dry-run=server): have no side effects either way. */
    dryRun: boolean;
    request: AdmissionRequest;
}
/** The answer of an admission handler. */
export interface AdmissionResult<O = KubeObject> {
    /** Required of a validate handler; a mutate handler's defaults to true. */
    allowed?: boolean;
    /** Why it is denied; kubectl prints it. */
    message?: string;
    /** Of a mutate handler: a merge patch of spec, metadata.labels and metadata.annotations. */
    patch?: MergePatch<O>;
    /** Lines kubectl prints as warnings. */
    warnings?: string[];
    error?: ResultError;
}
/** What a function returns: a result, nothing (the empty result), or a promise of either. */
export type Returns<R> = R | void | Promise<R | void>;
/** A function of a handler program, for a trigger of an object's handler. */
export type Handler<O = KubeObject, Old = Record<string, unknown>, S = Record<string, unknown>> = (ctx: Context<O, Old>) => Returns<Result<S>>;
/** A function of an admission handler program. */
export type AdmissionHandler<O = KubeObject> = (ctx: AdmissionContext<O>) => Returns<AdmissionResult<O>>;
/** A failure that may pass: the run is retried with back-off (per-run mode exits 75). */
export declare class TemporaryError extends Error {
    name: string;
}
/** A failure retrying cannot fix: the object is Stalled at once. */
export declare class PermanentError extends Error {
    name: string;
}
/** A Normal Event. */
export declare function normal(reason: string, message: string): Event;
/** A Warning Event. */
export declare function warning(reason: string, message: string): Event;
/**
 * Writes a line to the run's log (stderr, `opkit logs RUN`): its parts
 * joined by spaces, strings as they are and anything else as JSON. It needs
 * no Node.js types; `console.log` and `console.error` do the same where
 * they are declared (`@types/node`), as stdout is the log's too while a
 * function runs.
 */
export declare function log(...parts: unknown[]): void;
/** The parts of a {@link duration}. */
export interface DurationParts {
    hours?: number;
    minutes?: number;
    seconds?: number;
    milliseconds?: number;
}
/**
 * A Go duration, for requeueAfter: `duration({ minutes: 5 })` is "5m",
 * `duration({ seconds: 90 })` "1m30s", `duration({ milliseconds: 1500 })`
 * "1.5s". It must be positive (to the microsecond, which it is rounded to)
 * and at most 2562047h47m16.854775807s, the most a Go duration can be
 * (2^63-1 nanoseconds, some 292 years): anything else throws a RangeError.
 */
export declare function duration(parts: DurationParts): string;
/** A stream serve reads lines from: a Node.js readable stream (process.stdin, a PassThrough). */
export interface InputStream {
    on(event: string, listener: (...args: never[]) => void): unknown;
}
/** A stream serve writes to: a Node.js writable stream. */
export interface OutputStream {
    write(chunk: string, callback?: (error?: Error | null) => void): boolean;
}
/** How a run ends: what {@link Handlers.answer} gives. */
export interface Answer<S = Record<string, unknown>> {
    /** The result as written. */
    result: Result<S>;
    /** The result's JSON, the line written to stdout (without its newline). */
    line: string;
    /** The exit status of a process per run: 0, 75 for a TemporaryError, 1 for a bug. */
    exitCode: 0 | 1 | 75;
    /** For a bug: its stack, which goes to stderr. */
    trace?: string;
}
/**
 * The context of a function for the triggers T: an admission handler's
 * (validate, mutate), or an object's (any other); never for a mix of both.
 */
export type ContextOf<T extends string, O, Old> = [T] extends [AdmissionTrigger] ? AdmissionContext<O> : [T] extends [Trigger | "*"] ? Context<O, Old> : never;
/** The result of a function for the triggers T, as {@link ContextOf}. */
export type ResultOf<T extends string, O, S> = [T] extends [AdmissionTrigger] ? AdmissionResult<O> : [T] extends [Trigger | "*"] ? Result<S> : never;
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
export declare class Handlers<O = KubeObject, Old = Record<string, unknown>, S = Record<string, unknown>> {
    #private;
    /**
     * Registers fn for each of the triggers; "*" (or no triggers at all:
     * `on(fn)`) makes it the default, for any trigger without a function of
     * its own. A function for validate or mutate is an admission handler's:
     * its context is an {@link AdmissionContext}, its result an
     * {@link AdmissionResult}. A trigger registered twice, or not a
     * trigger, throws.
     */
    on<T extends Trigger | AdmissionTrigger | "*", C extends ContextOf<T, unknown, unknown> = ContextOf<T, O, Old>>(triggers: T | readonly T[], fn: (ctx: C) => Returns<ResultOf<T, O, S>>): this;
    on<C extends Context<unknown, unknown> = Context<O, Old>>(fn: (ctx: C) => Returns<Result<S>>): this;
    /**
     * Runs the function for a binding context (an object, or its JSON text)
     * in-process, and gives the result as the protocol would write it: an
     * error thrown becomes an error result, exactly as in a run. For tests.
     */
    call(context: string | object): Promise<Result<S>>;
    /** As {@link call}, with the line written, the exit status of a process per run and a bug's stack. */
    answer(context: string | object): Promise<Answer<S>>;
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
    run(): Promise<void>;
    /**
     * The Serve loop: reads input a line at a time (a binding context per
     * line), runs each to its end before the next, and writes its result as
     * one line to output, after flushing what the run logged to stderr (and
     * a bug's stack to log). Resolves at the end of input.
     */
    serve(input: InputStream, output: OutputStream, log?: OutputStream): Promise<void>;
}

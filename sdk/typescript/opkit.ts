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
// What the binding context holds.

/** The triggers of a handler on objects, schedules, deliveries and states (enter, exit: docs/states.md). */
export type Trigger =
  | "create"
  | "update"
  | "delete"
  | "resume"
  | "schedule"
  | "when"
  | "requeue"
  | "event"
  | "rerun"
  | "manual"
  | "enter"
  | "exit";

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
export type ScheduleContext = Context<null, null> & { schedule: Schedule };

/** The context of a run on `event`: no object, a delivery whose payload is a P. */
export type EventContext<P = unknown> = Context<null, null> & { event: Delivery<P> };

// ---------------------------------------------------------------------------
// What a run answers.

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
export type MergePatch<T> = { [K in keyof T]?: PatchValue<T[K]> | null };

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
  kind: { group: string; version: string; kind: string };
  resource: { group: string; version: string; resource: string };
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
export type Handler<O = KubeObject, Old = Record<string, unknown>, S = Record<string, unknown>> = (
  ctx: Context<O, Old>,
) => Returns<Result<S>>;

/** A function of an admission handler program. */
export type AdmissionHandler<O = KubeObject> = (ctx: AdmissionContext<O>) => Returns<AdmissionResult<O>>;

// ---------------------------------------------------------------------------
// Errors and helpers.

/** A failure that may pass: the run is retried with back-off (per-run mode exits 75). */
export class TemporaryError extends Error {
  override name = "TemporaryError";
}

/** A failure retrying cannot fix: the object is Stalled at once. */
export class PermanentError extends Error {
  override name = "PermanentError";
}

/** A Normal Event. */
export function normal(reason: string, message: string): Event {
  return { type: "Normal", reason, message };
}

/** A Warning Event. */
export function warning(reason: string, message: string): Event {
  return { type: "Warning", reason, message };
}

/**
 * Writes a line to the run's log (stderr, `opkit logs RUN`): its parts
 * joined by spaces, strings as they are and anything else as JSON. It needs
 * no Node.js types; `console.log` and `console.error` do the same where
 * they are declared (`@types/node`), as stdout is the log's too while a
 * function runs.
 */
export function log(...parts: unknown[]): void {
  process.stderr.write(parts.map((p) => (typeof p === "string" ? p : JSON.stringify(p))).join(" ") + "\n");
}

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
export function duration(parts: DurationParts): string {
  const ms =
    (parts.hours ?? 0) * 3_600_000 + (parts.minutes ?? 0) * 60_000 + (parts.seconds ?? 0) * 1000 + (parts.milliseconds ?? 0);
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
  if (n < 1_000_000n) {
    return `${decimal(n, 1000n)}ms`;
  }
  const h = n / 3_600_000_000n;
  const m = (n / 60_000_000n) % 60n;
  const s = n % 60_000_000n;
  return (h > 0n ? `${h}h` : "") + (m > 0n ? `${m}m` : "") + (s > 0n ? `${decimal(s, 1_000_000n)}s` : "");
}

/** n/unit, exactly, in decimal: unit is a power of ten. */
function decimal(n: bigint, unit: bigint): string {
  const fraction = (n % unit).toString().padStart(unit.toString().length - 1, "0").replace(/0+$/, "");
  return `${n / unit}` + (fraction === "" ? "" : `.${fraction}`);
}

/** The most a Go duration can be, 2^63-1 nanoseconds. */
const maxNanoseconds = 9_223_372_036_854_775_807n;
const maxDuration = "2562047h47m16.854775807s";

const goUnits: ReadonlyMap<string, bigint> = new Map([
  ["ns", 1n],
  ["us", 1_000n],
  ["\u00b5s", 1_000n],
  ["\u03bcs", 1_000n],
  ["ms", 1_000_000n],
  ["s", 1_000_000_000n],
  ["m", 60_000_000_000n],
  ["h", 3_600_000_000_000n],
]);

/**
 * The nanoseconds of a Go duration as Go's time.ParseDuration reads it
 * (fractions rounded down to the nanosecond as it does), or undefined for
 * what it refuses; over 2^63-1 (which it refuses) is returned as it is.
 */
function parseGoDuration(text: string): bigint | undefined {
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

// ---------------------------------------------------------------------------
// The handler table.

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
] as const;

const knownTriggers: readonly string[] = [
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

type Fn = (ctx: never) => unknown;

/**
 * The context of a function for the triggers T: an admission handler's
 * (validate, mutate), or an object's (any other); never for a mix of both.
 */
export type ContextOf<T extends string, O, Old> = [T] extends [AdmissionTrigger]
  ? AdmissionContext<O>
  : [T] extends [Trigger | "*"]
    ? Context<O, Old>
    : never;

/** The result of a function for the triggers T, as {@link ContextOf}. */
export type ResultOf<T extends string, O, S> = [T] extends [AdmissionTrigger]
  ? AdmissionResult<O>
  : [T] extends [Trigger | "*"]
    ? Result<S>
    : never;

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
export class Handlers<O = KubeObject, Old = Record<string, unknown>, S = Record<string, unknown>> {
  readonly #table = new Map<string, Fn>();
  #default: Fn | undefined;
  /** Whether a run's answer is due: a function runs, or its answer is being written. */
  #answering = false;

  /**
   * Registers fn for each of the triggers; "*" (or no triggers at all:
   * `on(fn)`) makes it the default, for any trigger without a function of
   * its own. A function for validate or mutate is an admission handler's:
   * its context is an {@link AdmissionContext}, its result an
   * {@link AdmissionResult}. A trigger registered twice, or not a
   * trigger, throws.
   */
  on<T extends Trigger | AdmissionTrigger | "*", C extends ContextOf<T, unknown, unknown> = ContextOf<T, O, Old>>(
    triggers: T | readonly T[],
    fn: (ctx: C) => Returns<ResultOf<T, O, S>>,
  ): this;
  on<C extends Context<unknown, unknown> = Context<O, Old>>(fn: (ctx: C) => Returns<Result<S>>): this;
  on(first: string | readonly string[] | Fn, second?: Fn): this {
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
      } else {
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
  async call(context: string | object): Promise<Result<S>> {
    return (await this.answer(context)).result;
  }

  /** As {@link call}, with the line written, the exit status of a process per run and a bug's stack. */
  async answer(context: string | object): Promise<Answer<S>> {
    let ctx: unknown;
    if (typeof context === "string") {
      if (context.trim() === "") {
        return failed("the binding context is empty: a handler reads one JSON object on stdin", true);
      }
      try {
        ctx = JSON.parse(context);
      } catch (err) {
        return failed(`the binding context is not valid JSON: ${messageOf(err)}; it begins ${JSON.stringify(context.slice(0, 100))}`, true);
      }
    } else {
      try {
        ctx = JSON.parse(JSON.stringify(context));
      } catch (err) {
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
      return failed(
        `no function for trigger "${trigger}": ${these} (handlers.on("${trigger}", fn) registers one, handlers.on(fn) the default for every trigger)`,
        true,
      );
    }
    let value: unknown;
    try {
      value = await (fn as (ctx: unknown) => unknown)(ctx);
    } catch (err) {
      return thrown(err);
    }
    return written<S>(value, trigger);
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
  async run(): Promise<void> {
    const out = process.stdout;
    const write = out.write;
    const answers: OutputStream = { write: (chunk, callback) => write.call(out, chunk, callback) };
    out.write = (...args: unknown[]): boolean => process.stderr.write.apply(process.stderr, args);
    process.on("beforeExit", () => {
      if (!this.#answering) {
        return;
      }
      const error: ResultError = { message: "the handler's promise never settled: it returned before its work was done" };
      const trace =
        "opkit: the handler's function returned a promise that never settled, and Node.js has nothing left to do that could settle it " +
        "(an await of a promise nothing resolves, a callback never called, an unref'd timer or socket?): the run fails, and is retried";
      answerOn({ result: { error }, line: JSON.stringify({ error }), exitCode: 1, trace }, answers, process.stderr).then(
        () => process.exit(1),
        () => process.exit(1),
      );
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
    } catch (err) {
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
  async serve(input: InputStream, output: OutputStream, log: OutputStream = process.stderr): Promise<void> {
    const { createInterface } = (await import(readlineModule)) as Readline;
    const lines = createInterface({ input, crlfDelay: Infinity, terminal: false });
    for await (const line of lines) {
      await this.#answerOn(line, output, log);
    }
  }

  /** Runs the function for a binding context and writes its answer; gives the exit status of a process per run. */
  async #answerOn(context: string, output: OutputStream, log: OutputStream): Promise<number> {
    this.#answering = true;
    try {
      const a = await this.answer(context);
      await answerOn(a, output, log);
      return a.exitCode;
    } finally {
      this.#answering = false;
    }
  }
}

// ---------------------------------------------------------------------------
// How a run's answer is made and written.

/** A permanent (or temporary) failure's answer. */
function failed<S>(message: string, permanent: boolean): Answer<S> {
  const error: ResultError = permanent ? { message, permanent: true } : { message };
  return { result: { error }, line: JSON.stringify({ error }), exitCode: permanent ? 0 : exitTemporary };
}

/** The answer of an error a function threw. */
function thrown<S>(err: unknown): Answer<S> {
  if (err instanceof PermanentError || err instanceof TemporaryError) {
    const a = failed<S>(err.message || (err instanceof PermanentError ? "permanent error" : "temporary error"), err instanceof PermanentError);
    // Its cause, if it has one, goes to the run's log.
    return err.cause === undefined ? a : { ...a, trace: `${err.name}: ${err.message}${causesOf(err)}` };
  }
  let message: string;
  if (err instanceof Error) {
    let name = err.name;
    const ctor = (err.constructor as { name?: unknown } | undefined)?.name;
    if (name === "Error" && typeof ctor === "string" && ctor !== "" && ctor !== "Error") {
      name = ctor;
    }
    message = err.message ? `${name}: ${err.message}` : name;
  } else {
    message = `a non-Error was thrown: ${describe(err)}`;
  }
  const error = { message };
  return { result: { error }, line: JSON.stringify({ error }), exitCode: 1, trace: traceOf(err) };
}

/** The answer of what a function returned: the result, or why it is not one. */
function written<S>(value: unknown, trigger: string): Answer<S> {
  if (value === undefined || value === null) {
    return { result: {}, line: "{}", exitCode: 0 };
  }
  if (!isObject(value)) {
    return failed(`the handler returned ${kindOf(value)}, not a result object (or nothing)`, true);
  }
  let line: string;
  const notNumbers: string[] = [];
  try {
    line = JSON.stringify(value, jsonNumbers(notNumbers));
  } catch (err) {
    return failed(`the result is not JSON: ${messageOf(err)}`, true);
  }
  if (notNumbers.length > 0) {
    // JSON.stringify wrote them as null, which in a merge patch deletes.
    const shown = notNumbers.length > 10 ? [...notNumbers.slice(0, 10), `and ${notNumbers.length - 10} more`] : notNumbers;
    return failed(shown.join("; "), true);
  }
  const result = JSON.parse(line) as Record<string, unknown>;
  const problems = check(result, trigger);
  if (problems.length > 0) {
    const shown = problems.length > 10 ? [...problems.slice(0, 10), `and ${problems.length - 10} more`] : problems;
    return failed(shown.join("; "), true);
  }
  const bytes = utf8Length(line);
  if (bytes > maxResultBytes) {
    return failed(`the result is ${bytes} bytes, over opkit's limit of ${maxResultBytes} (1 MiB)`, true);
  }
  return { result: result as Result<S>, line, exitCode: 0 };
}

/**
 * A JSON.stringify replacer that adds to problems a problem for each number
 * JSON has not (NaN, Infinity, -Infinity), naming its path in the result.
 */
function jsonNumbers(problems: string[]): (this: unknown, key: string, value: unknown) => unknown {
  // Where each object is in the result: JSON.stringify goes depth first,
  // so an object's path is the one of the place it is written at now.
  const paths = new WeakMap<object, string>();
  return function (this: unknown, key: string, value: unknown): unknown {
    const holder = this;
    const parent = typeof holder === "object" && holder !== null ? (paths.get(holder) ?? "") : "";
    const path =
      parent === "" && !Array.isArray(holder)
        ? key
        : Array.isArray(holder)
          ? `${parent}[${key}]`
          : /^[A-Za-z_][A-Za-z0-9_-]*$/.test(key)
            ? `${parent}.${key}`
            : `${parent}[${JSON.stringify(key)}]`;
    const n = value instanceof Number ? value.valueOf() : value;
    if (typeof n === "number" && !Number.isFinite(n)) {
      problems.push(`result field ${path} is ${n}: not a JSON number`);
    } else if (typeof value === "object" && value !== null) {
      paths.set(value, path);
    }
    return value;
  };
}

const admissionFields = ["allowed", "message", "patch", "warnings", "error"];
const reservedStatus = ["observedGeneration", "conditions", "opkit"];
const goDuration = /^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$/;

/** What is wrong with a result, as written, of a run on trigger. */
function check(result: Record<string, unknown>, trigger: string): string[] {
  const problems: string[] = [];
  const admission = trigger === "validate" || trigger === "mutate";
  for (const [key, value] of Object.entries(result)) {
    if (!(resultFields as readonly string[]).includes(key)) {
      const near = resultFields.find((f) => distance(f.toLowerCase(), key.toLowerCase()) <= 2);
      problems.push(
        `result field ${JSON.stringify(key)} is not one of ${resultFields.join(", ")}` + (near ? ` (did you mean "${near}"?)` : ""),
      );
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
function checkField(key: string, value: unknown): string | undefined {
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
      const problems = value.map((e: unknown, i) => checkEvent(e, i)).filter((p) => p !== undefined);
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

function checkEvent(e: unknown, i: number): string | undefined {
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
async function answerOn(a: Answer<unknown>, output: OutputStream, log: OutputStream): Promise<void> {
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
function writeTo(stream: OutputStream, chunk: string): Promise<void> {
  return new Promise((resolve, reject) => {
    stream.write(chunk, (err) => (err ? reject(err) : resolve()));
  });
}

// ---------------------------------------------------------------------------
// Small things.

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function kindOf(v: unknown): string {
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

function describe(v: unknown): string {
  let s: string;
  try {
    s = typeof v === "string" ? JSON.stringify(v) : String(v);
  } catch {
    s = Object.prototype.toString.call(v);
  }
  return s.length > 100 ? s.slice(0, 100) + "..." : s;
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : describe(err);
}

/** An error's stack, and its causes'. */
function traceOf(err: unknown): string {
  return err instanceof Error ? (err.stack ?? `${err.name}: ${err.message}`) + causesOf(err) : `a non-Error was thrown: ${describe(err)}`;
}

/** An error's causes, a "caused by" line and stack each. */
function causesOf(err: Error): string {
  let causes = "";
  let cause = err.cause;
  for (let depth = 0; cause !== undefined && depth < 10; depth++) {
    causes += `\ncaused by: ${cause instanceof Error ? (cause.stack ?? `${cause.name}: ${cause.message}`) : describe(cause)}`;
    cause = cause instanceof Error ? cause.cause : undefined;
  }
  return causes;
}

/** The edit distance of a and b (for "did you mean"). */
function distance(a: string, b: string): number {
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
function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) {
      n += 1;
    } else if (c < 0x800) {
      n += 2;
    } else if (c >= 0xd800 && c < 0xdc00 && i + 1 < s.length) {
      n += 4;
      i++;
    } else {
      n += 3;
    }
  }
  return n;
}

// ---------------------------------------------------------------------------
// The few parts of Node.js the SDK uses, declared here so that it needs no
// @types/node (these declarations are this module's own, and shadow none of
// a project's).

interface NodeWriteStream {
  write: (...args: unknown[]) => boolean;
}

interface NodeStdin extends InputStream, AsyncIterable<string> {
  setEncoding(encoding: "utf8"): unknown;
}

declare const process: {
  readonly env: { readonly [name: string]: string | undefined };
  readonly stdin: NodeStdin;
  readonly stdout: { write: (...args: unknown[]) => boolean };
  readonly stderr: NodeWriteStream;
  exit(code?: number): never;
  on(event: "beforeExit", listener: () => void): unknown;
};

interface Readline {
  createInterface(options: { input: InputStream; crlfDelay: number; terminal: boolean }): AsyncIterable<string>;
}

/** node:readline, imported when serve runs (a name, so that its types are the ones above). */
const readlineModule: string = "node:readline";

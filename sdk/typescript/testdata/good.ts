// Handlers typed every way the SDK offers: this file must pass
// `tsc --strict --noEmit`. It is not run.
import {
  Handlers,
  PermanentError,
  TemporaryError,
  duration,
  normal,
  warning,
  type AdmissionContext,
  type AdmissionResult,
  type Context,
  type EventContext,
  type Handler,
  type KubeObject,
  type Result,
  type ScheduleContext,
} from "../opkit.js";
import type { Greeting, GreetingSpec, GreetingStatus } from "./greeting.js";

// Generated code names its contexts and results.
type GreetContext = Context<Greeting, GreetingSpec>;
type GreetResult = Result<GreetingStatus>;

const handlers = new Handlers();

// Annotated functions in an untyped table, sync and async.
handlers.on(["create", "update"], (ctx: GreetContext): GreetResult => {
  const { name, language = "en" } = ctx.object.spec;
  const before = ctx.old?.name ?? "nobody";
  for (const change of ctx.diff ?? []) {
    console.error(`${change.op} ${change.path}: ${String(change.old)} -> ${String(change.new)}`);
  }
  return {
    status: { greeting: `Hello, ${name}!`, language, history: [before] },
    events: [normal("Greeted", `said hello to ${name}`)],
    requeueAfter: duration({ minutes: 10 }),
  };
});
handlers.on("resume", async (ctx: GreetContext): Promise<GreetResult> => {
  if (ctx.attempt > 3) {
    throw new PermanentError(`${ctx.object.metadata.name ?? "?"} cannot be greeted`);
  }
  await Promise.resolve();
  return { status: { greeting: null }, events: [warning("Paused", "greeting resumed")], requeueAfter: "30s" };
});
// Returning nothing is the empty result; so is an async function's.
handlers.on("delete", (ctx: GreetContext) => {
  console.error(`goodbye, ${ctx.object.spec.name}`);
});
handlers.on("requeue", async () => {
  throw new TemporaryError("the greeting service is down", { cause: new Error("503") });
});
// The default: any trigger without a function of its own.
handlers.on((ctx) => ({ skipped: true, events: [{ reason: "Nothing", message: ctx.trigger }] }));

// A typed table: its functions' contexts and results need no annotations.
const typed = new Handlers<Greeting, GreetingSpec, GreetingStatus>();
typed.on("create", (ctx) => ({ status: { greeting: `Hello, ${ctx.object.spec.name}!` } }));
typed.on("update", async (ctx) => (ctx.old?.name === ctx.object.spec.name ? { skipped: true } : {}));
typed.on(["enter", "exit"], (ctx): GreetResult => ({ events: [normal(ctx.trigger === "enter" ? "Entered" : "Left", ctx.object.spec.name)] }));
typed.on("*", () => undefined);

// A function typed on its own.
const greet: Handler<Greeting, GreetingSpec, GreetingStatus> = (ctx) => ({
  status: { greeting: ctx.object.spec.language === "fr" ? "Bonjour" : "Hello" },
});
new Handlers().on("when", greet);

// A type that extends KubeObject.
interface Website extends KubeObject {
  spec: { content: string; replicas?: number };
}

// Operator-wide schedules and deliveries have no object.
interface IssueComment {
  comment: { body: string; user: { login: string } };
}
const ops = new Handlers();
ops.on(["schedule", "manual"], (ctx: ScheduleContext): Result => ({
  skipped: ctx.schedule.manual === undefined && ctx.schedule.slot.endsWith("00:00Z"),
}));
ops.on("event", (ctx: EventContext<IssueComment>): Result => {
  const { body, user } = ctx.event.payload.comment;
  if (!body.startsWith("/deploy")) {
    return { skipped: true };
  }
  return user.login === "alice" ? {} : { refuse: `${user.login} may not deploy` };
});

// Admission handlers.
const admission = new Handlers<Website>();
admission.on("validate", (ctx: AdmissionContext<Website>): AdmissionResult<Website> => {
  if (ctx.object?.spec.content.includes("<script>")) {
    return { allowed: false, message: "spec.content must not contain <script>" };
  }
  return { allowed: true, warnings: ctx.dryRun ? ["a dry run"] : [] };
});
admission.on("mutate", (ctx) => ({
  patch: {
    spec: { replicas: ctx.object?.spec.replicas ?? 1 },
    metadata: { annotations: { "demo.example.com/created-by": ctx.userInfo.username ?? "unknown" } },
  },
}));

// In tests: the result as written.
async function check(): Promise<void> {
  const result: Result = await handlers.call({ trigger: "create", object: { spec: { name: "World" } } });
  const answer = await typed.answer('{"trigger": "create", "object": {"spec": {"name": "World"}}}');
  console.log(result.status?.["greeting"], answer.result.status?.greeting, answer.exitCode === 75, answer.line);
}
void check;

void handlers.run();

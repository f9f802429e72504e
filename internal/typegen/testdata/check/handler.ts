// A handler program on the types generated from ../everything.yaml
// (widget.ts beside it when typecheck_test.go checks it): tsc --strict
// must pass it, and fail it once a field is misspelt.
import { Handlers, normal } from "./opkit.js";
import type * as w from "./widget.js";

function describe(spec: w.WidgetSpec): string {
  const size: number = spec.size;
  const email = spec.owner?.contact?.email ?? "";
  const udp = spec.ports.filter((p) => p.protocol === "UDP").map((p) => p.name);
  return `${size} ${spec.mode} ${email} ${udp.join(",")} ${spec.files?.["index.html"] ?? ""}`;
}

const handlers = new Handlers<w.Widget, w.WidgetSpec, w.WidgetStatusUpdate>();

handlers.on(["create", "update"], (ctx: w.ReconcileAllContext): w.ReconcileAllResult => {
  const spec = ctx.object.spec;
  const app = ctx.related?.app;
  const config = ctx.children.config;
  if (ctx.old !== null && ctx.old.size !== spec.size) {
    console.error(`resized from ${ctx.old.size}`);
  }
  const last = `${describe(spec)} ${ctx.related?.pods.length ?? 0} ${app !== undefined} ${config !== undefined}`;
  return { status: { phase: "Ready", lastRun: last, counts: { ports: spec.ports.length } } };
});

handlers.on("delete", (ctx: w.CleanupContext): w.CleanupResult => ({
  status: { phase: "Pending" },
  events: [normal("Cleaned", `${ctx.object.metadata.name ?? ""} ${ctx.related === undefined}`)],
}));

handlers.on("event", (ctx: w.HookContext): w.HookResult => {
  return ctx.event.source === "hook" ? {} : { refuse: "not from the hook" };
});

export const admission = new Handlers<w.Widget>();
admission.on("validate", (ctx: w.CheckContext): w.CheckResult =>
  ctx.object?.spec.mode === "slow" ? { allowed: false, message: "slow widgets are not allowed" } : { allowed: true },
);

handlers.run();

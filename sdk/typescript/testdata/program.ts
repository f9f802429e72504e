// A handler program on the SDK, which the Go tests compile and run as a
// process: per run, and with OPKIT_MODE=Serve. What it does is up to the
// Greeting's spec.name: "temporary", "permanent" and "bug" fail that way.
import { Handlers, PermanentError, TemporaryError, normal, type Context, type Result } from "../opkit.js";
import type { Greeting, GreetingSpec, GreetingStatus } from "./greeting.js";

const known = new Map<string, { text: string }>([["World", { text: "Hello" }], ["Ada", { text: "Bonjour" }]]);
let inFlight = 0;

const handlers = new Handlers();
handlers.on(["create", "update"], async (ctx: Context<Greeting, GreetingSpec>): Promise<Result<GreetingStatus>> => {
  const name = ctx.object.spec.name;
  if (inFlight++ > 0) {
    throw new Error("two runs at once");
  }
  try {
    console.log(`console.log of the run for ${name}`); // to stderr: stdout is the answer's
    console.error(`log of the run for ${name}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
    switch (name) {
      case "temporary":
        throw new TemporaryError("the greeting service is down");
      case "permanent":
        throw new PermanentError("no greeting in Klingon");
    }
    const greeting = `${known.get(name)!.text}, ${name}!`; // "bug": a TypeError
    console.error(`end of the run for ${name}`);
    return { status: { greeting }, events: [normal("Greeted", greeting)] };
  } finally {
    inFlight--;
  }
});
handlers.on("delete", () => {});

void handlers.run();

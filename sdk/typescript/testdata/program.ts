// A handler program on the SDK, which the Go tests compile and run as a
// process: per run, and with OPKIT_MODE=Serve. What it does is up to the
// Greeting's spec.name: "temporary", "permanent" and "bug" fail that way;
// "never" returns a promise nothing settles; "child" runs a child process
// as the SDK's doc says to, and "child inherit" one with inherited stdio;
// "requeue D" returns requeueAfter D. It awaits handlers.run(), as the
// doc's example does; with the argument --no-await, it does not.
import { Handlers, PermanentError, TemporaryError, normal, type Context, type Result } from "../opkit.js";
import type { Greeting, GreetingSpec, GreetingStatus } from "./greeting.js";

// What the program uses of Node.js, which it has no types of.
declare const process: { readonly argv: readonly string[]; readonly execPath: string };
interface ChildProcess {
  on(event: "exit", listener: (code: number | null) => void): unknown;
}
interface ChildProcessModule {
  spawn(command: string, args: readonly string[], options: { stdio: unknown }): ChildProcess;
}
const childProcessModule: string = "node:child_process";

const known = new Map<string, { text: string }>([["World", { text: "Hello" }], ["Ada", { text: "Bonjour" }], ["child", { text: "Hi" }]]);
let inFlight = 0;

/** Runs node -e script with stdio, until it exits. */
async function child(script: string, stdio: unknown): Promise<void> {
  const { spawn } = (await import(childProcessModule)) as ChildProcessModule;
  await new Promise((resolve) => spawn(process.execPath, ["-e", script], { stdio }).on("exit", resolve));
}

const handlers = new Handlers();
handlers.on(["create", "update"], async (ctx: Context<Greeting, GreetingSpec>): Promise<Result<GreetingStatus>> => {
  const name = ctx.object.spec.name;
  if (name.startsWith("requeue ")) {
    return { requeueAfter: name.slice("requeue ".length) };
  }
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
      case "never":
        return new Promise<Result<GreetingStatus>>(() => {});
      case "child":
        // Its stdin nothing (in Serve mode, stdin is the next binding
        // context's), its stdout and stderr the run's log.
        await child(`process.stdout.write("stdout of the child of the run for ${name}\\n")`, ["ignore", 2, 2]);
        break;
      case "child inherit":
        // What the SDK cannot keep off stdout: a child's inherited fd 1.
        await child(`process.stdout.write("stdout of the child of the run for ${name}\\n")`, ["ignore", "inherit", "inherit"]);
        return {};
    }
    const greeting = `${known.get(name)!.text}, ${name}!`; // "bug": a TypeError
    console.error(`end of the run for ${name}`);
    return { status: { greeting }, events: [normal("Greeted", greeting)] };
  } finally {
    inFlight--;
  }
});
handlers.on("delete", () => {});

if (process.argv.includes("--no-await")) {
  void handlers.run(); // as the SDK's doc had it
} else {
  await handlers.run();
}

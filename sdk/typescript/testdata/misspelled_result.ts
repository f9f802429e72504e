// A result field misspelled: the type check must fail, naming "statsu".
import { Handlers, type Context, type Result } from "../opkit.js";
import type { Greeting, GreetingSpec, GreetingStatus } from "./greeting.js";

const handlers = new Handlers();
handlers.on(["create", "update"], (ctx: Context<Greeting, GreetingSpec>): Result<GreetingStatus> => ({
  statsu: { greeting: `Hello, ${ctx.object.spec.name}!` },
}));
void handlers.run();

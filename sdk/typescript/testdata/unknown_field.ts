// A field the spec does not have: the type check must fail, naming "nmae".
import { Handlers, type Context, type Result } from "../opkit.js";
import type { Greeting, GreetingSpec, GreetingStatus } from "./greeting.js";

const handlers = new Handlers();
handlers.on(["create", "update"], (ctx: Context<Greeting, GreetingSpec>): Result<GreetingStatus> => ({
  status: { greeting: `Hello, ${ctx.object.spec.nmae}!` },
}));
void handlers.run();

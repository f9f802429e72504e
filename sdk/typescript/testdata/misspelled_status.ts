// A status field misspelled, in a table typed with the Greeting's types and
// a function with no annotations of its own: the type check must fail,
// naming "greetng".
import { Handlers } from "../opkit.js";
import type { Greeting, GreetingSpec, GreetingStatus } from "./greeting.js";

const handlers = new Handlers<Greeting, GreetingSpec, GreetingStatus>();
handlers.on("create", (ctx) => ({
  status: { greetng: `Hello, ${ctx.object.spec.name}!` },
}));
void handlers.run();

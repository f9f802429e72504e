package handler_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/opkit-dev/opkit/pkg/handler"
)

// The Greeting custom resource's types, as `opkit generate types` writes
// them, or by hand.
type (
	GreetingSpec struct {
		Name     string `json:"name"`
		Language string `json:"language,omitempty"`
	}
	GreetingStatus struct {
		Greeting string `json:"greeting,omitempty"`
	}
	Greeting = handler.Object[GreetingSpec, GreetingStatus]
)

var hello = map[string]string{"en": "Hello", "fr": "Bonjour", "de": "Hallo"}

// greet is the handler of create and update: it writes the greeting to
// the status and posts an Event.
func greet(ctx context.Context, c *handler.Context[Greeting, GreetingSpec]) (*handler.Result[GreetingStatus], error) {
	spec := c.Object.Spec
	word, ok := hello[spec.Language]
	if !ok {
		// Retrying cannot fix the spec: the object is Stalled until it changes.
		return nil, handler.Permanent(fmt.Errorf("spec.language %q is not one of en, fr, de", spec.Language))
	}
	g := fmt.Sprintf("%s, %s!", word, spec.Name)
	handler.Logf(ctx, "%s (attempt %d): %s", c.Trigger, c.Attempt, g)
	return &handler.Result[GreetingStatus]{
		Status: &GreetingStatus{Greeting: g},
		Events: []handler.Event{handler.Normal("Greeted", g)},
	}, nil
}

// greetings is the program's table; its main is
//
//	func main() { handler.Main(greetings) }
var greetings = handler.Handlers[Greeting, GreetingSpec, GreetingStatus]{
	handler.OnCreate: greet,
	handler.OnUpdate: greet,
}

// A test of a handler calls its table as opkit would, and reads the
// result the program would write.
func ExampleHandlers_Call() {
	ctx := handler.WithLog(context.Background(), os.Stdout) // a test would give t.Output()
	res := greetings.Call(ctx, &handler.Context[Greeting, GreetingSpec]{
		Trigger: handler.OnCreate,
		Attempt: 1,
		Object:  &Greeting{Spec: GreetingSpec{Name: "World", Language: "fr"}},
	})
	fmt.Println(res.Status.Greeting, res.Events[0].Reason)

	res = greetings.Call(ctx, &handler.Context[Greeting, GreetingSpec]{
		Trigger: handler.OnCreate,
		Object:  &Greeting{Spec: GreetingSpec{Name: "World", Language: "xx"}},
	})
	fmt.Println(res.Error.Message, res.Error.Permanent)
	// Output:
	// create (attempt 1): Bonjour, World!
	// Bonjour, World! Greeted
	// spec.language "xx" is not one of en, fr, de true
}

// In mode Serve a program answers a binding context per line with a
// result per line, each after its log.
func ExampleServe() {
	in := strings.NewReader(`{"trigger": "create", "attempt": 1, "object": {"spec": {"name": "World", "language": "de"}}}
{"trigger": "delete", "attempt": 1, "object": {"spec": {"name": "World"}}}
`)
	if err := handler.Serve(context.Background(), greetings, in, os.Stdout, os.Stdout); err != nil {
		fmt.Println(err)
	}
	// Output:
	// create (attempt 1): Hallo, World!
	// {"status":{"greeting":"Hallo, World!"},"events":[{"type":"Normal","reason":"Greeted","message":"Hallo, World!"}]}
	// {"error":{"message":"this program has no function for trigger \"delete\" and no default: it handles create, update","permanent":true}}
}

// Errors say whether a retry may help.
func ExampleTemporary() {
	release := func(context.Context, *handler.Context[Greeting, GreetingSpec]) (*handler.Result[GreetingStatus], error) {
		return nil, handler.Temporary(errors.New("the DNS service is down"))
	}
	h := handler.Handlers[Greeting, GreetingSpec, GreetingStatus]{handler.OnDelete: release}
	exit := handler.Once(context.Background(), h, strings.NewReader(`{"trigger": "delete"}`), os.Stdout, os.Stderr)
	fmt.Println("exit", exit)
	// Output:
	// {"error":{"message":"the DNS service is down"}}
	// exit 75
}

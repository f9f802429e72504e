// Command goodbye is a delete handler in Go, on opkit's handler SDK
// (package pkg/handler): the SDK reads the binding context from stdin
// into the Greeting's types, calls goodbye, and writes its result to
// stdout. A real one would release what the object held (a DNS record, a
// bucket); it must be idempotent: after a crash it runs again with the
// same idempotency key.
package main

import (
	"context"

	"github.com/opkit-dev/opkit/pkg/handler"
)

// The Greeting's spec and status, as operator.yaml declares them.
type (
	greetingSpec struct {
		Name     string `json:"name"`
		Language string `json:"language,omitempty"`
	}
	greetingStatus struct {
		Greeting string `json:"greeting,omitempty"`
	}
	greeting = handler.Object[greetingSpec, greetingStatus]
)

func main() {
	handler.Main(handler.Handlers[greeting, greetingSpec, greetingStatus]{
		handler.OnDelete: goodbye,
	})
}

// goodbye logs the Greeting it sees off. Returning nil is the empty
// result: done, opkit may let the Greeting go. An error would hold it:
// handler.Temporary(err) to be retried, handler.Permanent(err) to stall.
func goodbye(ctx context.Context, c *handler.Context[greeting, greetingSpec]) (*handler.Result[greetingStatus], error) {
	m := c.Object.Metadata
	handler.Logf(ctx, "goodbye, %s/%s (%s, key %s)", m.Namespace, m.Name, c.Trigger, c.IdempotencyKey)
	return nil, nil
}

package executor

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/jsondepth"
)

// Func adapts a function to an Executor.
type Func func(ctx context.Context, req Request) (*Result, error)

// Run calls f.
func (f Func) Run(ctx context.Context, req Request) (*Result, error) { return f(ctx, req) }

// Registry builds each handler's executor by the name of its action
// (definition.Handler.Action: exec, job, http). A handler whose action has
// no entry is an error, never routed to another kind of executor.
type Registry map[string]func(h *definition.Handler) Executor

// For returns the executor of handler h.
func (r Registry) For(h *definition.Handler) (Executor, error) {
	build, ok := r[h.Action()]
	if !ok {
		known := make([]string, 0, len(r))
		for name := range r {
			known = append(known, name)
		}
		slices.Sort(known)
		return nil, fmt.Errorf("handler %s: no executor for action %q (this engine runs %s)", h.Name, h.Action(), strings.Join(known, ", "))
	}
	return deepContextGuard{build(h)}, nil
}

// deepContextGuard runs an executor unless the binding context nests
// deeper than jsondepth.MaxContext: a handler's JSON decoder may have a
// limit of its own (Ruby's is 100), and an object or delivery that deep
// is a fault to name, not to pass on.
type deepContextGuard struct{ Executor }

func (g deepContextGuard) Run(ctx context.Context, req Request) (*Result, error) {
	if err := jsondepth.Check(req.Input, jsondepth.MaxContext); err != nil {
		return nil, &Failure{Permanent: true, Message: fmt.Sprintf("the binding context is %v, past opkit's limit of %d for the object, its children, related objects or a delivery's payload in it: the handler did not start", err, jsondepth.Max)}
	}
	return g.Executor.Run(ctx, req)
}

// Close stops what the executor keeps running between runs (a Serve
// handler's processes); other executors keep nothing.
func (g deepContextGuard) Close() {
	if c, ok := g.Executor.(interface{ Close() }); ok {
		c.Close()
	}
}

// Warm starts what the executor keeps running between runs ahead of
// them (a Serve handler's processes: Serve.Warm); other executors keep
// nothing.
func (g deepContextGuard) Warm(ctx context.Context, handler string) {
	if w, ok := g.Executor.(warmer); ok {
		w.Warm(ctx, handler)
	}
}

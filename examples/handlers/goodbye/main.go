// Command goodbye is a delete handler in Go: it reads the binding context
// from stdin, logs to stderr and writes a result to stdout. A real one
// would release what the object held (a DNS record, a bucket); it must be
// idempotent: after a crash it runs again with the same idempotency key.
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

type bindingContext struct {
	Trigger        string `json:"trigger"`
	IdempotencyKey string `json:"idempotencyKey"`
	Object         struct {
		Metadata struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		} `json:"metadata"`
	} `json:"object"`
}

type result struct {
	Error *resultError `json:"error,omitempty"`
}

type resultError struct {
	Message   string `json:"message"`
	Permanent bool   `json:"permanent,omitempty"`
}

func main() {
	var ctx bindingContext
	if err := json.NewDecoder(os.Stdin).Decode(&ctx); err != nil {
		// Retrying cannot fix a context this handler cannot read.
		_ = json.NewEncoder(os.Stdout).Encode(result{Error: &resultError{Message: "reading the binding context: " + err.Error(), Permanent: true}})
		os.Exit(1)
	}
	m := ctx.Object.Metadata
	fmt.Fprintf(os.Stderr, "goodbye, %s/%s (%s, key %s)\n", m.Namespace, m.Name, ctx.Trigger, ctx.IdempotencyKey)
	if err := json.NewEncoder(os.Stdout).Encode(result{}); err != nil {
		os.Exit(1)
	}
}

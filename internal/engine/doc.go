// Package engine is the middle of opkit's pipeline, from a change to an
// archived run (docs/architecture.md draws it whole):
//
//	changes   the drivers, in this package: the reconcile of custom
//	          resources, their children and related objects (reconcile.go,
//	          related.go), watches (watch.go), the calendar of
//	          operator-wide schedules (calendar.go), due times on the
//	          clock (clock.go), webhook deliveries (hooks.go, checked by
//	          package source, queued by package delivery), decisions and
//	          retries (annotations read by the reconcile), the start
//	     │
//	     ▼
//	cause     package cause (Decide), package statemachine (Next): pure
//	     │
//	     ▼
//	run       the runner (handlers.go, oprun.go, stubs.go): slots, the
//	     │    object's memory, binding contexts, logs; to move to package
//	     │    run (issue 35)
//	     ▼
//	executor  package executor: exec, job, http
//	     │
//	     ▼
//	outcome   package archive, the object's status (status.opkit,
//	          status.state, conditions), Kubernetes Events, metrics
//
// Package stack assembles an engine with its archive and console for
// every caller; package layers' test keeps the arrows one-way.
package engine

// Package engine runs the operators declared by compiled definitions: for
// each it installs the custom resource's CRD and runs a controller that
// keeps every custom resource's children converged and its status current.
// It is the middle of opkit's pipeline, from a change to an archived run
// (docs/architecture.md draws it whole):
//
//	changes   the drivers: the reconcile of custom resources, their
//	          children and related objects (package converge),
//	          watches (package watch), the calendar of operator-wide schedules
//	          (package calendar), due times on the clock (clock.go), webhook
//	          deliveries and the consumed sources' messages (package
//	          delivery, checked by package source), decisions and retries (annotations read
//	          by the reconcile), the start
//	     │
//	     ▼
//	cause     package cause (Decide), package statemachine (Next): pure
//	     │
//	     ▼
//	run       package run: the runner, slots, the object's memory,
//	     │    binding contexts, logs; package lifecycle for spec.states
//	     ▼
//	executor  package executor: exec, job, http
//	     │
//	     ▼
//	outcome   package archive, the object's status (status.opkit,
//	          status.state, conditions), Kubernetes Events, metrics
//
// Package stack assembles an engine with its archive and console for
// every caller; package layers' test keeps the arrows one-way.
//
// # The engine wires; it does not do
//
// A feature gets a package of its own, which knows the engine only
// through what it is given (a Config, a small interface), and the engine
// assembles it: deliveries, consumers and redeliveries (package
// delivery), staged rollouts (package rollout), watches (package watch),
// operator-wide schedules and run now (package calendar), the life cycle
// (package lifecycle), admission calls (package admission), opkit's
// finalizer (package finalizer). What is left here is the controllers'
// coming and going, the reconcile of custom resources and their
// children, the Operator watch, and the listeners' wiring;
// docs/architecture.md lists every package.
//
// # Controllers that come and go
//
// controller-runtime assumes the set of controllers is fixed when the
// manager starts: a controller added to a manager can never be removed. kro
// answers this with its own dynamic controller and queue. opkit keeps
// controller-runtime's queue, rate limiting and reconcile loop, which are
// proven, and uses them as unmanaged controllers: one manager owns the
// shared cache, and each definition gets its own controller
// (controller.NewTypedUnmanaged) started with its own context. Removing a
// definition cancels that context, which stops the controller's workers,
// and removes the informer of its custom resource from the cache. Changing
// a definition replaces its controller.
//
// # Reconcile
//
// Level-triggered: each reconcile renders every child from the current
// custom resource and the current children, in dependency order; a child
// whose rendered fields already hold in the live object is not written
// (so nothing is written at steady state); otherwise it is server-side
// applied with field manager "opkit" and a controller ownerReference. A
// child the API refuses to update because a field is immutable is deleted
// and re-created. The status fields are evaluated after the children, with
// observedGeneration and the conditions Ready and Degraded, and written
// through the status subresource only when they changed. Kubernetes Events
// on the custom resource record child changes and errors.
//
// Reads come from the shared cache (package informer: the objects without
// managedFields, unstructured ones packed); only the kinds the
// definitions name are watched. Children are applied, and statuses
// patched, asking for the object's metadata back, not the whole object.
// Before a definition runs, its children are typed by the schemas the API
// server publishes (definition.CompileWithSchemas), so that an expression
// reading a field a child's kind does not have is refused, not failed at
// run time.
//
// # Pruning and related objects
//
// A child no longer rendered is found in the custom resource's inventory
// (package inventory) and deleted, if the custom resource still controls
// it; one that cannot be rendered now keeps its entry. Related objects
// (spec.related) are read from a cache at each reconcile, before the
// children, never written; a change of one reconciles exactly the custom
// resources that refer to it (packages converge and related).
//
// # Watches and operator-wide schedules
//
// An operator without a custom resource either watches objects of any
// kind that it neither owns nor writes to (spec.watch: its own cache,
// restricted to its namespaces and selector; each object's handler state
// kept in the run archive, loaded at start, so what changed or went while
// no engine ran is handled once: package watch), or runs its handlers on
// operator-wide schedules, once per slot, the last slot kept in the
// archive (package calendar, which answers the requests to run one now
// too). Both share the runner of custom resources: its
// executors, slots, archive writes and metrics. No CRD is installed.
//
// # A CRD deleted under a running operator
//
// Deleting a CRD deletes its custom resources (their delete handlers run
// as for any deletion), then the CRD. The engine watches the metadata of
// every CRD and installs a running operator's CRD again once it is gone,
// then restarts that operator's controller; it says so in its log, in
// Events and, for an Operator read from the cluster, in its Ready
// condition (reason CRDDeleted) until the CRD is back (crdguard.go).
//
// # Versions still stored
//
// Apply refuses a definition that drops a version its installed CRD
// still lists in status.storedVersions (definition.CheckStoredVersions).
// With Options.MigrateStorage, a CRD just applied whose storedVersions
// holds more than its storage version is migrated (package migrate) in
// the background while its operator runs, once per Apply, said through
// Options.Notice (migrate.go).
//
// # Handlers
//
// Each reconcile, after the children, asks package cause which handler
// has a run to make: triggers come from the object's state — its
// generation against the generation each handler last succeeded for
// (status.opkit.handlers), the related fields it names, its
// deletionTimestamp, the schedule — never from watch events. Runs execute in their own goroutines through package
// executor, one at a time per object and at most Options.MaxConcurrentRuns
// per operator; a run's end wakes its object, and that object's reconcile
// records the outcome (status patch, events, retry state, the archive), so
// that every write to an object is made by its one reconcile worker. A
// handler that succeeded for a generation does not run again for it; a run
// interrupted by a crash runs again with the same idempotency key. The
// finalizer opkit.dev/<operator> is held while an operator has delete
// handlers, changed only by resourceVersion-guarded JSON patches.
//
// # Admission handlers
//
// Handlers on validate or mutate are called by the API server through
// the engine's webhook server (package webhook, Options.Webhook) and
// answered by package admission. The engine applies a Validating and a
// MutatingWebhookConfiguration per operator that has them, with the
// server's caBundle, again at each rotation, and deletes them with the
// operator (package webhook's Operators).
//
// # Conversion
//
// An operator whose versions declare conversion has its CRD installed
// with the Webhook strategy, pointing at the same server's
// /convert/<operator>, which converts by the declared expressions
// (package conversion); the CRD's caBundle is applied again at each
// rotation. An engine without a webhook server refuses such an operator
// (package webhook's Operators).
//
// # One namespace, a test's clock, stubs
//
// What a test runner (opkit test) needs. Options.Namespace makes an
// engine act in one namespace only: its caches hold that namespace's
// objects, a watch watches it whatever its definition's namespaces, and
// an operator every engine would see (a cluster-scoped custom resource
// or watched kind) is refused, so that engines running the same
// definitions run side by side, one per namespace (scope.go).
// Options.Clock times what the definitions schedule (schedules,
// requeues, retry delays, operator-wide slots); controller-runtime
// requeues in real time, so a test that steps a fake clock calls
// ClockStepped, which reconciles every object again and wakes the
// calendars (clock.go). Options.Stubs replaces handlers' actions with
// executors of the test's own, such as executor.Canned; their runs are
// otherwise real: archived, retried, Stalled, their results written
// (package run's Stubs).
//
// # Metrics and health
//
// Options.MetricsAddr serves /metrics (controller-runtime's and opkit's:
// runs, and each operator's objects by condition, package gauges),
// /healthz and /readyz, which fails while the API server or the archive
// does (health.go, package health, docs/metrics.md).
package engine

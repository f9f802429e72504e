package engine

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/executor"
)

// DefaultRunWait is Options.RunWait's default: longer than most exec and
// HTTP handlers take (a fork, a request), short enough that a worker
// waiting for a longer one is soon free.
const DefaultRunWait = 100 * time.Millisecond

// Options configures [New].
type Options struct {
	// Config is the client configuration. Required. Unless it sets QPS,
	// the client is not rate limited: the API server's priority and
	// fairness protects it (as controller-runtime's GetConfig does). Its
	// UserAgent defaults to "opkit-engine".
	Config *rest.Config
	// Workers is the number of concurrent reconciles per operator. Defaults
	// to 8: reconciles mostly wait for the API server (see bench/). An
	// operator of custom resources with handlers gets MaxConcurrentRuns/2
	// more, unless RunWait is negative: its reconciles also wait for the
	// runs they start.
	Workers int
	// MetricsAddr is the address New binds to serve /metrics (Prometheus),
	// /healthz and /readyz, e.g. "127.0.0.1:7381" (port 0: any free one,
	// see Engine.MetricsAddr); "0" serves none. Defaults to "0".
	MetricsAddr string
	// HooksAddr is the address the webhook deliveries of the operators'
	// sources are received on, POST /hooks/<operator>/<source> (delivery.Receiver),
	// e.g. "127.0.0.1:7382" (port 0: any free one, see Engine.HooksAddr).
	// It is bound when the first operator with a source is applied; "0"
	// or "" serves none, and such an operator is refused. Defaults to "0".
	HooksAddr string
	// ConsumeNothing keeps the engine from reaching the consumed sources
	// (githubPoll, nats, kafka): their messages come only through
	// Engine.Inject. opkit test's engine, whose scenarios play the
	// sources' senders, sets it.
	ConsumeNothing bool
	// Archive records handler runs (and webhook deliveries, and what the
	// operators remember of what they do not own). Required by definitions
	// with handlers or sources.
	// At Run, runs it still shows Running (their engine stopped) are
	// marked Cancelled; they run again, with the same idempotency key.
	Archive archive.Recorder
	// Retention bounds the archive; it is pruned at start and hourly.
	// Defaults to no bound.
	Retention archive.Retention
	// MaxConcurrentRuns bounds the handler runs each operator executes at
	// once; runs beyond it wait for a slot. Defaults to 16.
	MaxConcurrentRuns int
	// RunWait is how long an object's reconcile waits for a handler run
	// it starts, when a slot is free, so that a run that ends in time is
	// recorded by that reconcile: a custom resource's with its result in
	// the reconcile's one status write instead of a write of its own
	// (docs/handlers.md), a watched object's without a reconcile its end
	// wakes. Defaults to DefaultRunWait; negative: the reconcile never
	// waits. A Job handler's run is never waited for.
	RunWait time.Duration
	// RunEvents posts a HandlerStarted and a HandlerSucceeded Event for
	// each run, as well as the failures'. Defaults to false: a run's
	// Events are HandlerFailed and HandlerGaveUp, and those its result
	// asks for (package run's Config.RunEvents).
	RunEvents bool
	// JobTolerations are added to the pods of job handlers (opkit dev adds
	// the dev node's).
	JobTolerations []corev1.Toleration
	// ConsoleURL is the console's public base URL, e.g.
	// https://opkit.example.com: each handler Event then links its run's
	// page, <ConsoleURL>/runs/<id>. Empty: Events name the run id alone.
	ConsoleURL string
	// RunFinished, when set, is called with each run once the archive
	// records its end, whatever its outcome (opkit dev prints the failed
	// ones). It is called from the object's reconcile: it must not block.
	RunFinished func(archive.Run)
	// AdmissionFinalizers makes the API server add opkit's finalizer to
	// each custom resource of an operator with delete handlers as it is
	// created (a MutatingAdmissionPolicy, Kubernetes 1.36+), so that no
	// deletion can pass unseen, even one made while the engine is away.
	// The trade-off: the engine needs rights on admission policies, and
	// while no engine runs, deleting such objects waits for one.
	AdmissionFinalizers bool
	// LeaderElection, when set, makes the engine one of several replicas
	// of which one, the holder of a Lease, acts: a standby starts no
	// operator, runs no handler, neither cancels the runs it finds
	// Running in a shared archive nor prunes it, and binds no hooks
	// listener: it receives no webhook deliveries (leader.go).
	LeaderElection *LeaderElection
	// HooksEndpoint, when set, names the EndpointSlice of the hooks
	// Service, which the engine that acts writes with its Pod's address
	// once its hooks listener is bound, so that deliveries reach it and no
	// standby (package endpoint).
	HooksEndpoint *HooksEndpoint
	// Notice, when set, is called with one line at each change of the
	// engine's health: the API server unreachable or not ready, and back
	// after how long; the archive refusing to record runs, and recording
	// them again; a storage migration's start, progress and summary
	// (MigrateStorage). It must not block. Defaults to none: migrations
	// are said in the engine's log instead.
	Notice func(line string)
	// Namespace, when set, is the one namespace the engine acts in, so
	// that engines running the same definitions side by side, each in its
	// own namespace (opkit test runs one per scenario), never act on each
	// other's objects (scope.go). Its caches of custom resources,
	// children and related objects hold that namespace's objects only
	// (cluster-scoped kinds are still cached cluster-wide), and nothing
	// elsewhere is reconciled: a child or a related object in another
	// namespace fails its custom resource's reconcile, saying so. A
	// watch (spec.watch) watches this namespace, whatever namespaces its
	// definition names. Refused: an operator whose custom resource or
	// watched kind is cluster-scoped, which every engine would see. The
	// CRDs are shared (applied alike by every engine), and with
	// AdmissionFinalizers each engine has its own policy, bound to its
	// namespace. Operator-wide schedules, for no object, run in every
	// engine. Defaults to "": every namespace.
	Namespace string
	// OperatorSelector, when set, is which Operator objects of the
	// cluster WatchOperators runs: those whose labels it matches (opkit
	// run --selector). An Operator that stops matching is removed as a
	// deleted one is (its CRD and custom resources stay), and one that
	// starts matching is run; the others are not read further, their
	// status left to the engine that runs them. Engines that share a
	// cluster each run their team's Operators this way. Defaults to nil:
	// every Operator.
	OperatorSelector labels.Selector
	// Clock times what the definitions schedule: per-object schedules
	// (schedule.every, cron) and requeues, the retry delays of failed
	// runs, operator-wide schedules, and the times recorded for them
	// (nextRetryAt, lastScheduled, requeueAt) (clock.go). Health checks,
	// log flushing, leases, timeouts, and a run's recorded start and end
	// keep real time. A test passes a k8s.io/utils/clock/testing
	// FakeClock, steps it, then calls ClockStepped: what came due by the
	// clock's new time then runs promptly. A per-object schedule counts
	// from the object's creationTimestamp, which is the API server's
	// (real) time: a fake clock behind real time reaches a slot that much
	// later (a test that steps by whole periods first sets its clock to
	// the real time if it lags). Defaults to the real clock.
	Clock clock.Clock
	// Webhook, when set, serves the operators' admission handlers (on
	// validate or mutate) and conversions over HTTPS, with certificates
	// the engine makes and rotates (package webhook). An engine of one
	// Namespace deletes its webhook configurations when it stops (a
	// CRD's conversion stays); one of every namespace leaves them, for
	// the next. Defaults to nil: none is served, and an operator with
	// admission handlers or conversion is refused.
	Webhook *WebhookOptions
	// RunsAPI, when set, serves the archive as the aggregated API
	// runs.opkit.dev/v1alpha1 (kubectl get runs), on every replica, and
	// registers its APIService (runsapi.go). Defaults to nil: none.
	RunsAPI *RunsAPIOptions
	// Runners, when set, runs exec handlers that name an image
	// (exec.image) in runner Pods of that image (package runners); a run
	// whose runner is lost mid-run is recorded Cancelled and runs again
	// with its key (runnerlost_test.go). Defaults to nil: such handlers run on
	// the engine's host, as those without an image.
	Runners executor.Dispatcher
	// RunnersEndpoint, when set, names the EndpointSlice of the runners
	// Service, which the engine that acts writes with its Pod's address
	// and the runner API's port, so that runners pull runs from it and no
	// standby (package endpoint).
	RunnersEndpoint *RunnersEndpoint
	// Stubs, when set, replaces the actions of the handlers it names with
	// its executors, for tests (package run's Stubs); it may change while the engine
	// runs. Defaults to none.
	Stubs *Stubs
	// AllowBreaking makes Apply change an installed CRD even where the
	// change breaks its clients or loses data (compat.Compare: a field
	// removed, a type narrowed, a version still stored removed...).
	// Defaults to false: such a definition is refused with a
	// *BreakingChangeError naming each change, before anything is
	// changed, and the operator's running version, if any, keeps running
	// (breaking.go).
	AllowBreaking bool
	// MigrateStorage makes the engine migrate the stored objects of an
	// operator's CRD (package migrate) when it applies the CRD and finds
	// its status.storedVersions holding more than the storage version, or
	// a migration interrupted: in the background, said in the engine's
	// log, while the operator runs (migrate.go). The migration covers
	// every namespace, whatever Namespace says, and needs update rights on
	// the custom resources and on customresourcedefinitions/status.
	// Defaults to false: `opkit migrate` does it by hand.
	MigrateStorage bool
	// MigrateQPS bounds a migration's requests a second. Defaults to
	// migrate.DefaultQPS (50).
	MigrateQPS float64
}

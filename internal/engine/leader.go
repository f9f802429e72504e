package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// With leader election, several engines run the same operators against
// one cluster and one shared archive, and one of them acts: the holder of
// a coordination.k8s.io Lease, renewed every RetryPeriod. The others are
// standbys: their caches run, /healthz and /readyz answer, and nothing
// else does until one of them takes the Lease, which it can once the
// leader has not renewed it for LeaseDuration (a leader stopped with
// SIGTERM releases it at once). A leader that cannot renew it within
// RenewDeadline stops: its process must exit (opkit run does).
//
// A new leader first marks the runs it finds Running in the archive
// Cancelled, then starts the operators: each interrupted run runs again
// with its idempotency key, and a job handler's Job is found again by its
// name rather than started twice. A standby never does either, nor does
// it prune the archive.

// LeaderElection configures the election of the acting engine.
type LeaderElection struct {
	// Namespace holds the Lease. Required.
	Namespace string
	// Name is the Lease's name. Defaults to opkit-engine. A replica is
	// named in it by its host name (a Pod's name) and a random suffix.
	Name string
	// LeaseDuration is how long a standby waits after the leader's last
	// renewal before it takes over. Defaults to 8s: a leader SIGKILLed
	// is replaced, and its first run started, within 15s.
	LeaseDuration time.Duration
	// RenewDeadline is how long a leader tries to renew before it gives up
	// and stops. Defaults to 6s.
	RenewDeadline time.Duration
	// RetryPeriod is how often the Lease is renewed or tried. Defaults to
	// 1s.
	RetryPeriod time.Duration
}

// Leader election defaults.
const (
	DefaultLeaseName     = "opkit-engine"
	DefaultLeaseDuration = 8 * time.Second
	DefaultRenewDeadline = 6 * time.Second
	DefaultRetryPeriod   = 1 * time.Second
)

// configure sets the manager's leader election from le, defaulted.
func (le *LeaderElection) configure(o *manager.Options) error {
	if le.Namespace == "" {
		return errors.New("engine: leader election needs the namespace of its Lease")
	}
	if le.Name == "" {
		le.Name = DefaultLeaseName
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&le.LeaseDuration, DefaultLeaseDuration}, {&le.RenewDeadline, DefaultRenewDeadline}, {&le.RetryPeriod, DefaultRetryPeriod}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if le.RenewDeadline >= le.LeaseDuration || le.RetryPeriod >= le.RenewDeadline {
		return fmt.Errorf("engine: leader election wants retry period (%s) < renew deadline (%s) < lease duration (%s)", le.RetryPeriod, le.RenewDeadline, le.LeaseDuration)
	}
	o.LeaderElection = true
	o.LeaderElectionResourceLock = "leases"
	o.LeaderElectionNamespace = le.Namespace
	o.LeaderElectionID = le.Name
	o.LeaderElectionReleaseOnCancel = true
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = &le.LeaseDuration, &le.RenewDeadline, &le.RetryPeriod
	return nil
}

// leading records that this engine acts: at once without leader
// election, once it took the Lease with it.
func (e *Engine) leading() {
	handlerMetrics().leader.Set(1)
	if le := e.opts.LeaderElection; le != nil {
		e.mgr.GetLogger().Info("leading: this engine holds the Lease and acts", "lease", le.Namespace+"/"+le.Name)
	}
}

// Leading reports whether the engine acts: it holds the Lease, or it
// runs without leader election.
func (e *Engine) Leading() bool {
	select {
	case <-e.started:
		return true
	default:
		return false
	}
}

// Standby says why the engine does not act: it is a standby of leader
// election, waiting for the Lease another replica holds (named, with its
// last renewal). It is "" while the engine acts, and without leader
// election.
func (e *Engine) Standby(ctx context.Context) string { return e.health.lease.Standby(ctx) }

// everyReplica is a runnable every replica runs, leader or standby.
type everyReplica func(context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (everyReplica) NeedLeaderElection() bool { return false }

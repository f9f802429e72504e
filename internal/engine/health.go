package engine

import (
	"errors"
	"net/http"
	"sort"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/opkit-dev/opkit/internal/health"
)

// The engine serves /metrics, /healthz, /readyz and /leader on
// Options.MetricsAddr (package health says what each answers). Its
// /readyz checks are "engine" (Run has started the manager and not
// returned, or a standby's cache runs), "api-server" (the engine's last
// check of the API server's /readyz, every health.CheckEvery, succeeded;
// apihealth.go), "sources" (each webhook source's listener serves) and,
// with an archive, "archive" (it records runs; package health's
// ArchiveWriter).

// served is what the engine serves of its health: the address, and the
// last check of the API server that /readyz reports.
type served struct {
	addr  string // the address MetricsAddr bound; "" when it serves none
	api   health.API
	lease *health.Lease // which replica leads
}

// serve binds Options.MetricsAddr and adds its server to the manager.
func (e *Engine) serve() error {
	e.health.lease = &health.Lease{Reader: e.mgr.GetAPIReader(), Leading: e.Leading}
	if le := e.opts.LeaderElection; le != nil {
		e.health.lease.Namespace, e.health.lease.Name = le.Namespace, le.Name
	}
	addr := e.opts.MetricsAddr
	if addr == "0" || addr == "" {
		return nil
	}
	srv, bound, err := health.Serve(addr, e.readyChecks(), e.health.lease)
	if err != nil {
		return err
	}
	if err := e.mgr.Add(srv); err != nil {
		_ = srv.Listener.Close()
		return err
	}
	e.health.addr = bound
	return nil
}

// MetricsAddr returns the address /metrics, /healthz and /readyz are
// served on (with the port chosen when Options.MetricsAddr's is 0), or ""
// when they are not served.
func (e *Engine) MetricsAddr() string { return e.health.addr }

// readyChecks are the checks of /readyz.
func (e *Engine) readyChecks() map[string]healthz.Checker {
	checks := map[string]healthz.Checker{
		"engine": func(*http.Request) error {
			select {
			case <-e.stopped: // first: started is closed too
				return errStopped
			default:
			}
			select {
			case <-e.started:
				return nil
			case <-e.replicaRunning:
				// A standby of leader election is ready: healthy, and
				// ready to take over (its /leader says it does not act).
				return nil
			default:
				return errors.New("starting")
			}
		},
		"api-server": func(*http.Request) error { return e.health.api.Err() },
		// Fails while a consumer of a running operator cannot reach its
		// source, naming each.
		"sources": func(*http.Request) error {
			var failing []string
			for _, op := range e.running.all() {
				failing = append(failing, op.consumers.Failing()...)
			}
			if len(failing) == 0 {
				return nil
			}
			sort.Strings(failing)
			return errors.New(strings.Join(failing, "; "))
		},
	}
	if e.archive != nil {
		checks["archive"] = func(*http.Request) error { return e.archive.Failure() }
	}
	return checks
}

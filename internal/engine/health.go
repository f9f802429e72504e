package engine

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/opkit-dev/opkit/internal/health"
)

// The engine serves, on Options.MetricsAddr, one HTTP server of three
// paths, as a Runnable of its manager (started with Run, stopped with it):
//
//   - /metrics: controller-runtime's registry, which holds
//     controller-runtime's, client-go's and opkit's metrics (metrics.go).
//   - /healthz: liveness: the process serves (check "ping"). It never
//     fails for the cluster's sake: restarting the engine does not bring
//     an API server back.
//   - /readyz: readiness: "engine" (Run has started the manager and not
//     returned), "api-server" (the engine's last check of the API
//     server's /readyz, every health.CheckEvery, succeeded; apihealth.go)
//     and, with an archive, "archive" (it records runs; package health's
//     ArchiveWriter).
//
// Both are controller-runtime's healthz handlers, as its manager serves
// them: a failing check is named ("[-]api-server failed"), its reason is
// given at /readyz/<check>, and ?verbose lists every check. /readyz also
// says which replica leads (namingLeader); so does /leader, in JSON.
//
// New binds the address, so that a taken port fails New, before anything
// starts; controller-runtime's own metrics server is not used, as it binds
// only once started and cannot say which port ":0" chose.

// served is what the engine serves of its health: the address, and the
// last check of the API server that /readyz reports.
type served struct {
	addr string // the address MetricsAddr bound; "" when it serves none
	api  health.API
}

// serve binds Options.MetricsAddr and adds its server to the manager.
func (e *Engine) serve() error {
	addr := e.opts.MetricsAddr
	if addr == "0" || addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("engine: serving metrics and health checks: %w", err)
	}
	shutdown := 5 * time.Second
	if err := e.mgr.Add(&manager.Server{
		Name:            "metrics and health",
		Server:          &http.Server{Handler: e.handler(), ReadHeaderTimeout: 10 * time.Second},
		Listener:        ln,
		ShutdownTimeout: &shutdown,
	}); err != nil {
		_ = ln.Close()
		return err
	}
	e.health.addr = ln.Addr().String()
	return nil
}

// handler serves /metrics, /healthz, /readyz and /leader.
func (e *Engine) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	mux.HandleFunc("/leader", e.serveLeader)
	for path, checks := range map[string]map[string]healthz.Checker{"/healthz": {"ping": healthz.Ping}, "/readyz": e.readyChecks()} {
		h := http.StripPrefix(path, &healthz.Handler{Checks: checks})
		mux.Handle(path+"/", h) // one check: /readyz/api-server
		if path == "/readyz" {
			h = e.namingLeader(h)
		}
		mux.Handle(path, h)
	}
	return mux
}

// namingLeader adds to /readyz which replica leads: the header
// Opkit-Leading says whether this one does (the kubelet's probes cost no
// request to the API server), and ?verbose ends with a line naming the
// holder of the Lease, read from the API server.
func (e *Engine) namingLeader(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Opkit-Leading", strconv.FormatBool(e.Leading()))
		h.ServeHTTP(w, r)
		if _, verbose := r.URL.Query()["verbose"]; verbose {
			_, _ = fmt.Fprintln(w, leaderLine(e.leaderInfo(r.Context())))
		}
	})
}

// leaderLine says which replica leads, for /readyz?verbose.
func leaderLine(info leaderInfo) string {
	switch {
	case !info.Election:
		return "leader: this replica (no leader election)"
	case info.Leading:
		return fmt.Sprintf("leader: this replica, holder of the Lease %s", info.Lease)
	case info.Holder == "":
		return fmt.Sprintf("leader: none; this replica is a standby and takes the Lease %s once it can", info.Lease)
	default:
		return fmt.Sprintf("leader: %s, holder of the Lease %s (renewed %s); this replica is a standby", info.Holder, info.Lease, info.Renewed.Format(time.RFC3339))
	}
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
		"sources":    e.sourcesReady,
	}
	if e.archive != nil {
		checks["archive"] = func(*http.Request) error { return e.archive.Failure() }
	}
	return checks
}

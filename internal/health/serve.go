package health

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// An engine serves, on its metrics address, one HTTP server of four
// paths, as a Runnable of its manager (started with it, stopped with it):
//
//   - /metrics: controller-runtime's registry, which holds
//     controller-runtime's, client-go's and opkit's metrics.
//   - /healthz: liveness: the process serves (check "ping"). It never
//     fails for the cluster's sake: restarting the engine does not bring
//     an API server back.
//   - /readyz: readiness: the checks the engine gives (its own, the API
//     server's last check as an API holds it, the archive's as an
//     ArchiveWriter says, the sources').
//   - /leader: which replica leads, in JSON (Lease).
//
// Both checks' paths are controller-runtime's healthz handlers, as its
// manager serves them: a failing check is named ("[-]api-server
// failed"), its reason is given at /readyz/<check>, and ?verbose lists
// every check. /readyz also says which replica leads: the header
// Opkit-Leading says whether this one does (the kubelet's probes cost no
// request to the API server), and ?verbose ends with a line naming the
// holder of the Lease, read from the API server.
//
// Serve binds the address at once, so that a taken port fails before
// anything starts; controller-runtime's own metrics server is not used,
// as it binds only once started and cannot say which port ":0" chose.

// Serve binds addr and returns the server of Handler(ready, lease), for a
// manager to run, and the address it bound.
func Serve(addr string, ready map[string]healthz.Checker, lease *Lease) (*manager.Server, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("engine: serving metrics and health checks: %w", err)
	}
	shutdown := 5 * time.Second
	return &manager.Server{
		Name:            "metrics and health",
		Server:          &http.Server{Handler: Handler(ready, lease), ReadHeaderTimeout: 10 * time.Second},
		Listener:        ln,
		ShutdownTimeout: &shutdown,
	}, ln.Addr().String(), nil
}

// Handler serves /metrics, /healthz, /readyz (the checks ready) and
// /leader.
func Handler(ready map[string]healthz.Checker, lease *Lease) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError, EnableOpenMetrics: true}))
	mux.Handle("/leader", lease)
	for path, checks := range map[string]map[string]healthz.Checker{"/healthz": {"ping": healthz.Ping}, "/readyz": ready} {
		h := http.StripPrefix(path, &healthz.Handler{Checks: checks})
		mux.Handle(path+"/", h) // one check: /readyz/api-server
		if path == "/readyz" {
			h = namingLeader(h, lease)
		}
		mux.Handle(path, h)
	}
	return mux
}

// namingLeader adds to h, /readyz, which replica leads.
func namingLeader(h http.Handler, lease *Lease) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Opkit-Leading", strconv.FormatBool(lease.Leading()))
		h.ServeHTTP(w, r)
		if _, verbose := r.URL.Query()["verbose"]; verbose {
			_, _ = fmt.Fprintln(w, lease.Info(r.Context()).line())
		}
	})
}

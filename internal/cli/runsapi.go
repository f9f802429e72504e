package cli

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/opkit-dev/opkit/internal/engine"
)

// defaultRunsAPIService is --runs-api-service's default.
const defaultRunsAPIService = "opkit-runs"

// runsAPIFlags are --runs-api-addr, --runs-api-service and
// --runs-api-host, of run, dev and console: the runs API the engine (or
// opkit console, for an archive without one) serves to the API server's
// aggregation layer, so that kubectl get runs reads the archive
// (docs/runs-api.md).
type runsAPIFlags struct {
	addr, service, host string
}

// register adds the flags; addr is --runs-api-addr's default ("0" for
// none), host --runs-api-host's.
func (f *runsAPIFlags) register(cmd *cobra.Command, addr, host string) {
	cmd.Flags().StringVar(&f.addr, "runs-api-addr", addr, "serve the run archive as the aggregated API runs.opkit.dev (kubectl get runs) over HTTPS on this address, and register its APIService; 0 for none")
	cmd.Flags().StringVar(&f.service, "runs-api-service", defaultRunsAPIService, "NAME[:PORT]: the Service, in the namespace opkit runs in, the APIService of the runs API points at (port 443 by default)")
	cmd.Flags().StringVar(&f.host, "runs-api-host", host, "outside the cluster: the host the API server reaches --runs-api-addr at; opkit then applies --runs-api-service as a Service of type ExternalName pointing there, and removes it and the APIService when it stops")
}

// options are the runs API's options; nil for none. namespace is the
// one opkit runs in.
func (f *runsAPIFlags) options(namespace string) (*engine.RunsAPIOptions, error) {
	if f.addr == "" || f.addr == "0" {
		return nil, nil
	}
	if _, _, err := net.SplitHostPort(f.addr); err != nil {
		return nil, fmt.Errorf("--runs-api-addr %q: want HOST:PORT or :PORT, or 0 to serve none: %w", f.addr, err)
	}
	name, port, hasPort := strings.Cut(f.service, ":")
	if msgs := validation.IsDNS1035Label(name); len(msgs) > 0 {
		return nil, fmt.Errorf("--runs-api-service %q: the Service's name: %s", f.service, strings.Join(msgs, "; "))
	}
	opts := &engine.RunsAPIOptions{Addr: f.addr, Service: types.NamespacedName{Namespace: namespace, Name: name}, ExternalName: f.host}
	if hasPort {
		if f.host != "" {
			return nil, fmt.Errorf("--runs-api-service %q with --runs-api-host: the API server reaches the engine at the port it listens on (--runs-api-addr), name the Service alone", f.service)
		}
		p, err := strconv.ParseInt(port, 10, 32)
		if err != nil || p <= 0 || p > 65535 {
			return nil, fmt.Errorf("--runs-api-service %q: the port %q is not a port number", f.service, port)
		}
		opts.Port = int32(p)
	}
	if f.host != "" {
		if msgs := validation.IsDNS1123Subdomain(f.host); len(msgs) > 0 {
			return nil, fmt.Errorf("--runs-api-host %q: want a DNS name or an IPv4 address: %s", f.host, strings.Join(msgs, "; "))
		}
	}
	return opts, nil
}

package aggregate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/clock"

	"github.com/opkit-dev/opkit/internal/webhook"
)

// ServerOptions configures [NewServer].
type ServerOptions struct {
	// API is the API the server serves; its APIService is applied with
	// the server's CA bundle whenever the bundle changes. Required.
	API API
	// Registrar applies it. Required.
	Registrar *Registrar
	// Addr is the address to listen on, e.g. 127.0.0.1:0 on the local
	// plane (port 0: any free one, see webhook.Server.Addr). Required.
	Addr string
	// Secret is where the CA and the serving certificate are kept.
	// Defaults to <service name>-tls in the Service's namespace.
	Secret types.NamespacedName
	// Secrets reads and writes it. Required.
	Secrets corev1client.SecretsGetter
	// Clock rotates the certificates (webhook.Options.Clock). Defaults to
	// the real clock.
	Clock clock.PassiveClock
	// Log receives the rotation's steps. Defaults to none.
	Log logr.Logger
}

// NewServer returns the HTTPS server of an aggregated API: a
// webhook.Server whose certificate is valid for API.ServingName, which
// asks clients for their certificate (RequestHeader.Authenticate verifies
// it), whose requests may last (watches, followed logs), and which
// registers API with its CA bundle at start and at each rotation. On the
// local plane the aggregator dials API.ExternalName at API.Port: an API
// with an ExternalName and Port 0 gets the port the server listens on.
// Register the handlers with Handle, then Start it.
func NewServer(opts ServerOptions) (*webhook.Server, error) {
	if opts.Registrar == nil {
		return nil, errors.New("aggregate: ServerOptions.Registrar is required")
	}
	checked := opts.API
	if checked.Port == 0 && checked.ExternalName != "" {
		checked.Port = 1 // the listener's, below
	}
	if err := checked.check(); err != nil {
		return nil, fmt.Errorf("aggregate: ServerOptions.%w", err)
	}
	if opts.Secret == (types.NamespacedName{}) {
		opts.Secret = types.NamespacedName{Namespace: opts.API.Service.Namespace, Name: opts.API.Service.Name + "-tls"}
	}
	srv, err := webhook.New(webhook.Options{
		Addr:        opts.Addr,
		Names:       []string{opts.API.ServingName()},
		Secret:      opts.Secret,
		Secrets:     opts.Secrets,
		Clock:       opts.Clock,
		Log:         opts.Log,
		Streaming:   true,
		ClientCerts: true,
		OnBundle: func(ctx context.Context, bundle []byte) error {
			return opts.Registrar.Register(ctx, opts.API, bundle)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("aggregate: %w", err)
	}
	if opts.API.Port == 0 {
		// Set before Start, which alone calls OnBundle.
		_, port, _ := net.SplitHostPort(srv.Addr())
		p, _ := strconv.Atoi(port)
		opts.API.Port = int32(p) //nolint:gosec // a TCP port fits
	}
	return srv, nil
}

package cli

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/opkit-dev/opkit/internal/engine"
)

// defaultWebhookAddr is opkit dev's --webhook-addr, unless
// $OPKIT_WEBHOOK_ADDR sets another: loopback, beside the hooks' port; the
// local plane's API server reaches it there.
const defaultWebhookAddr = "127.0.0.1:7383"

// webhookFlags are --webhook-addr, --webhook-host, --webhook-service and
// --webhook-secret, of run and dev: the engine's HTTPS server for the API
// server's admission calls (docs/admission.md).
type webhookFlags struct {
	addr, host, service, secret, slice string
}

// register adds the flags; def is --webhook-addr's default ("0" for
// none).
func (f *webhookFlags) register(cmd *cobra.Command, def string) {
	if env := os.Getenv("OPKIT_WEBHOOK_ADDR"); env != "" {
		def = env
	}
	cmd.Flags().StringVar(&f.addr, "webhook-addr", def, "serve the admission handlers (on validate or mutate) and the conversion of versions to the API server over HTTPS on this address; 0 for none (env OPKIT_WEBHOOK_ADDR)")
	cmd.Flags().StringVar(&f.host, "webhook-host", "", "the name or IP address the API server reaches --webhook-addr at, for an engine outside the cluster (default: --webhook-addr's host)")
	cmd.Flags().StringVar(&f.service, "webhook-service", "", "NAME[:PORT]: the Service in the engine's namespace ($POD_NAMESPACE) the API server reaches the engine through, for an engine in the cluster (see docs/production.md)")
	cmd.Flags().StringVar(&f.slice, "webhook-endpointslice", "", "the EndpointSlice of --webhook-service, in $POD_NAMESPACE: the replica that acts writes its address ($POD_IP) there, so that admission calls reach it and no standby (see docs/production.md)")
	cmd.Flags().StringVar(&f.secret, "webhook-secret", engine.DefaultWebhookSecret, "the Secret, in the engine's namespace, that keeps the webhook's CA and serving certificate for every replica and restart")
}

// options are the engine's webhook options; nil for none. namespace is
// the engine's namespace; movable lets dev's default address move to a
// free port when another opkit dev has it.
func (f *webhookFlags) options(cmd *cobra.Command, namespace string, movable bool) (*engine.WebhookOptions, error) {
	if f.addr == "" || f.addr == "0" {
		if f.service != "" || f.host != "" {
			return nil, fmt.Errorf("--webhook-service and --webhook-host need --webhook-addr: the address the engine serves admission calls on")
		}
		return nil, nil
	}
	host, _, err := net.SplitHostPort(f.addr)
	if err != nil {
		return nil, fmt.Errorf("--webhook-addr %q: want HOST:PORT or :PORT, or 0 to serve none: %w", f.addr, err)
	}
	opts := &engine.WebhookOptions{Addr: f.addr, Host: f.host, Secret: f.secret, SecretNamespace: namespace}
	if f.service != "" {
		if f.host != "" {
			return nil, fmt.Errorf("--webhook-host and --webhook-service: give one, the way the API server reaches the engine")
		}
		name, port, hasPort := strings.Cut(f.service, ":")
		svc := &engine.WebhookService{Namespace: namespace, Name: name}
		if hasPort {
			p, err := strconv.ParseInt(port, 10, 32)
			if err != nil || p <= 0 || p > 65535 {
				return nil, fmt.Errorf("--webhook-service %q: the port %q is not a port number", f.service, port)
			}
			svc.Port = int32(p)
		}
		opts.Service = svc
		if f.slice != "" {
			ip := os.Getenv("POD_IP")
			if ip == "" {
				return nil, fmt.Errorf("--webhook-endpointslice: the engine writes its Pod's address there, and $POD_IP does not give it (set it from the downward API's status.podIP)")
			}
			opts.Endpoint = &engine.HooksEndpoint{Namespace: namespace, Name: f.slice, IP: ip, Pod: os.Getenv("POD_NAME"), Node: os.Getenv("NODE_NAME")}
		}
	} else if f.slice != "" {
		return nil, fmt.Errorf("--webhook-endpointslice is the EndpointSlice of --webhook-service: give both")
	} else if ip := net.ParseIP(host); f.host == "" && (host == "" || (ip != nil && ip.IsUnspecified())) {
		return nil, fmt.Errorf("--webhook-addr %q listens on every address: say which one the API server reaches it at with --webhook-host, or serve in the cluster with --webhook-service", f.addr)
	}
	if movable && !cmd.Flags().Changed("webhook-addr") && os.Getenv("OPKIT_WEBHOOK_ADDR") == "" {
		if ln, err := net.Listen("tcp", f.addr); err != nil {
			opts.Addr = net.JoinHostPort(host, "0")
		} else {
			_ = ln.Close()
		}
	}
	return opts, nil
}

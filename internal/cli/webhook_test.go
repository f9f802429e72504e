package cli

import (
	"net"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestWebhookFlagsSayHowTheAPIServerReachesTheEngine(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = taken.Close() }()
	options := func(movable bool, args ...string) (*webhookFlags, error) {
		t.Helper()
		cmd := &cobra.Command{}
		f := &webhookFlags{}
		f.register(cmd, taken.Addr().String())
		if err := cmd.Flags().Parse(args); err != nil {
			t.Fatal(err)
		}
		opts, err := f.options(cmd, "opkit", movable)
		if err == nil && opts != nil {
			f.addr = opts.Addr
		}
		return f, err
	}
	// dev's default, taken by another opkit dev: another port of loopback.
	if f, err := options(true); err != nil || !strings.HasPrefix(f.addr, "127.0.0.1:") || f.addr == taken.Addr().String() {
		t.Errorf("dev's default address taken: %q, %v; want another port of 127.0.0.1", f.addr, err)
	}
	for args, want := range map[string]string{
		"--webhook-addr :7383":                                      "listens on every address: say which one the API server reaches it at with --webhook-host",
		"--webhook-addr 0 --webhook-host a.example.com":             "need --webhook-addr",
		"--webhook-addr :7383 --webhook-service svc:http":           `the port "http" is not a port number`,
		"--webhook-addr :7383 --webhook-endpointslice s":            "--webhook-endpointslice is the EndpointSlice of --webhook-service",
		"--webhook-addr :7383 --webhook-service s --webhook-host h": "give one",
	} {
		if _, err := options(false, strings.Fields(args)...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want an error saying %q", args, err, want)
		}
	}
	cmd := &cobra.Command{}
	f := &webhookFlags{}
	f.register(cmd, "0")
	if err := cmd.Flags().Parse(strings.Fields("--webhook-addr :7383 --webhook-service opkit-webhook:443")); err != nil {
		t.Fatal(err)
	}
	opts, err := f.options(cmd, "opkit", false)
	if err != nil || opts.Service == nil || opts.Service.Name != "opkit-webhook" || opts.Service.Namespace != "opkit" || opts.Service.Port != 443 || opts.Secret != "opkit-webhook-certs" || opts.SecretNamespace != "opkit" {
		t.Errorf("in the cluster: %+v, %v", opts, err)
	}
	if opts, err := (&webhookFlags{addr: "0"}).options(cmd, "opkit", false); opts != nil || err != nil {
		t.Errorf("--webhook-addr 0: %+v, %v; want no webhook server", opts, err)
	}
}

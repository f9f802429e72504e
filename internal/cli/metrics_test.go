package cli

import (
	"net"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/opkit-dev/opkit/internal/engine"
)

func TestMetricsTakeAnotherPortOnlyWhenTheAddressIsDevsDefault(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	// New binds the address and contacts no API server.
	opts := engine.Options{Config: &rest.Config{Host: "https://127.0.0.1:1"}}

	e, err := (&metricsFlag{addr: taken.Addr().String(), anyPort: true}).newEngine(opts)
	if err != nil {
		t.Fatalf("dev's default address taken: %v; want another port", err)
	}
	if host, _, _ := net.SplitHostPort(e.MetricsAddr()); host != "127.0.0.1" || e.MetricsAddr() == taken.Addr().String() {
		t.Errorf("dev's default address taken: serving on %s; want another port of 127.0.0.1", e.MetricsAddr())
	}

	_, err = (&metricsFlag{addr: taken.Addr().String()}).newEngine(opts)
	if want := "--metrics-addr " + taken.Addr().String() + ": "; err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("an address given and taken: %v; want an error starting %q, saying it is in use", err, want)
	}

	if e, err := (&metricsFlag{addr: "0"}).newEngine(opts); err != nil {
		t.Errorf("--metrics-addr 0: %v", err)
	} else if e.MetricsAddr() != "" {
		t.Errorf("--metrics-addr 0: serving on %q; want nothing served", e.MetricsAddr())
	}
}

package stack

import (
	"errors"
	"net"
	"syscall"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/opkit-dev/opkit/internal/engine"
)

func TestMetricsTakeAnotherPortOnlyWhenAllowed(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	// New binds the address and contacts no API server.
	opts := engine.Options{Config: &rest.Config{Host: "https://127.0.0.1:1"}, MetricsAddr: taken.Addr().String()}

	e, err := newEngine(opts, true)
	if err != nil {
		t.Fatalf("the address taken, another port allowed: %v; want another port", err)
	}
	if host, _, _ := net.SplitHostPort(e.MetricsAddr()); host != "127.0.0.1" || e.MetricsAddr() == taken.Addr().String() {
		t.Errorf("the address taken, another port allowed: serving on %s; want another port of 127.0.0.1", e.MetricsAddr())
	}

	if _, err := newEngine(opts, false); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("the address taken, no other port allowed: %v; want the address in use", err)
	}

	opts.MetricsAddr = "0"
	if e, err := newEngine(opts, true); err != nil {
		t.Errorf("MetricsAddr 0: %v", err)
	} else if e.MetricsAddr() != "" {
		t.Errorf("MetricsAddr 0: serving on %q; want nothing served", e.MetricsAddr())
	}
}

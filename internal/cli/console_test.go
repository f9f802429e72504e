package cli

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/opkit-dev/opkit/internal/archive"
)

func TestConsoleTakesAnotherPortOnlyWhenTheAddressIsTheDefault(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, err := archive.OpenSQLite(ctx, filepath.Join(t.TempDir(), "runs.db"), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := &rest.Config{Host: "https://127.0.0.1:1"} // never reached: nothing is served

	rc, err := startConsole(ctx, &consoleFlags{addrFlag: "console", addr: taken.Addr().String(), anyPort: true}, cfg, store, nil)
	if err != nil {
		t.Fatalf("the default address taken: %v; want another port", err)
	}
	if rc.url == "http://"+taken.Addr().String() || !strings.HasPrefix(rc.url, "http://127.0.0.1:") {
		t.Errorf("console at %s; want loopback on another port than %s", rc.url, taken.Addr())
	}
	_, err = startConsole(ctx, &consoleFlags{addrFlag: "console", addr: taken.Addr().String()}, cfg, store, nil)
	if err == nil || !strings.Contains(err.Error(), "choose another address with --console") {
		t.Errorf("the user's address taken: %v; want an error that says what to do", err)
	}
}

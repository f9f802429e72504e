package devnode

import (
	"time"

	"context"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ReportStatus reports the status of the Node name as a dev node does,
// through cfg's client; the Node must exist.
func ReportStatus(ctx context.Context, cfg *rest.Config, name string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	n := &Node{opts: Options{Name: name, Version: "v0.0.0"}, client: cs}
	return n.updateStatus(ctx)
}

// UseOpkit makes path the default of Options.Opkit, for the nodes started
// after it: this package's tests run the test binary as opkit's stand-in.
func UseOpkit(path string) { opkitExecutable = func() string { return path } }

// RenewTokensAfter makes projected tokens renewed d after their request,
// whatever their lifetime, for the Pods started after it.
func RenewTokensAfter(d time.Duration) {
	renewAfter = func(time.Duration) time.Duration { return d }
}

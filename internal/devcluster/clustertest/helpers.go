package clustertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/devcluster"
	"github.com/opkit-dev/opkit/pkg/opkittest"
)

// Eventually is opkittest.Eventually.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	opkittest.Eventually(t, timeout, what, cond)
}

// Scaled is opkittest.Scaled: d times the binary's wait factor.
func Scaled(d time.Duration) time.Duration { return opkittest.Scaled(d) }

// Kubectl runs the plane's kubectl (see devcluster.Kubectl) with kubeconfig
// and returns its standard output; on failure the error holds its standard
// error.
func Kubectl(t testing.TB, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	bins, err := (&devcluster.Cache{}).Binaries()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bins.Path(devcluster.Kubectl), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	out, err := cmd.Output()
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		return string(out), fmt.Errorf("kubectl %v: %w: %s", args, err, ee.Stderr)
	}
	return string(out), err
}

// ProcessAlive reports whether pid runs; a zombie, which has exited and
// waits only to be reaped, does not.
func ProcessAlive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && !strings.Contains(string(data), ") Z ")
}

package opkittest_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/pkg/opkittest"
)

// A test package calls Main from its TestMain, New in each test, and
// RunOperators for the definitions under test. It needs the local control
// plane, so it has no output to check here: testdata/usermodule runs the
// same test in `make test`.
func Example() {
	// func TestMain(m *testing.M) { opkittest.Main(m) }
	test := func(t *testing.T) {
		env := opkittest.New(t)
		eng := env.RunOperators(t, "operator.yaml")
		// ... create a Note named hello in env.Namespace with env.Client ...
		opkittest.Eventually(t, time.Minute, "the Note's ConfigMap exists", func(ctx context.Context) (bool, error) {
			err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: "hello-note"}, &corev1.ConfigMap{})
			return err == nil, client.IgnoreNotFound(err)
		})
		run := eng.WaitRun(t, time.Minute, opkittest.Query{Name: "hello", Handler: "announce", Outcome: opkittest.Succeeded})
		t.Logf("announce ran on %s", run.Trigger)
	}
	_ = test
}

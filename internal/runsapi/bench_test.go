package runsapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/runsapi"
)

// BenchmarkListOneObject lists the runs of one object (kubectl get runs
// -l opkit.dev/object=NAME) over an archive of 100k runs: 2,000 objects
// in 10 namespaces, 50 runs each. It reports the p99 of the handler's
// answer. Run it with go test -run '^$' -bench ListOneObject
// ./internal/runsapi/.
func BenchmarkListOneObject(b *testing.B) {
	const runs, objects, namespaces = 100_000, 2_000, 10
	ctx := context.Background()
	store, err := archive.OpenSQLite(ctx, filepath.Join(b.TempDir(), "runs.db"), archive.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	start := time.Now().Add(-runs * time.Second)
	for i := range runs {
		obj := i % objects
		t := start.Add(time.Duration(i) * time.Second)
		r := &archive.Run{ID: archive.NewID(t), Operator: "printer", Handler: "announce", Trigger: "update",
			Namespace: fmt.Sprintf("ns-%d", obj%namespaces), Name: fmt.Sprintf("printer-%d", obj), UID: fmt.Sprint("uid-", obj),
			StartedAt: t, Outcome: archive.Succeeded, FinishedAt: t.Add(time.Second)}
		if err := store.Insert(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
	h, err := runsapi.New(runsapi.Options{
		Archive: store, Namespace: "opkit-system",
		Authenticator: runsapi.AuthenticatorFunc(func(*http.Request) (*runsapi.User, bool, error) { return &runsapi.User{Name: "b"}, true, nil }),
		Authorizer:    runsapi.AuthorizerFunc(func(context.Context, runsapi.Attributes) (bool, string, error) { return true, "", nil }),
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, path string }{
		{"namespace", "/apis/runs.opkit.dev/v1alpha1/namespaces/ns-3/runs?labelSelector=opkit.dev/object%3Dprinter-1233"},
		{"all-namespaces", "/apis/runs.opkit.dev/v1alpha1/runs?labelSelector=opkit.dev/object%3Dprinter-1233"},
		{"all-namespaces-failed", "/apis/runs.opkit.dev/v1alpha1/runs?labelSelector=opkit.dev/object%3Dprinter-1233&fieldSelector=status.outcome%3DFailed"},
	} {
		b.Run(c.name, func(b *testing.B) {
			var took []time.Duration
			for b.Loop() {
				rec := httptest.NewRecorder()
				t0 := time.Now()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.path, nil))
				took = append(took, time.Since(t0))
				if rec.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", c.path, rec.Code, rec.Body)
				}
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

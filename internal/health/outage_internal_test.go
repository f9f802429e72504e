package health

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestAPIDownNamesTheFailingChecks(t *testing.T) {
	notReady := apierrors.NewGenericServerResponse(500, "get", schema.GroupResource{}, "", "readyz check failed", 0, false)
	for _, tc := range []struct {
		name string
		err  error
		body string
		want string
	}{
		{"etcd", notReady, "[+]ping ok\n[-]etcd failed: reason withheld\n[+]informer-sync ok\n[-]etcd-readiness failed: reason withheld\nreadyz check failed\n", "the API server is not ready (failing: etcd, etcd-readiness)"},
		{"no checks named", notReady, "[-]\n", "the API server is not ready (" + notReady.Error() + ")"},
		{"no answer", errors.New(`Get "https://127.0.0.1:6443/readyz": EOF`), "", `the API server is unreachable (Get "https://127.0.0.1:6443/readyz": EOF)`},
	} {
		if got := APIDown(tc.err, []byte(tc.body)); got != tc.want {
			t.Errorf("%s: apiDown = %q; want %q", tc.name, got, tc.want)
		}
	}
}

package aggregate_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/opkit-dev/opkit/internal/aggregate"
)

func TestRegisterRefusesAnAPIItCannotRegisterNamingTheField(t *testing.T) {
	good := aggregate.API{Group: "runs.opkit.dev", Version: "v1alpha1", Service: types.NamespacedName{Namespace: "opkit", Name: "opkit-runs"}, Port: 443}
	for _, tc := range []struct {
		name   string
		change func(*aggregate.API)
		bundle string
		want   string
	}{
		{"group without a dot", func(a *aggregate.API) { a.Group = "runs" }, "ca", `API.Group "runs"`},
		{"upper-case version", func(a *aggregate.API) { a.Version = "V1" }, "ca", `API.Version "V1"`},
		{"service without a namespace", func(a *aggregate.API) { a.Service.Namespace = "" }, "ca", "API.Service"},
		{"port 0", func(a *aggregate.API) { a.Port = 0 }, "ca", "API.Port 0"},
		{"external name with a scheme", func(a *aggregate.API) { a.ExternalName = "https://127.0.0.1" }, "ca", `API.ExternalName "https://127.0.0.1"`},
		{"no caBundle", func(*aggregate.API) {}, "", "caBundle is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := good
			tc.change(&api)
			// The zero Registrar has no client: the check comes first.
			err := (&aggregate.Registrar{}).Register(t.Context(), api, []byte(tc.bundle))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Register = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

func TestTheServingNameIsTheOneTheAggregatorVerifies(t *testing.T) {
	api := aggregate.API{Group: "runs.opkit.dev", Version: "v1alpha1", Service: types.NamespacedName{Namespace: "opkit", Name: "opkit-runs"}}
	if got, want := api.ServingName(), "opkit-runs.opkit.svc"; got != want {
		t.Errorf("ServingName = %q, want %q (kube-aggregator's BuildTransportConfig)", got, want)
	}
	if got, want := api.Name(), "v1alpha1.runs.opkit.dev"; got != want {
		t.Errorf("Name = %q, want %q", got, want)
	}
}

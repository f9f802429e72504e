package cli

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestRunsAPIFlagsServeNothingUnlessGivenAnAddressAndNameWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		name    string
		flags   runsAPIFlags
		want    string // the error's words; "" for none
		service types.NamespacedName
		port    int32
		host    string
	}{
		{name: "off by default (opkit run)", flags: runsAPIFlags{addr: "0", service: defaultRunsAPIService}},
		{name: "off when empty", flags: runsAPIFlags{addr: "", service: defaultRunsAPIService}},
		{name: "in the cluster", flags: runsAPIFlags{addr: ":8444", service: "opkit-runs:8443"}, service: types.NamespacedName{Namespace: "ops", Name: "opkit-runs"}, port: 8443},
		{name: "outside the cluster", flags: runsAPIFlags{addr: "127.0.0.1:0", service: "opkit-runs", host: "127.0.0.1"}, service: types.NamespacedName{Namespace: "ops", Name: "opkit-runs"}, host: "127.0.0.1"},
		{name: "no port", flags: runsAPIFlags{addr: "8444", service: "opkit-runs"}, want: `--runs-api-addr "8444": want HOST:PORT`},
		{name: "a bad Service name", flags: runsAPIFlags{addr: ":8444", service: "Opkit_Runs"}, want: `--runs-api-service "Opkit_Runs"`},
		{name: "a bad port", flags: runsAPIFlags{addr: ":8444", service: "opkit-runs:x"}, want: `the port "x" is not a port number`},
		{name: "a port with a host", flags: runsAPIFlags{addr: ":8444", service: "opkit-runs:443", host: "127.0.0.1"}, want: "with --runs-api-host"},
		{name: "a bad host", flags: runsAPIFlags{addr: ":8444", service: "opkit-runs", host: "a host"}, want: `--runs-api-host "a host"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, err := tc.flags.options("ops")
			switch {
			case tc.want != "":
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("options() = %+v, %v; want an error saying %q", opts, err, tc.want)
				}
			case err != nil:
				t.Fatal(err)
			case tc.service == (types.NamespacedName{}):
				if opts != nil {
					t.Fatalf("options() = %+v; want none served", opts)
				}
			case opts == nil || opts.Service != tc.service || opts.Port != tc.port || opts.ExternalName != tc.host || opts.Addr != tc.flags.addr:
				t.Fatalf("options() = %+v; want Service %s, port %d, ExternalName %q", opts, tc.service, tc.port, tc.host)
			}
		})
	}
}

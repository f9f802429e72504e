package plan_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/cli"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/plan"
)

// TestPlanOfTheSameDefinitionSaysNoChangesAndExitsZero: opkit plan of
// the definition that runs exits 0 and says so.
func TestPlanOfTheSameDefinitionSaysNoChangesAndExitsZero(t *testing.T) {
	env := clustertest.New(t)
	plan.RunEngine(t, env, plan.Compile(t, plan.WebsiteFile))
	plan.Websites(t, env, 2)
	var out, errOut bytes.Buffer
	code := cli.Main([]string{"plan", "-f", plan.WebsiteFile, "--against", plan.WebsiteFile, "-n", env.Namespace,
		"--kubeconfig", clustertest.Cluster(t).KubeconfigPath()}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d, want 0:\n%s%s", code, out.String(), errOut.String())
	}
	if want := "operator website: no changes (2 Website objects planned)"; !strings.Contains(out.String(), want) {
		t.Errorf("output:\n%s\nwant %q", out.String(), want)
	}
}

// TestPlanRefusesABreakingCRDChangeNamingTheFinding: an enum added to a
// field refuses the values it leaves out; opkit plan exits 1 and names
// the finding.
func TestPlanRefusesABreakingCRDChangeNamingTheFinding(t *testing.T) {
	env := clustertest.New(t)
	newFile := plan.Edited(t, "            default: localhost\n", "            default: localhost\n            enum: [localhost, www.example.com]\n")
	var out, errOut bytes.Buffer
	code := cli.Main([]string{"plan", "-f", newFile, "--against", plan.WebsiteFile, "-n", env.Namespace,
		"--kubeconfig", clustertest.Cluster(t).KubeconfigPath()}, &out, &errOut)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{"versions[v1].spec.domain: breaking: an enum is added"} {
		if !strings.Contains(out.String(), want) || !strings.Contains(errOut.String(), "plan refused: operator website: 1 breaking CRD change, the first versions[v1].spec.domain: an enum is added") {
			t.Errorf("output:\n%s%s\nwant %q and plan refused", out.String(), errOut.String(), want)
		}
	}
}

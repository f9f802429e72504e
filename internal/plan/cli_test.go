package plan_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
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

// TestPlanAgainstTheOperatorInTheClusterPrintsJSONAndExitsTwo: without
// --against, the definition replaced is the Operator of its name in the
// cluster; -o json has the documented shape, and a change exits 2.
func TestPlanAgainstTheOperatorInTheClusterPrintsJSONAndExitsTwo(t *testing.T) {
	env := clustertest.New(t)
	old := plan.Compile(t, plan.WebsiteFile)
	if err := env.Client.Create(t.Context(), v1alpha1.CustomResourceDefinition()); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	op := old.Operator.DeepCopy()
	clustertest.Eventually(t, 30*time.Second, "the Operator created", func(ctx context.Context) (bool, error) {
		err := env.Client.Create(ctx, op.DeepCopy())
		return err == nil || apierrors.IsAlreadyExists(err), nil
	})
	plan.RunEngine(t, env, old)
	plan.Websites(t, env, 2)
	newFile := plan.Edited(t, "image: busybox:1.36", "image: busybox:1.37")

	var out, errOut bytes.Buffer
	code := cli.Main([]string{"plan", "-f", newFile, "-n", env.Namespace, "-o", "json",
		"--kubeconfig", clustertest.Cluster(t).KubeconfigPath()}, &out, &errOut)
	if code != 2 {
		t.Fatalf("exit %d, want 2:\n%s%s", code, out.String(), errOut.String())
	}
	var got struct {
		Plans []plan.Plan `json:"plans"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if len(got.Plans) != 1 {
		t.Fatalf("%d plans, want 1:\n%s", len(got.Plans), out.String())
	}
	p := got.Plans[0]
	if p.Operator != "website" || p.Resource != "Website.demo.example.com" || p.Summary.Objects != 2 || p.Summary.Updated != 2 || p.Summary.Unchanged != 2 || len(p.Objects) != 2 {
		t.Fatalf("plan %+v, want 2 Websites, each with its Deployment changed and its ConfigMap unchanged", p)
	}
	c := p.Objects[0].Children
	if len(c) != 1 || c[0].Kind != "Deployment" || c[0].Action != plan.Update || len(c[0].Changes) != 1 ||
		c[0].Changes[0].Path != "spec.template.spec.containers[0].image" || c[0].Changes[0].New != "busybox:1.37" {
		t.Errorf("children %+v, want the Deployment's image changed", c)
	}
	if errOut.Len() != 0 {
		t.Errorf("stderr %q, want nothing: exit 2 is not an error", errOut.String())
	}
}

// TestPlanMisusedSaysWhatIsWrongAndExitsOne: no definition, an unknown
// output, a definition that does not load: exit 1 with what to do.
func TestPlanMisusedSaysWhatIsWrongAndExitsOne(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan"}, "plan: name the new definition: opkit plan -f NEW.yaml"},
		{[]string{"plan", "-f", plan.WebsiteFile, "-o", "yaml"}, `plan: -o "yaml": choose text or json`},
		{[]string{"plan", "-f", "missing.yaml"}, "missing.yaml"},
	} {
		var out, errOut bytes.Buffer
		if code := cli.Main(tc.args, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 1 and %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

// TestPlanOfAPausedOperatorPlansItsRunsAtTheResume: while the whole
// operator is paused (opkit pause --operator OP --all: the annotation on
// its Operator in the cluster), no handler starts: opkit plan, also
// against a file, plans the runs to start at its resume (still a change,
// exit 2) and says by whom it is paused and why; without the pause the
// same runs start now.
func TestPlanOfAPausedOperatorPlansItsRunsAtTheResume(t *testing.T) {
	env := clustertest.New(t)
	if err := env.Client.Create(t.Context(), v1alpha1.CustomResourceDefinition()); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	old := plan.Compile(t, plan.WebsiteFile)
	plan.RunEngine(t, env, old)
	plan.Websites(t, env, 2)
	oldFile := plan.WebsiteFile
	newFile := plan.Edited(t, "  status:\n", "  handlers:\n  - name: announce\n    on: [create]\n    exec: {command: [\"true\"]}\n  status:\n")

	// The Operator is cluster-scoped: the other tests' website, paused
	// here (they do not run in parallel), is deleted at the end.
	op := old.Operator.DeepCopy()
	pause := `{"by":"alice","reason":"the database is migrating","at":"2026-12-05T10:00:00Z"}`
	setPause := func(ctx context.Context, value *string) error {
		cur := &v1alpha1.Operator{}
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(op), cur)
		if apierrors.IsNotFound(err) {
			cur = op.DeepCopy()
			cur.Annotations = map[string]string{v1alpha1.PauseAnnotation: *value}
			return env.Client.Create(ctx, cur)
		}
		if err != nil {
			return err
		}
		if value == nil {
			delete(cur.Annotations, v1alpha1.PauseAnnotation)
		} else {
			cur.Annotations = map[string]string{v1alpha1.PauseAnnotation: *value}
		}
		return env.Client.Update(ctx, cur)
	}
	clustertest.Eventually(t, 30*time.Second, "the Operator paused", func(ctx context.Context) (bool, error) {
		return setPause(ctx, &pause) == nil, nil
	})
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), op) })

	// planned plans newFile against oldFile, or, with cluster, against
	// the Operator in the cluster (its definition and its pause read
	// together).
	planned := func(cluster ...bool) (int, string, plan.Plan) {
		t.Helper()
		var out, errOut bytes.Buffer
		against := []string{"--against", oldFile}
		if len(cluster) > 0 && cluster[0] {
			against = nil
		}
		code := cli.Main(append([]string{"plan", "-f", newFile, "-n", env.Namespace, "-o", "json",
			"--kubeconfig", clustertest.Cluster(t).KubeconfigPath()}, against...), &out, &errOut)
		var got struct {
			Plans []plan.Plan `json:"plans"`
		}
		if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got.Plans) != 1 {
			t.Fatalf("exit %d, plans %v: %v\n%s%s", code, got.Plans, err, out.String(), errOut.String())
		}
		var text bytes.Buffer
		got.Plans[0].WriteText(&text)
		return code, text.String(), got.Plans[0]
	}
	code, text, p := planned()
	t.Logf("the plan of the paused operator:\n%s", text)
	atResume := func(p plan.Plan) (n int) {
		for _, o := range p.Objects {
			for _, h := range o.Handlers {
				if h.AtResume {
					n++
				}
			}
		}
		return n
	}
	// The runs are planned, to start at the resume: a change (exit 2),
	// not "no changes".
	if p.Summary.HandlerRuns != 2 || atResume(p) != 2 || code != 2 || !strings.Contains(text, "> handler announce runs at the operator's resume (create)") {
		t.Errorf("paused: %d handler runs planned, %d at the resume, exit %d; want 2 at the resume, and exit 2:\n%s", p.Summary.HandlerRuns, atResume(p), code, text)
	}
	for _, want := range []string{"operator website is paused by alice at 2026-12-05T10:00:00Z (the database is migrating)", "opkit resume --operator website --all", "start at the resume"} {
		if !strings.Contains(p.Paused, want) || !strings.Contains(text, want) {
			t.Errorf("paused: the plan says %q, text:\n%s\nwant %q", p.Paused, text, want)
		}
	}
	// Against the Operator in the cluster, whose one read gives both the
	// definition it replaces and its pause: the same plan.
	if code, text, p := planned(true); code != 2 || atResume(p) != 2 || !strings.Contains(p.Paused, "operator website is paused by alice") {
		t.Errorf("paused, against the cluster: %d at the resume, paused %q, exit %d; want 2, by alice, exit 2:\n%s", atResume(p), p.Paused, code, text)
	}

	// Resumed: the same plan lists the runs.
	clustertest.Eventually(t, 30*time.Second, "the Operator resumed", func(ctx context.Context) (bool, error) {
		return setPause(ctx, nil) == nil, nil
	})
	code, text, p = planned()
	if p.Summary.HandlerRuns != 2 || atResume(p) != 0 || p.Paused != "" || code != 2 {
		t.Errorf("resumed: %d handler runs planned, paused %q, exit %d; want 2, none, exit 2:\n%s", p.Summary.HandlerRuns, p.Paused, code, text)
	}
}

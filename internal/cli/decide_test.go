package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/stack"
)

// choresDefinition: work gives up on entering Working, and a guard on
// its outcome moves the Chore into Stuck, which asks a person; Stuck's
// enter handler, page, takes a while.
const choresDefinition = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: chores}
spec:
  resource:
    group: decide.example.com
    kind: Chore
    versions:
    - name: v1
      schema: {type: object, properties: {text: {type: string}}}
  states:
  - name: Working
    initial: true
    transitions:
    - {to: Stuck, reason: WorkGaveUp, when: "run.outcome == 'GaveUp'"}
  - name: Stuck
    needsPerson: {question: "The work gave up. Drop the chore?"}
    transitions:
    - {to: Done, reason: Dropped, description: give it up for good}
  - {name: Done, final: true}
  handlers:
  - name: work
    on: [enter]
    states: [Working]
    retry: {maxAttempts: 1}
    exec: {command: ["false"]}
  - name: page
    on: [enter]
    states: [Stuck]
    exec: {command: ["sleep", "15"]}
`

// TestDecideSaysWhatTheEngineAnswered: opkit decide waits for the
// engine's answer and prints it: a decision made while the state's enter
// handler runs waits for it, and says so, naming it; a second decision
// is refused before it is written; the first is taken once the handler is
// done.
func TestDecideSaysWhatTheEngineAnswered(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	cl, err := devcluster.Start(t.Context(), devcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	dir := t.TempDir()
	file, archivePath := filepath.Join(dir, "chores.yaml"), filepath.Join(dir, "runs.db")
	if err := os.WriteFile(file, []byte(choresDefinition), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := stack.Start(context.WithoutCancel(t.Context()), stack.Options{Engine: engine.Options{Config: cl.RESTConfig()}, Archive: archivePath})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("engine: %v", err)
		}
	})
	defs, err := definition.CompileFiles(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(t.Context(), defs[0]); err != nil {
		t.Fatal(err)
	}

	c, err := client.New(cl.RESTConfig(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("decide.example.com/v1")
	obj.SetKind("Chore")
	obj.SetNamespace("default")
	obj.SetName("dishes")
	eventually(t, 60*time.Second, "the Chore created", func(ctx context.Context) bool {
		return c.Create(ctx, obj.DeepCopy()) == nil
	})
	state := func(ctx context.Context) *v1alpha1.ObjectState {
		u := obj.DeepCopy()
		if err := c.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			return nil
		}
		s, _ := v1alpha1.ReadObjectState(u.Object)
		return s
	}
	eventually(t, 60*time.Second, "dishes Stuck", func(ctx context.Context) bool {
		s := state(ctx)
		return s != nil && s.Name == "Stuck"
	})

	decide := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"decide", "default/dishes", "--kubeconfig", cl.KubeconfigPath(), "--archive", archivePath}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	// page runs (15 s): the decision waits for it, and says so.
	code, stdout, stderr := decide("--choose", "Done", "--reason", "nobody needs it done")
	if code != 0 || !strings.Contains(stdout, " decided Stuck -> Done (nobody needs it done)\n") ||
		!strings.Contains(stdout, "waits: the handlers of this visit of Stuck have not finished: page (on entering Stuck)") {
		t.Errorf("opkit decide while page runs: exit %d\nstdout:\n%s\nstderr:\n%s\nwant it to say the decision waits for page", code, stdout, stderr)
	}
	code, stdout, stderr = decide("--choose", "Done", "--reason", "again")
	if code != 1 || !strings.Contains(stderr, "a decision is already sent for Chore default/dishes (by ") || !strings.Contains(stderr, "nothing was written") ||
		!strings.Contains(stderr, "kubectl annotate chore dishes -n default opkit.dev/decision-") {
		t.Errorf("a second decision: exit %d\nstdout:\n%s\nstderr:\n%s\nwant it refused before it is written", code, stdout, stderr)
	}
	eventually(t, 60*time.Second, "the decision taken once page is done", func(ctx context.Context) bool {
		s := state(ctx)
		return s != nil && s.Name == "Done" && s.Trigger == v1alpha1.TransitionDecision && s.Message == "nobody needs it done"
	})
	code, _, stderr = decide("--choose", "Done", "--reason", "late")
	if code != 1 || !strings.Contains(stderr, "which does not wait for a person: there is nothing to decide") {
		t.Errorf("a decision on a state that asks nothing: exit %d, stderr %s", code, stderr)
	}
}

// eventually polls cond every 200ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func(context.Context) bool) {
	t.Helper()
	for end := time.Now().Add(timeout); ; time.Sleep(200 * time.Millisecond) {
		if cond(t.Context()) {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

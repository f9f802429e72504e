package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// stateEngine is a running opkit run of one definition on one archive,
// which a test kills and starts again.
type stateEngine struct {
	t                *testing.T
	def, kc, archive string
	operator         string
	cmd              *exec.Cmd
	out              *lockedBuffer
	outputs          []*lockedBuffer
}

func (e *stateEngine) start() {
	e.t.Helper()
	e.cmd, e.out = startOpkit(e.t, "run", "-f", e.def, "--kubeconfig", e.kc, "--archive", e.archive, "--metrics-addr", "0")
	e.outputs = append(e.outputs, e.out)
	waitOutput(e.t, e.out, "operator "+e.operator+": running", 90*time.Second)
}

// kill kills the engine with SIGKILL and waits for it to be gone.
func (e *stateEngine) kill() {
	e.t.Helper()
	if err := e.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		e.t.Fatal(err)
	}
	_ = e.cmd.Wait()
}

// logs is every output of the engine's processes, for a failed test.
func (e *stateEngine) logs() string {
	var b strings.Builder
	for i, o := range e.outputs {
		fmt.Fprintf(&b, "--- opkit run #%d\n%s", i+1, o.String())
	}
	return b.String()
}

// transition is a state transition as the archive records it.
type transition struct {
	from, to, trigger, actor string
	seq                      string // the key's last part
}

func (tr transition) String() string {
	s := fmt.Sprintf("%s %s->%s (%s)", tr.seq, tr.from, tr.to, tr.trigger)
	if tr.actor != "" {
		s += " by " + tr.actor
	}
	return s
}

// transitions are an object's state transitions in the archive, oldest
// first.
func transitions(t *testing.T, archivePath, object string) []transition {
	t.Helper()
	runs := opkitRuns(t, archivePath, "--object", object, "--handler", v1alpha1.TransitionHandler, "--limit", "1000")
	var out []transition
	for _, r := range slices.Backward(runs) {
		tr := transition{trigger: r.Trigger, actor: r.Actor, seq: r.Key[strings.LastIndex(r.Key, "/")+1:]}
		if len(r.Diff) == 1 {
			tr.from, _ = r.Diff[0].Old.(string)
			tr.to, _ = r.Diff[0].New.(string)
		}
		if r.Outcome != archive.Succeeded || r.Action != "state" || r.Attempt != 1 {
			t.Errorf("transition record %+v: want action state, attempt 1, Succeeded", r)
		}
		out = append(out, tr)
	}
	return out
}

// objectState reads an object's status.state.
func readObjectState(t *testing.T, c client.Client, obj *unstructured.Unstructured) v1alpha1.ObjectState {
	t.Helper()
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	raw, _, _ := unstructured.NestedMap(obj.Object, "status", "state")
	data, _ := json.Marshal(raw)
	var s v1alpha1.ObjectState
	_ = json.Unmarshal(data, &s)
	return s
}

// eventReasons are the reasons of the Events about an object.
func eventReasons(t *testing.T, kc, ns, name string) map[string][]string {
	t.Helper()
	out, err := kubectl(t, kc, "get", "events", "-n", ns, "--field-selector", "involvedObject.name="+name, "-o", "json")
	if err != nil {
		t.Fatalf("kubectl get events: %v\n%s", err, out)
	}
	var list struct {
		Items []struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
			Note    string `json:"note"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	reasons := map[string][]string{}
	for _, e := range list.Items {
		reasons[e.Reason] = append(reasons[e.Reason], e.Message+e.Note)
	}
	return reasons
}

// TestDatabaseLifeCycle is the acceptance test of states (issue 21):
// examples/database under opkit run, its Deployment and Jobs run on the
// dev node. Created, it becomes Ready; a new version goes through
// Upgrading and Verifying back to Ready; a version that fails its
// verification asks a person (NeedsAttention) and waits, across a SIGKILL
// of the engine and its restart, until opkit decide rolls it back; the
// archive holds each transition once, the decision with who made it.
func TestDatabaseLifeCycle(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	began := time.Now()
	cl, err := devcluster.Start(t.Context(), devcluster.Options{DevNode: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	c, err := client.New(cl.RESTConfig(), client.Options{Scheme: clustertest.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range []string{"operator.yaml", "announce.py"} {
		data, err := os.ReadFile(filepath.Join("../../examples/database", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	kc := cl.KubeconfigPath()
	e := &stateEngine{t: t, def: filepath.Join(dir, "operator.yaml"), kc: kc, archive: filepath.Join(dir, "runs.db"), operator: "database"}
	e.start()
	defer func() {
		if t.Failed() {
			t.Logf("%s", e.logs())
		}
	}()
	t.Logf("plane and engine up in %s", time.Since(began).Round(time.Second))

	apply := func(version string) {
		t.Helper()
		manifest := filepath.Join(dir, "shop.yaml")
		writeTestFile(t, manifest, "apiVersion: demo.example.com/v1\nkind: Database\nmetadata: {name: shop, namespace: default}\nspec: {version: \""+version+"\"}\n")
		clustertest.Eventually(t, time.Minute, "kubectl apply version "+version, func(context.Context) (bool, error) {
			out, err := kubectl(t, kc, "apply", "-f", manifest)
			if err != nil && !strings.Contains(out, "the server could not find the requested resource") && !strings.Contains(out, "no matches for kind") {
				t.Fatalf("kubectl apply: %v\n%s", err, out)
			}
			return err == nil, nil
		})
	}
	db := &unstructured.Unstructured{}
	db.SetAPIVersion("demo.example.com/v1")
	db.SetKind("Database")
	db.SetNamespace("default")
	db.SetName("shop")
	status := func(field string) string {
		v, _, _ := unstructured.NestedString(db.Object, "status", field)
		return v
	}
	waitState := func(name string, within time.Duration, also func() bool) v1alpha1.ObjectState {
		t.Helper()
		var s v1alpha1.ObjectState
		clustertest.Eventually(t, within, "state "+name, func(context.Context) (bool, error) {
			s = readObjectState(t, c, db)
			return s.Name == name && (also == nil || also()), nil
		})
		return s
	}
	serverVersion := func() string {
		out, _ := kubectl(t, kc, "get", "deployment", "shop-server", "-n", "default", "-o", "jsonpath={.spec.template.metadata.labels.demo\\.example\\.com/version}")
		return out
	}

	// Created: Provisioning, then Ready once the server runs.
	apply("1.0")
	waitState("Ready", 3*time.Minute, func() bool { return status("version") == "1.0" })
	t.Logf("Ready at 1.0 after %s", time.Since(began).Round(time.Second))

	// A new version: Upgrading, Verifying (its Job succeeds), Ready.
	apply("1.1")
	waitState("Ready", 3*time.Minute, func() bool { return status("version") == "1.1" })
	if v := serverVersion(); v != "1.1" {
		t.Errorf("the server runs %q after the upgrade, want 1.1", v)
	}
	t.Logf("Ready at 1.1 after %s", time.Since(began).Round(time.Second))

	// A version that fails its verification: a person is asked.
	apply("1.2-broken")
	asked := waitState("NeedsAttention", 3*time.Minute, nil)
	if asked.Question == "" || !slices.Equal(asked.Choices, []string{"RollingBack", "Ready"}) || asked.Reason != "VerificationFailed" {
		t.Errorf("NeedsAttention: %+v; want the question, choices RollingBack and Ready, reason VerificationFailed", asked)
	}
	conds := statusConditionsOf(db)
	if cnd := conds[v1alpha1.ConditionNeedsPerson]; cnd["status"] != "True" || !strings.Contains(fmt.Sprint(cnd["message"]), asked.Question) {
		t.Errorf("NeedsPerson condition %v, want True with the question", cnd)
	}
	if cnd := conds[v1alpha1.ConditionState]; cnd["status"] != "True" || cnd["reason"] != "NeedsAttention" {
		t.Errorf("State condition %v, want True, reason NeedsAttention", cnd)
	}
	t.Logf("NeedsAttention after %s", time.Since(began).Round(time.Second))

	// SIGKILL and a restart: it still waits for a person; nothing moves,
	// nothing new is recorded, though the object is reconciled again (a
	// label changed).
	before := transitions(t, e.archive, "default/shop")
	e.kill()
	e.start()
	if out, err := kubectl(t, kc, "label", "database", "shop", "-n", "default", "touched=after-restart"); err != nil {
		t.Fatalf("kubectl label: %v\n%s", err, out)
	}
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		if s := readObjectState(t, c, db); s.Name != "NeedsAttention" || s.Seq != asked.Seq {
			t.Fatalf("after the restart the state moved without a decision: %+v (was %+v)", s, asked)
		}
	}
	if after := transitions(t, e.archive, "default/shop"); !slices.Equal(after, before) {
		t.Fatalf("transitions after the restart: %v; want the same as before it: %v", after, before)
	}

	// opkit decide: the question and its choices; a choice that is not
	// one is refused; a decision rolls back.
	ask := opkit(t, "", "decide", "default/shop", "-f", e.def, "--kubeconfig", kc, "--archive", e.archive)
	mustSucceed(t, ask, "opkit decide without --choose")
	for _, want := range []string{asked.Question, "RollingBack: run the last good version again", "Ready: keep the new version as it is"} {
		if !strings.Contains(ask.stdout, want) {
			t.Errorf("opkit decide without --choose lacks %q:\n%s", want, ask.stdout)
		}
	}
	bad := opkit(t, "", "decide", "default/shop", "--choose", "Verifying", "--reason", "try again", "--kubeconfig", kc, "--archive", e.archive)
	if bad.code == 0 || !strings.Contains(bad.stderr, "Verifying is not a choice of NeedsAttention") || !strings.Contains(bad.stderr, "RollingBack") {
		t.Errorf("opkit decide --choose Verifying: exit %d, stderr %s; want a refusal listing the choices", bad.code, bad.stderr)
	}
	decided := opkit(t, "", "decide", "default/shop", "--choose", "RollingBack", "--reason", "1.2 fails its checks", "--kubeconfig", kc, "--archive", e.archive)
	mustSucceed(t, decided, "opkit decide --choose RollingBack")
	by, _, ok := strings.Cut(strings.TrimPrefix(decided.stdout, "Database default/shop: "), " decided NeedsAttention -> RollingBack")
	if !ok || by == "" {
		t.Fatalf("opkit decide printed %q; want who decided what", decided.stdout)
	}
	final := waitState("Ready", 3*time.Minute, func() bool { return status("rejected") == "1.2-broken" })
	if status("version") != "1.1" || serverVersion() != "1.1" {
		t.Errorf("after the roll-back: status.version %q, the server runs %q; want 1.1 for both", status("version"), serverVersion())
	}
	if _, ok := db.GetAnnotations()[v1alpha1.DecisionAnnotation]; ok {
		t.Errorf("the decision annotation is still on the object: %v", db.GetAnnotations())
	}
	t.Logf("rolled back and Ready after %s", time.Since(began).Round(time.Second))

	// The archive: every transition once, in order, the decision by whom.
	want := []transition{
		{seq: "1", to: "Provisioning", trigger: v1alpha1.TransitionInitial},
		{seq: "2", from: "Provisioning", to: "Ready", trigger: v1alpha1.TransitionGuard},
		{seq: "3", from: "Ready", to: "Upgrading", trigger: v1alpha1.TransitionGuard},
		{seq: "4", from: "Upgrading", to: "Verifying", trigger: v1alpha1.TransitionGuard},
		{seq: "5", from: "Verifying", to: "Ready", trigger: v1alpha1.TransitionGuard},
		{seq: "6", from: "Ready", to: "Upgrading", trigger: v1alpha1.TransitionGuard},
		{seq: "7", from: "Upgrading", to: "Verifying", trigger: v1alpha1.TransitionGuard},
		{seq: "8", from: "Verifying", to: "NeedsAttention", trigger: v1alpha1.TransitionGuard},
		{seq: "9", from: "NeedsAttention", to: "RollingBack", trigger: v1alpha1.TransitionDecision, actor: by},
		{seq: "10", from: "RollingBack", to: "Ready", trigger: v1alpha1.TransitionGuard},
	}
	if got := transitions(t, e.archive, "default/shop"); !slices.Equal(got, want) {
		t.Errorf("transitions recorded:\n%v\nwant\n%v", got, want)
	}
	if final.Seq != 10 || final.From != "RollingBack" || final.Reason != "RolledBack" {
		t.Errorf("final state %+v; want seq 10, from RollingBack, reason RolledBack", final)
	}
	// The announce handler succeeded once per visit of Ready and
	// NeedsAttention (a run the SIGKILL interrupted is Cancelled, and ran
	// again with its key).
	uid := string(db.GetUID())
	clustertest.Eventually(t, time.Minute, "announce ran for Ready again", func(context.Context) (bool, error) {
		runs := opkitRuns(t, e.archive, "--object", "default/shop", "--handler", "announce", "--outcome", "Succeeded")
		return slices.ContainsFunc(runs, func(r archive.Run) bool { return r.Key == uid+"/state/10/announce" }), nil
	})
	announced := map[string]int{}
	for _, r := range opkitRuns(t, e.archive, "--object", "default/shop", "--handler", "announce", "--limit", "1000") {
		if r.Trigger != v1alpha1.OnEnter || (r.Outcome != archive.Succeeded && r.Outcome != archive.Cancelled) {
			t.Errorf("announce run %+v: want Succeeded (or Cancelled by the SIGKILL) on enter", r)
		}
		if r.Outcome == archive.Succeeded {
			announced[r.Key]++
		}
	}
	for _, seq := range []string{"2", "5", "8", "10"} {
		if n := announced[uid+"/state/"+seq+"/announce"]; n != 1 {
			t.Errorf("announce succeeded %d times for visit %s, want once (by key: %v)", n, seq, announced)
		}
	}
	if len(announced) != 4 {
		t.Errorf("announce ran for the keys %v; want the visits 2, 5, 8 and 10 only", announced)
	}
	reasons := eventReasons(t, kc, "default", "shop")
	for _, r := range []string{"StateChanged", "NeedsPerson", "Decided"} {
		if len(reasons[r]) == 0 {
			t.Errorf("no %s Event; the Events: %v", r, reasons)
		}
	}
	if d := strings.Join(reasons["Decided"], "\n"); !strings.Contains(d, by) || !strings.Contains(d, "1.2 fails its checks") {
		t.Errorf("the Decided Event %q does not say who and why", d)
	}
	t.Logf("the whole life cycle in %s", time.Since(began).Round(time.Second))
}

// statusConditionsOf reads an object's conditions by type.
func statusConditionsOf(obj *unstructured.Unstructured) map[string]map[string]any {
	out := map[string]map[string]any{}
	list, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range list {
		if m, ok := c.(map[string]any); ok {
			out[fmt.Sprint(m["type"])] = m
		}
	}
	return out
}

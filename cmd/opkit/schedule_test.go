package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// importsOperator is an operator-wide schedule whose handler is
// keyHandler in the directory given. "on" is quoted: kubectl's YAML reads
// a bare on as the boolean true.
const importsOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: imports}
spec:
  handlers:
  - name: import
    "on": [schedule]
    schedule: {every: 3s}
    retry: {maxAttempts: 1}
    exec:
      command: [%q]
      env: [{name: DIR, value: %q}]
`

// TestScheduleRunRunsAFailedSlotNowRecordedWithWhoAndWhy lets a slot of an
// operator-wide schedule fail, fixes its cause, and runs it now with opkit
// schedule run: the command prints the run and its outcome, and the
// archive records a manual run with its own key, the Kubernetes user the
// CLI ran as and the reason; a run now that fails exits 1 saying why, and
// what cannot apply is refused with why.
func TestScheduleRunRunsAFailedSlotNowRecordedWithWhoAndWhy(t *testing.T) {
	t.Parallel()
	cl, _ := startPlane(t)
	dir := t.TempDir()
	write := func(name, data string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("handler.sh", keyHandler, 0o755)
	write("fail", "", 0o644)
	write("imports.yaml", fmt.Sprintf(importsOperator, filepath.Join(dir, "handler.sh"), dir), 0o644)
	archivePath := filepath.Join(dir, "runs.db")
	kc := cl.KubeconfigPath()
	_, out := startOpkit(t, "run", "--kubeconfig", kc, "--archive", archivePath)
	waitOutput(t, out, "running the Operators of the cluster", 60*time.Second)
	for _, f := range []string{filepath.Join(dir, "imports.yaml"), "../../examples/printer/operator.yaml"} {
		var last string
		clustertest.Eventually(t, time.Minute, "kubectl apply -f "+f, func(context.Context) (bool, error) {
			_, err := kubectl(t, kc, "apply", "-f", f)
			if err != nil && err.Error() != last {
				last = err.Error()
				t.Log(last)
			}
			return err == nil, nil
		})
	}
	clustertest.Eventually(t, time.Minute, "a slot that gave up", func(context.Context) (bool, error) {
		res := opkit(t, "", "runs", "--archive", archivePath, "--operator", "imports", "--trigger", v1alpha1.OnSchedule, "--outcome", string(archive.GaveUp))
		return res.code == 0 && strings.Contains(res.stdout, "GaveUp"), nil
	})

	// Its cause fixed, the slot runs now.
	if err := os.Remove(filepath.Join(dir, "fail")); err != nil {
		t.Fatal(err)
	}
	res := opkit(t, "", "schedule", "run", "imports", "import", "--reason", "the registry is back", "--kubeconfig", kc)
	if res.code != 0 || !strings.Contains(res.stdout, "operator imports: handler import asked to run now by ") || !strings.Contains(res.stdout, ": Succeeded, run ") {
		t.Fatalf("opkit schedule run: code %d\nstdout %s\nstderr %s", res.code, res.stdout, res.stderr)
	}
	who := strings.SplitN(strings.SplitN(res.stdout, "asked to run now by ", 2)[1], ":", 2)[0]
	id := strings.Fields(strings.SplitN(res.stdout, ": Succeeded, run ", 2)[1])[0]
	manual := opkitRuns(t, archivePath, "--operator", "imports", "--trigger", v1alpha1.TriggerManual)
	if len(manual) != 1 {
		t.Fatalf("%d manual runs, want 1: %+v", len(manual), manual)
	}
	if r := manual[0]; r.ID != id || r.Outcome != archive.Succeeded || r.Actor != who || !strings.HasPrefix(r.Key, "imports/schedule/import/manual/") {
		t.Errorf("the run now is recorded as %s %s, actor %q, key %s; want %s Succeeded, actor %s, key imports/schedule/import/manual/<request>", r.ID, r.Outcome, r.Actor, r.Key, id, who)
	}
	if res := opkit(t, "", "logs", id, "--archive", archivePath); !strings.Contains(res.stdout, "run now by "+who+": the registry is back") {
		t.Errorf("the run now's log says %q, want who asked and why", res.stdout)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "keys")); !strings.Contains(string(data), manual[0].Key) {
		t.Errorf("the handler did not see the run now's key %s: %s", manual[0].Key, data)
	}

	// A run now that fails says so, and exits 1.
	write("fail", "", 0o644)
	res = opkit(t, "", "schedule", "run", "imports", "import", "--kubeconfig", kc)
	if res.code == 0 || !strings.Contains(res.stderr, "GaveUp after 1 attempt(s)") {
		t.Errorf("a failing run now: code %d\nstdout %s\nstderr %s; want it to exit 1 saying it gave up", res.code, res.stdout, res.stderr)
	}

	// What cannot apply is refused, with why.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"nobody", "import"}, "there is no Operator nobody in the cluster"},
		{[]string{"imports", "nosuch"}, "the operator imports has no handler nosuch: its handlers are import"},
		{[]string{"printer", "announce"}, "it is not an operator-wide schedule"},
	} {
		res := opkit(t, "", append([]string{"schedule", "run"}, append(c.args, "--kubeconfig", kc)...)...)
		if res.code == 0 || !strings.Contains(res.stderr, c.want) {
			t.Errorf("opkit schedule run %s: code %d, stderr %s; want it refused saying %q", strings.Join(c.args, " "), res.code, res.stderr, c.want)
		}
	}

	// The whole operator paused: no slot runs, and a run now is refused
	// saying who paused it and why; resumed, the slots run again.
	slotsSince := func(since time.Time) int {
		n := 0
		for _, r := range opkitRuns(t, archivePath, "--operator", "imports", "--trigger", v1alpha1.OnSchedule) {
			if r.StartedAt.After(since) {
				n++
			}
		}
		return n
	}
	res = opkit(t, "", "pause", "--operator", "imports", "--all", "--reason", "the registry migrates", "--kubeconfig", kc)
	if res.code != 0 || !strings.Contains(res.stdout, "operator imports: handlers of every object paused by "+who+": the registry migrates") {
		t.Fatalf("opkit pause --operator imports --all: code %d\nstdout %s\nstderr %s", res.code, res.stdout, res.stderr)
	}
	clustertest.Eventually(t, time.Minute, "the engine's OperatorPaused Event", func(context.Context) (bool, error) {
		events, _ := kubectl(t, kc, "get", "events", "-n", "default", "--field-selector", "involvedObject.name=imports,reason=OperatorPaused", "-o", "jsonpath={.items[*].note}{.items[*].message}")
		return strings.Contains(events, "paused by "+who+": the registry migrates"), nil
	})
	paused := time.Now()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"schedule", "run", "imports", "import"}, "the operator imports is paused (by " + who},
		{[]string{"pause", "--operator", "imports", "--all"}, "the operator imports is already paused (by " + who},
		{[]string{"pause", "default/x", "--operator", "imports", "--all"}, "give no object"},
	} {
		res := opkit(t, "", append(c.args, "--kubeconfig", kc)...)
		if res.code == 0 || !strings.Contains(res.stderr, c.want) {
			t.Errorf("opkit %s: code %d, stderr %s; want it refused saying %q", strings.Join(c.args, " "), res.code, res.stderr, c.want)
		}
	}
	time.Sleep(7 * time.Second) // two slots of every 3s come due
	if n := slotsSince(paused); n != 0 {
		t.Errorf("%d slot(s) ran while the operator was paused", n)
	}
	res = opkit(t, "", "resume", "--operator", "imports", "--all", "--kubeconfig", kc)
	if res.code != 0 || !strings.Contains(res.stdout, "operator imports: handlers of every object resumed by "+who) {
		t.Fatalf("opkit resume --operator imports --all: code %d\nstdout %s\nstderr %s", res.code, res.stdout, res.stderr)
	}
	resumed := time.Now()
	clustertest.Eventually(t, time.Minute, "a slot after the resume", func(context.Context) (bool, error) {
		return slotsSince(resumed) > 0, nil
	})
	if res := opkit(t, "", "resume", "--operator", "imports", "--all", "--kubeconfig", kc); res.code == 0 || !strings.Contains(res.stderr, "the operator imports is not paused as a whole") {
		t.Errorf("a second opkit resume --all: code %d, stderr %s; want it refused", res.code, res.stderr)
	}
}

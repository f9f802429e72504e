package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// jobsOperator is a Task's life cycle: Waiting until spec.go, or Expired
// after 6 s; Working while its enter handler runs, leaving Waiting running
// the exit handler; Done once the enter run succeeded (a guard on run).
// spec.size cannot change while Working. Both handlers are visitHandler;
// work holds while $DIR/sleep exists.
const jobsOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: tasks}
spec:
  resource:
    group: tasks.example.com
    kind: Task
    versions:
    - name: v1
      schema: {type: object, properties: {go: {type: boolean}, size: {type: integer}}}
  states:
  - name: Waiting
    initial: true
    transitions:
    - {to: Working, reason: Started, when: "has(self.spec.go) && self.spec.go"}
    timeout: {after: 6s, to: Expired, reason: NobodyCame}
  - name: Working
    refuses: [spec.size]
    transitions:
    - {to: Done, reason: Worked, when: "run.outcome == 'Succeeded'"}
  - {name: Done, final: true}
  - {name: Expired, final: true}
  handlers:
  - name: leave
    on: [exit]
    states: [Waiting]
    exec: {command: [./handler.sh], env: [{name: DIR, value: %[1]q}]}
  - name: work
    on: [enter]
    states: [Working]
    exec: {command: [./handler.sh], env: [{name: DIR, value: %[1]q}, {name: HOLD, value: "1"}]}
`

// visitHandler appends its idempotency key to $DIR/keys; with $HOLD set,
// it sleeps the first time it sees a key while $DIR/sleep exists.
const visitHandler = `#!/bin/bash
set -u
cat > /dev/null
seen=
grep -qxF "$OPKIT_IDEMPOTENCY_KEY" "$DIR/keys" 2>/dev/null && seen=1
echo "$OPKIT_IDEMPOTENCY_KEY" >> "$DIR/keys"
if [ -n "${HOLD:-}" ] && [ -e "$DIR/sleep" ] && [ -z "$seen" ]; then
  sleep 60
fi
`

// TestStateTimeoutAndVisitHandlersOnceAcrossSIGKILL runs the tasks
// operator under opkit run, killed with SIGKILL twice: a Task whose
// Waiting timed out while no engine ran leaves it once, on the timeout,
// when the engine starts again; a Task killed amid its Working enter run
// runs it again with the same key, its exit run of Waiting not again, and
// is Done once; a change of spec.size while Working is refused by the API
// server naming the state.
func TestStateTimeoutAndVisitHandlersOnceAcrossSIGKILL(t *testing.T) {
	t.Parallel()
	cl, c := startPlane(t)
	began := time.Now()
	dir := t.TempDir()
	write := func(name, data string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("handler.sh", visitHandler, 0o755)
	write("tasks.yaml", fmt.Sprintf(jobsOperator, dir), 0o644)
	kc := cl.KubeconfigPath()
	e := &stateEngine{t: t, def: filepath.Join(dir, "tasks.yaml"), kc: kc, archive: filepath.Join(dir, "runs.db"), operator: "tasks"}
	e.start()
	defer func() {
		if t.Failed() {
			t.Logf("%s", e.logs())
		}
	}()
	apply := func(name, spec string) (string, error) {
		t.Helper()
		write(name+".yaml", "apiVersion: tasks.example.com/v1\nkind: Task\nmetadata: {name: "+name+", namespace: default}\nspec: "+spec+"\n", 0o644)
		return kubectl(t, kc, "apply", "-f", filepath.Join(dir, name+".yaml"))
	}
	task := func(name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("tasks.example.com/v1")
		u.SetKind("Task")
		u.SetNamespace("default")
		u.SetName(name)
		return u
	}
	waitState := func(obj *unstructured.Unstructured, name string, within time.Duration) v1alpha1.ObjectState {
		t.Helper()
		var s v1alpha1.ObjectState
		clustertest.Eventually(t, within, obj.GetName()+" in "+name, func(context.Context) (bool, error) {
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			s = readObjectState(t, c, obj)
			return s.Name == name, nil
		})
		return s
	}
	keys := func() []string {
		data, _ := os.ReadFile(filepath.Join(dir, "keys"))
		return strings.Fields(string(data))
	}

	// The timeout expires while no engine runs: once, when it starts.
	clustertest.Eventually(t, time.Minute, "kubectl apply late", func(context.Context) (bool, error) {
		_, err := apply("late", "{size: 1}")
		return err == nil, nil
	})
	late := task("late")
	waiting := waitState(late, "Waiting", time.Minute)
	e.kill()
	since, err := time.Parse(time.RFC3339, waiting.Since)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(since.Add(8 * time.Second))) // past the 6 s deadline, with a margin
	e.start()
	expired := waitState(late, "Expired", time.Minute)
	if expired.Seq != 2 || expired.Trigger != v1alpha1.TransitionTimeout || expired.Reason != "NobodyCame" || expired.From != "Waiting" {
		t.Errorf("late after the restart: %+v; want seq 2, from Waiting on the timeout, reason NobodyCame", expired)
	}
	time.Sleep(5 * time.Second) // any second firing would show by now
	want := []transition{{seq: "1", to: "Waiting", trigger: v1alpha1.TransitionInitial}, {seq: "2", from: "Waiting", to: "Expired", trigger: v1alpha1.TransitionTimeout}}
	if got := transitions(t, e.archive, "default/late"); !slices.Equal(got, want) {
		t.Errorf("late's transitions: %v, want %v", got, want)
	}
	if s := readObjectState(t, c, late); s.Seq != 2 {
		t.Errorf("late moved on after Expired: %+v", s)
	}
	t.Logf("the timeout fired once across the restart after %s", time.Since(began).Round(time.Second))

	// A Task killed amid its enter run.
	write("sleep", "", 0o644)
	if out, err := apply("busy", "{size: 1, go: true}"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	busy := task("busy")
	waitState(busy, "Working", time.Minute)
	uid := string(busy.GetUID())
	enterKey, exitKey := uid+"/state/2/work", uid+"/state/2/leave/exit"
	clustertest.Eventually(t, time.Minute, "the enter run started", func(context.Context) (bool, error) {
		return slices.Contains(keys(), enterKey), nil
	})

	// Refused while Working, by the API server, naming the state.
	out, err := apply("busy", "{size: 2, go: true}")
	if err == nil || !strings.Contains(err.Error()+out, "spec.size cannot change while the Task is Working") {
		t.Errorf("changing spec.size while Working: %v\n%s\nwant a refusal naming spec.size and Working", err, out)
	}

	e.kill()
	if err := os.Remove(filepath.Join(dir, "sleep")); err != nil {
		t.Fatal(err)
	}
	e.start()
	done := waitState(busy, "Done", time.Minute)
	if done.Seq != 3 || done.Reason != "Worked" {
		t.Errorf("busy: %+v, want Done at seq 3 (Worked)", done)
	}
	count := func(key string) int {
		n := 0
		for _, k := range keys() {
			if k == key {
				n++
			}
		}
		return n
	}
	if n := count(exitKey); n != 1 {
		t.Errorf("the exit run of Waiting ran %d times, want once (keys: %v)", n, keys())
	}
	if n := count(enterKey); n != 2 {
		t.Errorf("the enter run of Working started %d times, want twice: once killed, once again with its key (keys: %v)", n, keys())
	}
	var succeeded, cancelled int
	for _, r := range opkitRuns(t, e.archive, "--object", "default/busy", "--handler", "work") {
		switch {
		case r.Key != enterKey || r.Trigger != v1alpha1.OnEnter:
			t.Errorf("work run %+v, want key %s on enter", r, enterKey)
		case r.Outcome == archive.Succeeded:
			succeeded++
		case r.Outcome == archive.Cancelled:
			cancelled++
		}
	}
	if succeeded != 1 || cancelled != 1 {
		t.Errorf("work runs: %d Succeeded, %d Cancelled; want one each", succeeded, cancelled)
	}
	want = []transition{
		{seq: "1", to: "Waiting", trigger: v1alpha1.TransitionInitial},
		{seq: "2", from: "Waiting", to: "Working", trigger: v1alpha1.TransitionGuard},
		{seq: "3", from: "Working", to: "Done", trigger: v1alpha1.TransitionGuard},
	}
	if got := transitions(t, e.archive, "default/busy"); !slices.Equal(got, want) {
		t.Errorf("busy's transitions: %v, want %v", got, want)
	}
	t.Logf("done in %s", time.Since(began).Round(time.Second))
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// rerunOperator's notify handler (rerunHandler) runs on create only.
const rerunOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: memos}
spec:
  resource:
    group: memos.example.com
    kind: Memo
    versions:
    - name: v1
      schema: {type: object, properties: {text: {type: string}}}
  handlers:
  - name: notify
    on: [create]
    exec: {command: [./handler.py], env: [{name: DIR, value: %q}]}
`

// rerunHandler appends what it got to $DIR/seen, one JSON line, and
// answers with an Event naming the text.
const rerunHandler = `#!/usr/bin/env python3
import json, os, sys
ctx = json.load(sys.stdin)
seen = {"trigger": ctx["trigger"], "key": ctx["idempotencyKey"], "text": ctx["object"]["spec"]["text"], "rerunOf": ctx.get("rerunOf", "")}
with open(os.path.join(os.environ["DIR"], "seen"), "a") as f:
    f.write(json.dumps(seen) + "\n")
print(json.dumps({"events": [{"type": "Normal", "reason": "Notified", "message": "memo says " + seen["text"]}]}))
`

type seenRun struct{ Trigger, Key, Text, RerunOf string }

// TestRerunThroughTheBinary: a succeeded run re-run with opkit rerun runs
// the handler again with the object as it is now, then --same-input with
// what it got; the handler sees trigger rerun and the original run; the
// re-runs have their keys, actor and reason, and opkit runs and opkit
// logs show the links. opkit replay of the run gives the result recorded.
// A gone object is refused with the reason.
func TestRerunThroughTheBinary(t *testing.T) {
	t.Parallel()
	cl, c := startPlane(t)
	kc := cl.KubeconfigPath()
	dir := t.TempDir()
	def := filepath.Join(dir, "operator.yaml")
	writeTestFile(t, def, fmt.Sprintf(rerunOperator, dir))
	if err := os.WriteFile(filepath.Join(dir, "handler.py"), []byte(rerunHandler), 0o755); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(dir, "runs.db")
	_, out := startOpkit(t, "run", "-f", def, "--kubeconfig", kc, "--archive", store, "--metrics-addr", "0")
	waitOutput(t, out, "operator memos: running", 90*time.Second)
	defer func() {
		if t.Failed() {
			t.Logf("opkit run:\n%s", out.String())
		}
	}()
	seen := func(n int) []seenRun {
		t.Helper()
		var lines []seenRun
		clustertest.Eventually(t, time.Minute, fmt.Sprintf("%d runs of the handler", n), func(context.Context) (bool, error) {
			data, _ := os.ReadFile(filepath.Join(dir, "seen"))
			lines = nil
			for l := range strings.Lines(string(data)) {
				var s seenRun
				if err := json.Unmarshal([]byte(l), &s); err != nil {
					return false, err
				}
				lines = append(lines, s)
			}
			return len(lines) >= n, nil
		})
		return lines
	}

	memo := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "memos.example.com/v1", "kind": "Memo",
		"metadata": map[string]any{"name": "m1", "namespace": "default"}, "spec": map[string]any{"text": "one"},
	}}
	clustertest.Eventually(t, time.Minute, "the Memo created", func(ctx context.Context) (bool, error) {
		return c.Create(ctx, memo) == nil, nil
	})
	first := seen(1)[0]
	var page archive.Page
	clustertest.Eventually(t, 30*time.Second, "the create run succeeded", func(context.Context) (bool, error) {
		r := opkit(t, "", "runs", "--archive", store, "--operator", "memos", "-o", "json")
		return json.Unmarshal([]byte(r.stdout), &page) == nil && len(page.Runs) == 1 && page.Runs[0].Outcome == archive.Succeeded, nil
	})
	created := page.Runs[0]
	if err := c.Patch(t.Context(), memo, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"text":"two"}}`))); err != nil {
		t.Fatal(err)
	}

	now := opkit(t, "", "rerun", created.ID, "--reason", "the notifier was down", "--kubeconfig", kc, "--archive", store)
	mustSucceed(t, now, "opkit rerun")
	if !strings.Contains(now.stdout, "runs handler notify again, as run ") || !strings.Contains(now.stdout, "follow it with: opkit logs -f ") {
		t.Errorf("opkit rerun's answer:\n%s\nwant the engine's: the new run", now.stdout)
	}
	got := seen(2)[1]
	if want := (seenRun{"rerun", created.Key + "/rerun/1", "two", created.ID}); got != want {
		t.Errorf("the re-run got %+v; want %+v (the object now)", got, want)
	}
	mustSucceed(t, opkit(t, "", "rerun", created.ID, "--same-input", "--kubeconfig", kc, "--archive", store), "opkit rerun --same-input")
	got = seen(3)[2]
	if want := (seenRun{"rerun", created.Key + "/rerun/2", first.Text, created.ID}); got != want {
		t.Errorf("the re-run --same-input got %+v; want %+v (the recorded input)", got, want)
	}

	clustertest.Eventually(t, 30*time.Second, "the re-runs succeeded", func(context.Context) (bool, error) {
		r := opkit(t, "", "runs", "--archive", store, "--operator", "memos", "--trigger", "rerun", "--outcome", "Succeeded", "-o", "json")
		return json.Unmarshal([]byte(r.stdout), &page) == nil && len(page.Runs) == 2, nil
	})
	for _, r := range page.Runs {
		if r.RerunOf != created.ID || r.Actor == "" {
			t.Errorf("re-run %s: rerunOf %q actor %q; want %s and who asked", r.ID, r.RerunOf, r.Actor, created.ID)
		}
	}
	table := opkit(t, "", "runs", "--archive", store, "--operator", "memos")
	if !strings.Contains(table.stdout, "re-run of "+created.ID+" by ") {
		t.Errorf("opkit runs:\n%s\nwant the re-runs shown as re-runs of %s", table.stdout, created.ID)
	}
	logs := opkit(t, "", "logs", created.ID, "--archive", store)
	if !strings.Contains(logs.stderr, "run "+created.ID+" was run again as: ") {
		t.Errorf("opkit logs %s: stderr %q; want its re-runs", created.ID, logs.stderr)
	}
	reason := opkit(t, "", "logs", page.Runs[1].ID, "--archive", store)
	if !strings.Contains(reason.stderr, "re-runs run "+created.ID+", asked by ") || !strings.Contains(reason.stderr, "the notifier was down") {
		t.Errorf("opkit logs of the first re-run: stderr %q; want the run it repeats, who asked and why", reason.stderr)
	}

	replay := opkit(t, "", "replay", created.ID, "-f", def, "--archive", store)
	if replay.code != 0 || !strings.Contains(replay.stdout, "the same as run "+created.ID) {
		t.Errorf("opkit replay: exit %d\nstdout: %s\nstderr: %s\nwant the recorded result", replay.code, replay.stdout, replay.stderr)
	}

	if err := c.Delete(t.Context(), memo); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, "the Memo gone", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(memo), memo)
		return client.IgnoreNotFound(err) == nil && err != nil, nil
	})
	gone := opkit(t, "", "rerun", created.ID, "--kubeconfig", kc, "--archive", store)
	if gone.code == 0 || !strings.Contains(gone.stderr, "is gone") {
		t.Errorf("opkit rerun of a deleted object's run: exit %d, stderr %s; want a refusal saying the object is gone", gone.code, gone.stderr)
	}
}

// TestAWatchedObjectsRunIsRerunAgainAndAgain: opkit never writes an
// object it only watches, so its re-run request stays on it once
// answered; opkit rerun takes an answered request for done, and a second
// and a third re-run of its run each run once.
func TestAWatchedObjectsRunIsRerunAgainAndAgain(t *testing.T) {
	t.Parallel()
	cl, c := startPlane(t)
	kc := cl.KubeconfigPath()
	dir := t.TempDir()
	def := filepath.Join(dir, "operator.yaml")
	writeTestFile(t, def, fmt.Sprintf(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: notes-watch}
spec:
  watch: {apiVersion: v1, kind: ConfigMap, namespaces: [default]}
  handlers:
  - name: noted
    on: [create]
    exec: {command: [sh, -c, 'input=$(cat); case "$input" in *"\"trigger\":\"rerun\""*) echo rerun >> "$DIR/seen";; esac'], env: [{name: DIR, value: %q}]}
`, dir))
	store := filepath.Join(dir, "runs.db")
	_, out := startOpkit(t, "run", "-f", def, "--kubeconfig", kc, "--archive", store, "--metrics-addr", "0")
	waitOutput(t, out, "operator notes-watch: running", 90*time.Second)
	runs := func(n int) {
		t.Helper()
		clustertest.Eventually(t, time.Minute, fmt.Sprintf("%d re-runs of the handler", n), func(context.Context) (bool, error) {
			data, _ := os.ReadFile(filepath.Join(dir, "seen"))
			return strings.Count(string(data), "rerun\n") >= n, nil
		})
	}
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "watched", "namespace": "default"}, "data": map[string]any{"a": "1"},
	}}
	if err := c.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	var page archive.Page
	clustertest.Eventually(t, 30*time.Second, "the create run succeeded", func(context.Context) (bool, error) {
		r := opkit(t, "", "runs", "--archive", store, "--operator", "notes-watch", "--object", "default/watched", "--trigger", "create", "-o", "json")
		return json.Unmarshal([]byte(r.stdout), &page) == nil && len(page.Runs) == 1 && page.Runs[0].Outcome == archive.Succeeded, nil
	})
	created := page.Runs[0]
	for i := 1; i <= 3; i++ {
		r := opkit(t, "", "rerun", created.ID, "--reason", fmt.Sprintf("time %d", i), "--kubeconfig", kc, "--archive", store)
		mustSucceed(t, r, fmt.Sprintf("opkit rerun, time %d", i))
		if want := "as run "; !strings.Contains(r.stdout, want) {
			t.Errorf("opkit rerun, time %d:\n%s\nwant the engine's answer, the new run", i, r.stdout)
		}
		runs(i)
	}
	clustertest.Eventually(t, 30*time.Second, "three re-runs recorded", func(context.Context) (bool, error) {
		r := opkit(t, "", "runs", "--archive", store, "--operator", "notes-watch", "--trigger", "rerun", "-o", "json")
		return json.Unmarshal([]byte(r.stdout), &page) == nil && len(page.Runs) == 3, nil
	})
	for _, r := range page.Runs {
		if r.RerunOf != created.ID || !strings.HasPrefix(r.Key, created.Key+"/rerun/") {
			t.Errorf("re-run %s: rerunOf %q key %q; want %s and a key of its own", r.ID, r.RerunOf, r.Key, created.ID)
		}
	}
}

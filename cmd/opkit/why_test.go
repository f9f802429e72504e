package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/why"
)

// whyOperatorYAML: a GitHub comment creates or changes a Note (the
// source's object), whose handler print runs on create and update.
const whyOperatorYAML = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: hooks}
spec:
  resource:
    group: why.example.com
    kind: Note
    versions:
    - name: v1
      schema:
        type: object
        properties:
          text: {type: string}
  sources:
  - name: github
    webhook:
      github: {secretRef: {namespace: default, name: hook, key: secret}}
    object:
      metadata: {name: "pr-${string(payload.issue.number)}", namespace: default}
      spec: {text: "${payload.comment.body}"}
  handlers:
  - name: print
    on: [create, update]
    exec:
      command: [/bin/echo, '{"status": {"printed": true}}']
`

// TestWhySaysTheDeliveryTheSpecChangeAndTheRunsBehindAnObject: alice's
// comment creates a Note through its source, and a change of its spec by
// someone else runs its handler again. opkit why names, newest first,
// the update run caused by the spec change, the change itself, the
// create run and alice's delivery that applied the object.
func TestWhySaysTheDeliveryTheSpecChangeAndTheRunsBehindAnObject(t *testing.T) {
	t.Parallel()
	cl, c := startPlane(t)
	dir := t.TempDir()
	def := filepath.Join(dir, "why.yaml")
	if err := os.WriteFile(def, []byte(whyOperatorYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hook"}, StringData: map[string]string{"secret": "s3cret"}}
	if err := c.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	archivePath := filepath.Join(dir, "runs.db")
	cmd, out := startOpkit(t, "run", "-f", def, "--kubeconfig", cl.KubeconfigPath(), "--archive", archivePath, "--hooks-addr", "127.0.0.1:0", "--metrics-addr", "0")
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	url := hooksSourceURL(t, out)
	body := []byte(`{"action": "created", "issue": {"number": 7}, "comment": {"body": "first"}, "sender": {"login": "alice"}}`)
	if status, answer := postDelivery(t, url, "d-1", "s3cret", body); status != http.StatusAccepted {
		t.Fatalf("answered %d %v, want 202", status, answer)
	}
	waitRunOutcome(t, archivePath, "pr-7", "Succeeded")

	note := &unstructured.Unstructured{}
	note.SetAPIVersion("why.example.com/v1")
	note.SetKind("Note")
	clustertest.Eventually(t, time.Minute, "the spec changed by bob", func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "pr-7"}, note); err != nil {
			return false, err
		}
		if err := unstructured.SetNestedField(note.Object, "second", "spec", "text"); err != nil {
			return false, err
		}
		err := c.Update(ctx, note, client.FieldOwner("bob"))
		return err == nil, nilIfConflict(err)
	})
	clustertest.Eventually(t, time.Minute, "the update run", func(context.Context) (bool, error) {
		return len(opkitRuns(t, archivePath, "--object", "default/pr-7", "--trigger", "update", "--outcome", "Succeeded")) == 1, nil
	})

	res := opkit(t, "", "why", "default/pr-7", "--kind", "Note", "--kubeconfig", cl.KubeconfigPath(), "--archive", archivePath, "-o", "json")
	if res.code != 0 {
		t.Fatalf("opkit why: exit %d: %s", res.code, res.stderr)
	}
	var chain why.Chain
	if err := json.Unmarshal([]byte(res.stdout), &chain); err != nil {
		t.Fatalf("opkit why -o json: %v\n%s", err, res.stdout)
	}
	// What the chain must say, in this order (newest first), among the
	// changes of managers (the engine's status writes) around them.
	var got []string
	for _, e := range chain.Entries {
		switch {
		case e.Kind == "run" && e.Run.Trigger == "update" && len(e.Diff) == 1 && e.Diff[0].Path == "spec.text" && e.Diff[0].New == "second":
			got = append(got, "update run caused by spec.text")
		case e.Kind == "change" && e.Change.Manager == "bob" && slices.ContainsFunc(e.Change.Fields, func(f why.Field) bool { return f.Path == "spec.text" && f.Value == "second" }):
			got = append(got, "bob changed spec.text")
		case e.Kind == "run" && e.Run.Trigger == "create":
			got = append(got, "create run")
		case e.Kind == "delivery" && e.Delivery.Sender == "alice" && e.Delivery.DeliveryID == "d-1":
			got = append(got, "alice's delivery")
		}
	}
	want := []string{"update run caused by spec.text", "bob changed spec.text", "create run", "alice's delivery"}
	if !slices.Equal(got, want) {
		t.Errorf("opkit why says %v, want %v, newest first:\n%s", got, want, res.stdout)
	}
	// The table says it too.
	res = opkit(t, "", "why", "default/pr-7", "--kubeconfig", cl.KubeconfigPath(), "--archive", archivePath)
	t.Logf("opkit why default/pr-7:\n%s", res.stdout)
	for _, s := range []string{"Note default/pr-7, newest first:", "issue_comment by alice", `caused by spec.text "first" -> "second"`, "by bob (Update)", "a run's log: opkit logs "} {
		if !strings.Contains(res.stdout, s) {
			t.Errorf("opkit why's table lacks %q:\n%s%s", s, res.stdout, res.stderr)
		}
	}
	// An object nothing is known of says how to name it.
	if res := opkit(t, "", "why", "default/nothing", "--kubeconfig", cl.KubeconfigPath(), "--archive", archivePath); res.code != 0 ||
		!strings.Contains(res.stdout, "no run of it in the archive says its kind, and the cluster serves no Operators (opkit.dev) whose kinds it could be of: name it with --kind") {
		t.Errorf("opkit why of an unknown object: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}

	// An object with no run yet, of a kind an Operator of the cluster
	// watches (one this object's labels do not select): its kind is the
	// Operator's, without --kind.
	if err := c.Create(t.Context(), v1alpha1.CustomResourceDefinition()); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	watcher := &v1alpha1.Operator{}
	if err := yaml.Unmarshal([]byte(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: config-watch}
spec:
  watch: {apiVersion: v1, kind: ConfigMap, namespaces: [default], selector: {matchLabels: {why: watched}}}
  handlers:
  - name: noop
    "on": [create]
    exec: {command: [/bin/true]}
`), watcher); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, "the Operator created", func(ctx context.Context) (bool, error) {
		err := c.Create(ctx, watcher.DeepCopy())
		return err == nil || apierrors.IsAlreadyExists(err), nil
	})
	lonely := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "lonely"}, Data: map[string]string{"a": "1"}}
	if err := c.Create(t.Context(), lonely, client.FieldOwner("carol")); err != nil {
		t.Fatal(err)
	}
	res = opkit(t, "", "why", "default/lonely", "--kubeconfig", cl.KubeconfigPath(), "--archive", archivePath)
	t.Logf("opkit why default/lonely:\n%s%s", res.stdout, res.stderr)
	if res.code != 0 || !strings.Contains(res.stdout, "ConfigMap default/lonely, newest first:") || !strings.Contains(res.stdout, "by carol") || strings.Contains(res.stdout, "not read") {
		t.Errorf("opkit why of an object with no run, of a watched kind: exit %d, want its kind found and its changes named\n%s%s", res.code, res.stdout, res.stderr)
	}
}

// nilIfConflict drops a conflict, to be tried again.
func nilIfConflict(err error) error {
	if err != nil && strings.Contains(err.Error(), "the object has been modified") {
		return nil
	}
	return err
}

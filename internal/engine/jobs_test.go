package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/devcluster/devnode"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/executor"
)

// jobHandlerEnv makes the test binary a job handler: on the dev node its
// pod's paths are under $OPKIT_POD_ROOT.
const jobHandlerEnv = "OPKIT_TEST_JOB_HANDLER"

func testJobHandler() int {
	root := os.Getenv("OPKIT_POD_ROOT")
	data, err := os.ReadFile(root + os.Getenv("OPKIT_CONTEXT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "reading the context:", err)
		return 2
	}
	var ctx struct {
		Object struct {
			Spec struct{ Mode, Text string }
		} `json:"object"`
	}
	if err := json.Unmarshal(data, &ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bad context:", err)
		return 2
	}
	fmt.Println("crunching", ctx.Object.Spec.Text)
	if ctx.Object.Spec.Mode == "slow" {
		time.Sleep(5 * time.Second)
	}
	if ctx.Object.Spec.Mode == "fail" {
		fmt.Fprintln(os.Stderr, "crunch failed")
		return 3
	}
	result := fmt.Sprintf(`{"status": {"crunched": %q}}`, ctx.Object.Spec.Text)
	if err := os.WriteFile(root+os.Getenv("OPKIT_RESULT"), []byte(result), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}

func batchesOperator(t *testing.T) string {
	t.Helper()
	bin := clustertest.HandlerBinary(t)
	def := fmt.Sprintf(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: batches}
spec:
  resource:
    group: handlers.example.com
    kind: Batch
    versions:
    - name: v1
      schema:
        type: object
        properties:
          mode: {type: string}
          text: {type: string}
  handlers:
  - name: crunch
    on: [create]
    timeout: 60s
    retry: {maxAttempts: 1}
    job:
      image: example.com/cruncher:1
      command: [%q]
      env: [{name: %s, value: "1"}]
`, bin, jobHandlerEnv)
	file := filepath.Join(t.TempDir(), "batches.yaml")
	if err := os.WriteFile(file, []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestJobHandlersRunAsRestrictedJobsAndReportBack(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	store := newArchive(t)
	runEngineWith(t, engine.Options{
		Config: env.Config, Namespace: env.Namespace, Archive: store,
		JobTolerations: []corev1.Toleration{{Key: devnode.Taint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
	}, batchesOperator(t))

	ok := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "handlers.example.com/v1", "kind": "Batch",
		"metadata": map[string]any{"name": "good", "namespace": env.Namespace},
		"spec":     map[string]any{"text": "numbers"},
	}}
	bad := ok.DeepCopy()
	bad.SetName("bad")
	if err := unstructured.SetNestedField(bad.Object, "fail", "spec", "mode"); err != nil {
		t.Fatal(err)
	}
	create(t, env, ok)
	create(t, env, bad)

	eventually(t, 90*time.Second, "status.crunched", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ok), ok); err != nil {
			return false, err
		}
		v, _, _ := unstructured.NestedString(ok.Object, "status", "crunched")
		return v == "numbers", nil
	})
	run := mustLatestRun(t, store, "good")
	if run.Outcome != archive.Succeeded || run.Action != "job" {
		t.Errorf("run %+v", run)
	}
	logs, _ := logData(store.Logs(t.Context(), run.ID, 0))
	if !strings.Contains(string(logs), "crunching numbers") {
		t.Errorf("the run's log %q lacks the pod's output", logs)
	}

	job := &batchv1.Job{}
	name := executor.JobName("good", "crunch", string(ok.GetUID())+"/1/crunch", 1)
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: env.Namespace, Name: name}, job); err != nil {
		t.Fatalf("Job %s: %v", name, err)
	}
	pod := job.Spec.Template.Spec
	c := pod.Containers[0]
	switch {
	case len(job.OwnerReferences) != 1 || job.OwnerReferences[0].UID != ok.GetUID():
		t.Errorf("Job owners %+v", job.OwnerReferences)
	case *job.Spec.BackoffLimit != 0 || *job.Spec.TTLSecondsAfterFinished != 3600:
		t.Errorf("backoffLimit %d ttl %d", *job.Spec.BackoffLimit, *job.Spec.TTLSecondsAfterFinished)
	case pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken:
		t.Error("the pod mounts a service-account token it did not ask for")
	case !*pod.SecurityContext.RunAsNonRoot || pod.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("pod security context %+v", pod.SecurityContext)
	case *c.SecurityContext.AllowPrivilegeEscalation || len(c.SecurityContext.Capabilities.Drop) != 1 || c.SecurityContext.Capabilities.Drop[0] != "ALL":
		t.Errorf("container security context %+v", c.SecurityContext)
	case c.Image != "example.com/cruncher:1" || pod.RestartPolicy != corev1.RestartPolicyNever:
		t.Errorf("container %+v", c)
	}

	eventually(t, 90*time.Second, "the failing Job gives up", func(ctx context.Context) (bool, error) {
		page, err := store.List(ctx, archive.Query{Name: "bad", Outcome: archive.GaveUp})
		return err == nil && len(page.Runs) == 1, err
	})
	run = mustLatestRun(t, store, "bad")
	logs, _ = logData(store.Logs(t.Context(), run.ID, 0))
	// The error says why: the last line of the pod's log.
	if run.Error != "exit status 3: crunch failed" || !strings.Contains(string(logs), "crunch failed") {
		t.Errorf("failed run: error %q log %q", run.Error, logs)
	}
}

func TestARestartedEngineWaitsForTheJobItStarted(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	store := newArchive(t)
	opts := engine.Options{
		Config: env.Config, Namespace: env.Namespace, Archive: store,
		JobTolerations: []corev1.Toleration{{Key: devnode.Taint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
	}
	file := batchesOperator(t)
	_, stop := runEngineWith(t, opts, file)

	b := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "handlers.example.com/v1", "kind": "Batch",
		"metadata": map[string]any{"name": "long", "namespace": env.Namespace},
		"spec":     map[string]any{"text": "slowly", "mode": "slow"},
	}}
	create(t, env, b)
	jobs := func() []batchv1.Job {
		var list batchv1.JobList
		if err := env.Client.List(t.Context(), &list, client.InNamespace(env.Namespace)); err != nil {
			t.Fatal(err)
		}
		return list.Items
	}
	eventually(t, 30*time.Second, "the Job is created", func(context.Context) (bool, error) { return len(jobs()) == 1, nil })
	stop() // while the Job runs

	runEngineWith(t, opts, file)
	eventually(t, 90*time.Second, "status.crunched", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return false, err
		}
		v, _, _ := unstructured.NestedString(b.Object, "status", "crunched")
		return v == "slowly", nil
	})
	if n := len(jobs()); n != 1 {
		t.Errorf("%d Jobs for one run, want 1", n)
	}
	page, err := store.List(t.Context(), archive.Query{Name: "long"})
	if err != nil || len(page.Runs) != 2 {
		t.Fatalf("runs %+v, %v; want the interrupted one and its repeat", page.Runs, err)
	}
	if page.Runs[1].Outcome != archive.Cancelled || page.Runs[0].Outcome != archive.Succeeded || page.Runs[0].Key != page.Runs[1].Key {
		t.Errorf("runs %+v; want Cancelled then Succeeded with one key", page.Runs)
	}
	logs, _ := logData(store.Logs(t.Context(), page.Runs[0].ID, 0))
	if !strings.Contains(string(logs), "exists: an earlier engine started it") || !strings.Contains(string(logs), "crunching slowly") {
		t.Errorf("the repeat's log %q", logs)
	}
}

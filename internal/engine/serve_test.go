package engine_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// TestServeHandlersAnswerManyRunsPerProcess runs the Task operator's work
// handler in exec.mode Serve with two processes: six Tasks are handled by
// at most two processes, each run with its own log in the archive; a
// handler that exits mid-run fails that run only, retried in a new
// process as a process per run would be (flaky: exit 75 twice, then
// done; broken: exit 1, three attempts, Stalled); and the processes end
// with the engine.
func TestServeHandlersAnswerManyRunsPerProcess(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	file, out := tasksOperatorWork(t, "", "mode: Serve\n      processes: 2")
	store := newArchive(t)
	_, stop := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store}, file)
	cleanUpTasks(t, env)

	names := []string{"s0", "s1", "s2", "s3", "s4", "s5"}
	for _, n := range names {
		create(t, env, task(env.Namespace, n, "", "text of "+n))
	}
	pids := map[int]bool{}
	for _, n := range names {
		recs := waitRecords(t, out, n, 1, "the create run of "+n)
		pids[recs[0].Pid] = true
		obj := task(env.Namespace, n, "", "")
		eventually(t, 30*time.Second, n+"'s status.recorded", func(ctx context.Context) (bool, error) {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return false, err
			}
			recorded, _, _ := unstructured.NestedString(obj.Object, "status", "recorded")
			return recorded == "text of "+n, nil
		})
		page, err := store.List(t.Context(), archive.Query{Namespace: env.Namespace, Name: n})
		if err != nil || len(page.Runs) != 1 {
			t.Fatalf("%s's runs: %+v, %v; want one", n, page.Runs, err)
		}
		logs, err := logData(store.Logs(t.Context(), page.Runs[0].ID, 0))
		if err != nil || string(logs) != "work create for "+n+"\n" {
			t.Errorf("%s's run logged %q, %v; want its own line alone", n, logs, err)
		}
	}
	if len(pids) > 2 {
		t.Errorf("six runs were answered by %d processes %v; want at most 2 (processes: 2)", len(pids), pids)
	}

	create(t, env, task(env.Namespace, "flaky", "flaky", "f"))
	create(t, env, task(env.Namespace, "broken", "broken", "b"))
	for _, c := range []struct{ name, outcomes, lastError string }{
		{"flaky", "Succeeded,Failed,Failed", ""},
		{"broken", "GaveUp,Failed,Failed", "the process exited with status 1 before answering: boom: broken on purpose"},
	} {
		var page *archive.Page
		eventually(t, 60*time.Second, c.name+"'s three attempts", func(ctx context.Context) (bool, error) {
			var err error
			page, err = store.List(ctx, archive.Query{Namespace: env.Namespace, Name: c.name})
			return err == nil && len(page.Runs) == 3 && page.Runs[0].Outcome != archive.Running, err
		})
		var got []string
		for _, r := range page.Runs {
			got = append(got, string(r.Outcome))
		}
		if strings.Join(got, ",") != c.outcomes {
			t.Errorf("%s's runs %v; want %s", c.name, got, c.outcomes)
		}
		if c.lastError != "" && !strings.Contains(page.Runs[0].Error, c.lastError) {
			t.Errorf("%s's last run failed with %q; want %q", c.name, page.Runs[0].Error, c.lastError)
		}
		recs := records(t, out, c.name)
		var ps []int
		for _, r := range recs {
			ps = append(ps, r.Pid)
		}
		if len(slices.Compact(slices.Clone(ps))) != len(ps) {
			t.Errorf("%s's attempts ran in processes %v; want a new one after each exit", c.name, ps)
		}
	}

	// The Tasks go before the engine: their finalizers are its.
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "handlers.example.com/v1", "kind": "Task"}}
	if err := env.Client.DeleteAllOf(t.Context(), obj, client.InNamespace(env.Namespace)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the Tasks are gone", func(ctx context.Context) (bool, error) {
		list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "handlers.example.com/v1", "kind": "TaskList"}}
		err := env.Client.List(ctx, list, client.InNamespace(env.Namespace))
		return err == nil && len(list.Items) == 0, err
	})
	for _, r := range readLines[record](t, out) {
		pids[r.Pid] = true
	}
	stop()
	eventually(t, 10*time.Second, "the handler's processes end with the engine", func(context.Context) (bool, error) {
		for pid := range pids {
			if clustertest.ProcessAlive(pid) {
				return false, nil
			}
		}
		return true, nil
	})
}

package engine_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// putCounter is an archive that counts the handler records written on
// their own (PutHandlerRecord), not with a run's start or end.
type putCounter struct {
	*archive.SQLite
	puts atomic.Int64
}

func (p *putCounter) PutHandlerRecord(ctx context.Context, st *archive.HandlerRecord) error {
	p.puts.Add(1)
	return p.SQLite.PutHandlerRecord(ctx, st)
}

// TestAWatchedObjectsStateIsWrittenWithItsRunsStartsAndEnds creates,
// changes and deletes a watched Deployment: each run's start writes the
// state that decided it and each end the state it leaves, in the run's
// own transactions, so the watch writes no record of its own, and the
// archive's record names the last run, Succeeded, once it ended.
func TestAWatchedObjectsStateIsWrittenWithItsRunsStartsAndEnds(t *testing.T) {
	t.Parallel()
	a := clustertest.New(t)
	ctx := t.Context()
	out := filepath.Join(t.TempDir(), "records.jsonl")
	store := &putCounter{SQLite: newArchive(t)}
	e, _ := runEngineWith(t, engine.Options{Config: a.Config, Namespace: a.Namespace, Archive: store})
	if err := e.Apply(ctx, compileYAML(t, teamWatch(t, out, a.Namespace))); err != nil {
		t.Fatal(err)
	}
	op := "team-a-" + a.Namespace
	name := "web-" + a.Namespace[len(a.Namespace)-6:]
	// lastRun waits until the object's record names a run of the handler
	// that the archive shows Succeeded.
	lastRun := func(handler string) {
		t.Helper()
		eventually(t, 30*time.Second, "the record naming the "+handler+" run, Succeeded", func(ctx context.Context) (bool, error) {
			recs, err := store.HandlerRecords(ctx, op)
			if err != nil || len(recs) != 1 {
				return false, err
			}
			var rec struct {
				State struct {
					LastRun *struct{ ID, Handler, Outcome string } `json:"lastRun"`
				} `json:"state"`
			}
			if err := json.Unmarshal(recs[0].Data, &rec); err != nil {
				return false, err
			}
			lr := rec.State.LastRun
			if lr == nil || lr.Handler != handler || lr.Outcome != string(archive.Succeeded) {
				return false, nil
			}
			r, err := store.Get(ctx, lr.ID)
			return err == nil && r.Outcome == archive.Succeeded, err
		})
	}
	create(t, a, labelled(deployment(a.Namespace, name, "nginx:1"), "a"))
	waitRecords(t, out, name, 1, "the create run")
	lastRun("created")
	updateDeployment(t, a, name, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:2" })
	waitRecords(t, out, name, 2, "the image run")
	lastRun("image")
	if err := a.Client.Delete(ctx, deployment(a.Namespace, name, "")); err != nil {
		t.Fatal(err)
	}
	waitRecords(t, out, name, 3, "the delete run")
	eventually(t, 30*time.Second, "the deleted object's record dropped", func(ctx context.Context) (bool, error) {
		recs, err := store.HandlerRecords(ctx, op)
		return len(recs) == 0, err
	})
	if n := store.puts.Load(); n != 0 {
		t.Errorf("the watch wrote %d handler records on their own; want none: each goes with a run's start or end", n)
	}
}

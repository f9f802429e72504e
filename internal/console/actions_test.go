package console_test

import (
	"context"
	"html"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive"
)

// TestTimelineShowsWhoPausedResumedAndAskedARun: the records a person's
// actions leave in the archive (a pause, a resume and a retry, the
// engine's records with handler opkit.pause or opkit.retry and the reason
// in their log; a run asked with an actor and a reason; one of a trigger
// this console does not know, with an actor) are each an entry of the
// object's timeline, saying who and why.
func TestTimelineShowsWhoPausedResumedAndAskedARun(t *testing.T) {
	f, env := withChore(t, "acted", "sweep")
	obj := chore(env.Namespace, "acted", "", "")
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	waitRuns(t, f, env.Namespace, "acted", archive.Succeeded, 1)
	at := time.Now().UTC()
	record := func(handler, trigger, actor, reason, log string) {
		t.Helper()
		at = at.Add(time.Millisecond)
		r := &archive.Run{ID: archive.NewID(at), Operator: "chores", Handler: handler, Action: "pause", Trigger: trigger,
			APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: env.Namespace, Name: "acted", UID: string(obj.GetUID()),
			Generation: obj.GetGeneration(), Key: string(obj.GetUID()) + "/" + trigger + "/" + archive.NewID(at), Attempt: 1,
			Actor: actor, Reason: reason, StartedAt: at, FinishedAt: at, Outcome: archive.Succeeded}
		if err := f.store.Insert(context.WithoutCancel(t.Context()), r); err != nil {
			t.Fatal(err)
		}
		if log != "" {
			if err := f.store.AppendLog(t.Context(), r.ID, []byte(log+"\n")); err != nil {
				t.Fatal(err)
			}
		}
	}
	record("opkit.pause", "paused", "alice", "", "handlers paused by alice: fixing the sweep script (asked at 2026-11-27T08:00:00Z).")
	record("opkit.pause", "resumed", "bob", "", "handlers resumed by bob: the script is fixed.")
	record("sweep", "manual", "carol", "", "run now by carol: the 8:00 slot failed\nsweeping")
	record("sweep", "nudge", "dave", "a nudge of a newer opkit", "")
	record("opkit.retry", "retry", "erin", "", "retry asked by erin: the disk is free again (asked at 2026-11-27T09:00:00Z); failed attempts cleared, handlers run again.")

	page := html.UnescapeString(get(t, f.url+"/operators/chores/objects/"+env.Namespace+"/acted"))
	mustContain(t, "the timeline", page,
		"Paused</span> handlers", "by alice", "handlers paused by alice: fixing the sweep script",
		"Resumed</span> handlers", "by bob", "handlers resumed by bob: the script is fixed.",
		"run now, asked by carol", "run now by carol: the 8:00 slot failed",
		"nudge run, asked by dave: a nudge of a newer opkit",
		"Retried</span> handlers", "by erin", "retry asked by erin: the disk is free again")
}

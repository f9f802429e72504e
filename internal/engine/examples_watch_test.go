package engine_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// exampleDefinition compiles an example's operator.yaml after the
// replacements, given as pairs of old and new text (each old must be
// found): the example as users run it, fitted to a test. Its handlers'
// paths stay relative to the example's directory.
func exampleDefinition(t *testing.T, file string, replace ...string) *definition.Definition {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for i := 0; i+1 < len(replace); i += 2 {
		if !strings.Contains(text, replace[i]) {
			t.Fatalf("%s no longer holds %q, which the test replaces with %q", file, replace[i], replace[i+1])
		}
		text = strings.ReplaceAll(text, replace[i], replace[i+1])
	}
	srcs, err := definition.Load(file, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	d, err := definition.Compile(srcs[0])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestTeamWatchExampleAnnouncesEachImageOnce runs examples/team-watch in
// the test's namespace: each Deployment labelled team=a gets one Event
// naming its image when first seen, one per new image and one when it is
// deleted; scaling one, and a Deployment of another team, get none.
func TestTeamWatchExampleAnnouncesEachImageOnce(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	ctx := t.Context()
	store := newArchive(t)
	e, _ := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store})
	d := exampleDefinition(t, "../../examples/team-watch/operator.yaml", "namespaces: [default, team-a]", "namespaces: ["+env.Namespace+"]")
	if err := e.Apply(ctx, d); err != nil {
		t.Fatal(err)
	}
	create(t, env, labelled(deployment(env.Namespace, "web", "nginx:1.26"), "a"))
	create(t, env, labelled(deployment(env.Namespace, "api", "python:3.13-slim"), "a"))
	create(t, env, labelled(deployment(env.Namespace, "billing", "nginx:1.26"), "b"))

	// The handler's Events (reason: note), and every Event of opkit's,
	// by the Deployment they regard.
	type events struct{ announced, opkit map[string][]string }
	list := func() events {
		var l eventsv1.EventList
		if err := env.Client.List(ctx, &l, client.InNamespace(env.Namespace)); err != nil {
			t.Fatal(err)
		}
		got := events{announced: map[string][]string{}, opkit: map[string][]string{}}
		for _, ev := range l.Items {
			if ev.Regarding.Kind != "Deployment" || ev.ReportingController != "opkit" {
				continue
			}
			got.opkit[ev.Regarding.Name] = append(got.opkit[ev.Regarding.Name], ev.Reason)
			if ev.Reason == "Announced" || ev.Reason == "Gone" {
				got.announced[ev.Regarding.Name] = append(got.announced[ev.Regarding.Name], ev.Reason+": "+ev.Note)
			}
		}
		for _, notes := range got.announced {
			slices.Sort(notes)
		}
		return got
	}
	waitFor := func(name, note string) {
		t.Helper()
		eventually(t, time.Minute, "the Event "+note, func(context.Context) (bool, error) {
			return slices.Contains(list().announced[name], note), nil
		})
	}
	defer func() {
		if t.Failed() {
			t.Logf("events:\n%s", must(clustertest.Kubectl(t, clustertest.Cluster(t).KubeconfigPath(), "get", "events", "-n", env.Namespace)))
		}
	}()

	waitFor("web", "Announced: web now runs nginx:1.26")
	waitFor("api", "Announced: api now runs python:3.13-slim")
	updateDeployment(t, env, "web", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:1.27" })
	waitFor("web", "Announced: web now runs nginx:1.27")
	updateDeployment(t, env, "web", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(int32(2)) })
	if err := env.Client.Delete(ctx, deployment(env.Namespace, "api", "")); err != nil {
		t.Fatal(err)
	}
	waitFor("api", "Gone: api is gone; it ran python:3.13-slim")
	time.Sleep(3 * time.Second) // what the scaling, or a repeat, might wrongly run

	got := list()
	want := map[string][]string{
		"web": {"Announced: web now runs nginx:1.26", "Announced: web now runs nginx:1.27"},
		"api": {"Announced: api now runs python:3.13-slim", "Gone: api is gone; it ran python:3.13-slim"},
	}
	for name, notes := range want {
		if !slices.Equal(got.announced[name], notes) {
			t.Errorf("the handler's Events on %s: %q; want %q, each once", name, got.announced[name], notes)
		}
	}
	if reasons := got.opkit["billing"]; len(reasons) > 0 {
		t.Errorf("billing (team b) is not watched, yet opkit posted %v on it", reasons)
	}
	page, err := store.List(ctx, archive.Query{Operator: "team-watch", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string][]string{}
	for _, r := range slices.Backward(page.Runs) { // oldest first
		if r.Kind != "Deployment" || r.Outcome != archive.Succeeded {
			t.Errorf("run %s of %s/%s: kind %s, outcome %s %s; want a Deployment's, Succeeded", r.ID, r.Handler, r.Trigger, r.Kind, r.Outcome, r.Error)
		}
		runs[r.Name] = append(runs[r.Name], r.Handler+"/"+r.Trigger)
	}
	wantRuns := map[string][]string{
		"web": {"announce/create", "announce/update"}, // not the scaling
		"api": {"announce/create", "farewell/delete"},
	}
	for name, w := range wantRuns {
		if !slices.Equal(runs[name], w) {
			t.Errorf("runs of %s: %v; want %v", name, runs[name], w)
		}
	}
	if len(runs) != len(wantRuns) {
		t.Errorf("runs for %d Deployments: %v; want only web and api", len(runs), runs)
	}
}

// running reports whether a run of the calendar is in flight.
func running(t *testing.T, store *archive.SQLite) bool {
	t.Helper()
	page, err := store.List(t.Context(), archive.Query{Operator: "calendar", Outcome: archive.Running, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	return len(page.Runs) > 0
}

// TestCalendarExampleRunsEachSlotOnce runs examples/calendar with its
// 30-second tick made a 2-second one: over 10 seconds or more it runs once
// per slot, each slot a multiple of 2 seconds since the epoch, with a key
// of its own and the slot in its binding context. A slot is skipped only
// when the run before it was still going when the slot after it came due
// (a loaded machine: catchUp runs the latest). Stopped and started again
// on the same archive, it repeats no slot.
func TestCalendarExampleRunsEachSlotOnce(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	store := newArchive(t)
	const every = 2 * time.Second
	// The tick's 10 seconds are the example's; the test counts slots, and
	// a loaded machine once took longer than that to start python3 (a run
	// that long skips the slots it overlaps, which the test allows).
	d := exampleDefinition(t, "../../examples/calendar/operator.yaml", "every: 30s", "every: 2s", "timeout: 10s", "timeout: 2m")
	// run runs an engine with the calendar for at least within, and stops
	// it midway between two slots, when no run is in flight.
	run := func(within time.Duration) {
		t.Helper()
		e, stop := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store})
		if err := e.Apply(t.Context(), d); err != nil {
			t.Fatal(err)
		}
		end := time.Now().Add(within).UnixNano()
		end += int64(every) - end%int64(every) + int64(every/2)
		time.Sleep(time.Until(time.Unix(0, end)))
		// On a loaded machine a run may still be in flight midway: the
		// stop waits for it to be recorded, so that what is counted is
		// what the calendar did, not what the stop cut short.
		deadline := time.Now().Add(clustertest.Scaled(time.Minute))
		for running(t, store) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		stop()
	}
	// slots lists the tick's runs, oldest first, checking each: the
	// Operator's own, succeeded, with the key of a slot of its own, and
	// that slot in its log (from the binding context's schedule.slot).
	// ended maps a slot to the end of its run.
	ended := map[int64]time.Time{}
	slots := func() []int64 {
		t.Helper()
		page, err := store.List(t.Context(), archive.Query{Operator: "calendar", Handler: "tick", Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		seen := map[string]string{}
		for _, r := range slices.Backward(page.Runs) {
			if r.Outcome == archive.Cancelled {
				// The stop came as the next slot started: that run is
				// the next engine's to make again, with its key.
				continue
			}
			if other, ok := seen[r.Key]; ok {
				t.Errorf("runs %s and %s share the key %s", other, r.ID, r.Key)
			}
			seen[r.Key] = r.ID
			if r.Outcome != archive.Succeeded || r.Kind != "Operator" || r.Name != "calendar" || r.Trigger != "schedule" {
				logs, err := logData(store.Logs(t.Context(), r.ID, 0))
				t.Errorf("run %s: %s %s %s/%s %s (its log: %q, %v); want a Succeeded schedule run of Operator calendar", r.ID, r.Outcome, r.Error, r.Kind, r.Name, r.Trigger, logs, err)
			}
			slot, err := strconv.ParseInt(strings.TrimPrefix(r.Key, "calendar/schedule/tick/"), 10, 64)
			if err != nil || slot%int64(every/time.Second) != 0 {
				t.Errorf("run %s has the key %q; want calendar/schedule/tick/<a multiple of 2 seconds since the epoch>", r.ID, r.Key)
			}
			logs, err := logData(store.Logs(t.Context(), r.ID, 0))
			if want := "tick for the slot " + time.Unix(slot, 0).UTC().Format(time.RFC3339); err != nil || !strings.Contains(string(logs), want) {
				t.Errorf("run %s (key %s) logged %q (%v); want %q", r.ID, r.Key, logs, err, want)
			}
			ended[slot] = r.FinishedAt
			out = append(out, slot)
		}
		return out
	}

	run(10 * time.Second)
	first := slots()
	period := int64(every / time.Second)
	// At least 4 slots from the first to the last; more when a run in
	// flight at the 10 seconds' end kept the engine on (run waits for
	// it), which the slots' gaps below account for one by one.
	if n := len(first); n == 0 || (first[n-1]-first[0])/period+1 < 4 {
		t.Errorf("slots %v in 10 seconds or more; want at least 4 from the first to the last, one per 2 seconds", first)
	}
	for i := 1; i < len(first); i++ {
		prev, gap := first[i-1], first[i]-first[i-1]
		switch {
		case gap == period:
		case gap > period && gap%period == 0 && !ended[prev].Before(time.Unix(prev+period, 0)):
			// The run of prev went on past the slot after it: the
			// calendar skipped what came due meanwhile, as documented.
		default:
			t.Errorf("slots %v: one skipped, or run twice, between %d and %d (the run of %d ended at %s)", first, prev, first[i], prev, ended[prev].UTC().Format(time.RFC3339Nano))
		}
	}

	// Started again: the slots go on, none again.
	run(4 * time.Second)
	all := slots()
	if len(all) <= len(first) {
		t.Errorf("slots %v after the restart; want more than the %d before", all, len(first))
	}
	for i := 1; i < len(all); i++ {
		if all[i] <= all[i-1] {
			t.Errorf("slots %v: %d ran after %d", all, all[i], all[i-1])
		}
	}
}

package console_test

import (
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/archive"
)

func TestTheRunPageShowsAnAdmissionDenialWithoutRetry(t *testing.T) {
	f := start(t)
	ctx := t.Context()
	now := time.Now().Add(-time.Second)
	denied := &archive.Run{
		ID: archive.NewID(now), Operator: "chores", Handler: "check", Action: "exec", Trigger: "validate",
		APIVersion: "console.example.com/v1", Kind: "Chore", Namespace: "default", Name: "sneaky",
		Key: "admission/5e4c", Attempt: 1, StartedAt: now, Outcome: archive.Running,
		Diff:   []archive.Change{{Op: "add", Path: "spec.text", New: "<script>alert(1)</script>"}},
		Writes: []string{"dryRun: the request writes nothing"},
	}
	if err := f.store.Insert(ctx, denied); err != nil {
		t.Fatal(err)
	}
	if err := f.store.AppendLog(ctx, denied.ID, []byte("CREATE of sneaky by admin\n")); err != nil {
		t.Fatal(err)
	}
	denied.Outcome, denied.FinishedAt, denied.Error = archive.Denied, now.Add(40*time.Millisecond), "spec.text must not contain <script>"
	if err := f.store.Finish(ctx, denied); err != nil {
		t.Fatal(err)
	}
	page := get(t, f.url+"/runs/"+denied.ID)
	mustContain(t, "an admission run's page", page, "Denied", "validate", "spec.text must not contain &lt;script&gt;",
		"dryRun: the request writes nothing", "an admission call", "CREATE of sneaky by admin", "40ms")
	if strings.Contains(page, "<script>") || strings.Contains(page, "Retry now") {
		t.Error("the page shows the message unescaped, or offers a retry")
	}
}

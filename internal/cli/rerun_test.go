package cli

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

// TestRerunRefusesFromTheRecordWhatCannotRunAgain: before it reads the
// cluster, opkit rerun refuses, with why, an operator-wide run (naming
// the command that runs a slot or a delivery again), a running run, a
// state transition's record, an admission call, and --same-input for a
// run with no recorded input.
func TestRerunRefusesFromTheRecordWhatCannotRunAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.db")
	store, err := archive.OpenSQLite(t.Context(), path, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	at := time.Now()
	record := func(change func(r *archive.Run)) string {
		at = at.Add(time.Millisecond)
		r := &archive.Run{ID: archive.NewID(at), Operator: "notes", Handler: "notify", Trigger: "create", APIVersion: "notes.example.com/v1", Kind: "Note",
			Namespace: "default", Name: "n1", UID: "u1", Key: "u1/1/notify", Attempt: 1, StartedAt: at, Outcome: archive.Succeeded,
			Input: json.RawMessage(`{}`)}
		change(r)
		if err := store.Insert(t.Context(), r); err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	operatorWide := func(trigger string) func(r *archive.Run) {
		return func(r *archive.Run) {
			r.APIVersion, r.Kind, r.Namespace, r.Name, r.Trigger, r.Handler = v1alpha1.SchemeGroupVersion.String(), v1alpha1.Kind, "", "notes", trigger, "nightly"
		}
	}
	for _, tc := range []struct {
		id   string
		args []string
		want string
	}{
		{record(operatorWide(v1alpha1.OnSchedule)), nil, "opkit schedule run notes nightly"},
		{record(operatorWide(v1alpha1.OnEvent)), nil, "opkit events redeliver"},
		{record(func(r *archive.Run) { r.Outcome = archive.Running }), nil, "is still running"},
		{record(func(r *archive.Run) { r.Handler = v1alpha1.TransitionHandler }), nil, "record of a state transition"},
		{record(func(r *archive.Run) { r.Trigger = v1alpha1.OnValidate }), nil, "admission request"},
		{record(func(r *archive.Run) { r.Input = nil }), []string{"--same-input"}, "no recorded binding context"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(append([]string{"rerun", tc.id, "--archive", path, "--kubeconfig", "/nonexistent"}, tc.args...), &stdout, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("opkit rerun of a run (%s): exit %d, stderr %s; want a refusal with %q", tc.want, code, stderr.String(), tc.want)
		}
	}
}

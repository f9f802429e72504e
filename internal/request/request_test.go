package request

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestRemovePatchIsJSONForAnyValue: the guarded removal of a
// request consumed is valid JSON, testing the very value read, whatever
// that value holds (one set by hand may hold a control character or a
// rune Go quotes in its own syntax); else it never applies, and the
// request is taken again at every reconcile.
func TestRemovePatchIsJSONForAnyValue(t *testing.T) {
	for _, value := range []string{"2026-11-27T08:00:00Z", `{"by":"alice","reason":"a \"quoted\" <reason>","at":"x"}`, "bell \x07 and \x01", "\U000e0001 a tag rune", ""} {
		var ops []map[string]string
		if err := json.Unmarshal(RemovePatch("opkit.dev/retry", value), &ops); err != nil {
			t.Errorf("the patch for %q is not JSON: %v", value, err)
			continue
		}
		if len(ops) != 2 || ops[0]["op"] != "test" || ops[0]["value"] != value || ops[0]["path"] != "/metadata/annotations/opkit.dev~1retry" ||
			ops[1]["op"] != "remove" || ops[1]["path"] != ops[0]["path"] {
			t.Errorf("the patch for %q is %v; want a test of that value, then its removal", value, ops)
		}
	}
}

// TestEveryKindSaysWhereItIsAnswered: a kind of request is answered by an
// Event (with the reason of a request taken) or says where its answer is,
// names the command that makes it and the package that acts on it, and a
// kind that starts no run of its own names its archive record.
func TestEveryKindSaysWhereItIsAnswered(t *testing.T) {
	names := map[string]bool{}
	for _, k := range Kinds {
		if names[k.Name] {
			t.Errorf("two kinds are named %q", k.Name)
		}
		names[k.Name] = true
		if (k.Taken == "") == (k.Answered == "") {
			t.Errorf("%s: answered by an Event (Taken %q) or elsewhere (Answered %q): one of the two", k.Name, k.Taken, k.Answered)
		}
		if k.Taken != "" && k.Action == "" {
			t.Errorf("%s: its Events have no action", k.Name)
		}
		if !strings.HasPrefix(k.Command, "opkit ") || k.By == "" {
			t.Errorf("%s: command %q, acted on by %q", k.Name, k.Command, k.By)
		}
		if (k.Handler == "") != (k.Trigger == "") {
			t.Errorf("%s: its archive record names handler %q and trigger %q: both or neither", k.Name, k.Handler, k.Trigger)
		}
	}
}

// TestWhoNamesSomeoneForARequestByNobody: a value set by hand names
// nobody, and the message says so, with the annotation it read.
func TestWhoNamesSomeoneForARequestByNobody(t *testing.T) {
	if got := Retry.Who("jane"); got != "jane" {
		t.Errorf("Who(jane) = %q", got)
	}
	if got := Retry.Who(""); got != "someone (the annotation opkit.dev/retry names nobody)" {
		t.Errorf("Who() = %q", got)
	}
	if got := Continue.Who(""); got != "someone" {
		t.Errorf("a Rollout's request by nobody: %q", got)
	}
}

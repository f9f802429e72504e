package run

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestARunsRecordKeepsNoBindingContextOverMaxKept(t *testing.T) {
	small := json.RawMessage(`{"object":{}}`)
	if got := kept(small); string(got) != string(small) {
		t.Errorf("kept(%s) = %s; want it whole", small, got)
	}
	at := json.RawMessage(`"` + strings.Repeat("x", MaxKept-2) + `"`)
	if got := kept(at); len(got) != MaxKept {
		t.Errorf("kept(%d bytes) kept %d; want it whole at the limit", len(at), len(got))
	}
	over := json.RawMessage(`"` + strings.Repeat("x", MaxKept-1) + `"`)
	if got := kept(over); got != nil {
		t.Errorf("kept(%d bytes) kept %d bytes; want none over %d", len(over), len(got), MaxKept)
	}
}

package watch

import (
	"encoding/json"
	"testing"
)

func TestARecordIsWhatJSONWouldWriteOfIt(t *testing.T) {
	// As the records hold them: json.Marshal's output (HTML characters
	// and U+2028 escaped), written back as it was read.
	state, _ := json.Marshal(map[string]any{"handlers": map[string]any{"image": map[string]any{"generation": 1}}, "note": "<a&b>\u2028"})
	last, _ := json.Marshal(map[string]any{"metadata": map[string]any{"name": "a", "annotations": map[string]any{"note": "x\ny \"z\" <&>"}}})
	for _, c := range []struct {
		name    string
		last    []byte
		cluster string
	}{
		{"state alone", nil, ""},
		{"with the object", last, ""},
		{"with the cluster", nil, "c58dcf36-2c5a-4d74-8947-6c0ed61b1182"},
		{"all, a cluster to quote", last, `a"b\c` + "\n<é>"},
	} {
		want, err := json.Marshal(struct {
			State   json.RawMessage `json:"state"`
			Object  json.RawMessage `json:"object,omitempty"`
			Cluster string          `json:"cluster,omitempty"`
		}{state, c.last, c.cluster})
		if err != nil {
			t.Fatal(err)
		}
		r := &reconciler{cluster: c.cluster}
		got := r.envelope(state, c.last)
		if string(got) != string(want) {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, want)
		}
		var back record
		if err := json.Unmarshal(got, &back); err != nil || back.State == nil || back.Cluster != c.cluster || string(back.Object) != string(c.last) {
			t.Errorf("%s: read back as %+v, %v", c.name, back, err)
		}
	}
}

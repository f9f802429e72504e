package run

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// What the memory says the archive holds of a watched object moves only
// forward: a record stamped before the one loaded, or before the last
// one written, is not taken for written (the archive keeps the later);
// and once the object's deletion was seen, its final state stays the one
// its delete handlers get, whatever a run's start writes after.
func TestWatchedPersistedMovesOnlyForwardAndKeepsTheFinalState(t *testing.T) {
	w := Watched{&Runner{mem: NewMemory(true)}}
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	loaded := time.Now()
	w.Preload([]Preloaded{{Key: key, UID: "u1", Persisted: []byte(`{"loaded":1}`), Last: []byte(`{"v":1}`), UpdatedAt: loaded}})
	persisted := func() string {
		t.Helper()
		p, _, ok := w.Persisted(key)
		if !ok {
			t.Fatal("the object is not known")
		}
		return string(p)
	}
	w.SetPersisted(key, "u1", []byte(`{"early":1}`), nil, loaded.Add(-time.Second))
	if got := persisted(); got != `{"loaded":1}` {
		t.Errorf("after a record stamped before the loaded one: %s, want the loaded one", got)
	}
	w.SetPersisted(key, "u1", []byte(`{"later":1}`), []byte(`{"v":2}`), loaded.Add(time.Second))
	w.SetPersisted(key, "u1", []byte(`{"carried":1}`), []byte(`{"v":2}`), loaded.Add(time.Millisecond))
	if got := persisted(); got != `{"later":1}` {
		t.Errorf("after a carried record stamped before the last one written: %s, want the last one", got)
	}
	w.SetPersisted(key, "u2", []byte(`{"other":1}`), nil, loaded.Add(time.Hour))
	if got := persisted(); got != `{"later":1}` {
		t.Errorf("after another object's record: %s, want this one's", got)
	}

	gone := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"namespace": "ns", "name": "web", "uid": "u1"}, "v": int64(3)}}
	w.LastSeen(gone)
	w.SetPersisted(key, "u1", []byte(`{"started":1}`), []byte(`{"v":2}`), loaded.Add(2*time.Second))
	if got := persisted(); got != `{"started":1}` {
		t.Errorf("after a record written once the object was gone: %s, want it", got)
	}
	if _, last, _ := w.Known(key); string(last) != string(Snapshot(gone.Object)) {
		t.Errorf("the gone object's final state: %s, want the one its deletion showed, %s", last, Snapshot(gone.Object))
	}
}

package cause

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/opkit-dev/opkit/internal/definition"
)

// Observed counts the changes of a watched object. opkit writes nothing
// to an object it watches but does not own, and many kinds have no
// generation (a ConfigMap) or do not bump it for every change that
// matters (a Deployment's labels): what a handler's create and update are
// about is the object's Projection, and the generation handlers see is
// the number of its changes, its deletion counted as one. The engine
// keeps it in the run archive with the rest of the object's State.
type Observed struct {
	// Generation is 1 at first sight, one more at each change of the
	// projection, and one more when the object is seen deleted.
	Generation int64 `json:"generation"`
	// Hash is the projection's, as last seen.
	Hash string `json:"hash"`
	// Deleted: the object was seen deleted (gone, or being deleted
	// behind a finalizer), and its deletion counted.
	Deleted bool `json:"deleted,omitempty"`
	// Since is when the object was first seen, in Unix milliseconds: an
	// object that stops being watched is forgotten, and one that is
	// watched again starts a new life, whose runs have keys of their own
	// (<uid>.<since>/<generation>/<handler>).
	Since string `json:"since,omitempty"`
}

// Projection is what of a watched object its handlers' updates are about:
// every top-level field but apiVersion, kind, metadata and status (a
// Deployment's spec, a ConfigMap's data), its labels, and the metadata
// and status fields a handler names in fields (metadata.annotations,
// status.readyReplicas), so that a controller writing status does not
// make an update of it unless a handler asks.
func Projection(obj map[string]any, hs []*definition.Handler) map[string]any {
	out := map[string]any{}
	for k, v := range obj {
		switch k {
		case "apiVersion", "kind", "metadata", "status":
		default:
			out[k] = v
		}
	}
	meta, _ := obj["metadata"].(map[string]any)
	pick := func(root string, m map[string]any, name string) {
		v, ok := m[name]
		if !ok {
			return
		}
		sub, _ := out[root].(map[string]any)
		if sub == nil {
			sub = map[string]any{}
			out[root] = sub
		}
		sub[name] = v
	}
	pick("metadata", meta, "labels")
	status, _ := obj["status"].(map[string]any)
	for _, h := range hs {
		for _, f := range h.Fields {
			root, name := projected(f)
			switch {
			case root == "metadata" && name != "":
				pick("metadata", meta, name)
			case root == "status" && name != "":
				pick("status", status, name)
			case root == "status" && status != nil:
				out["status"] = status
			}
		}
	}
	return out
}

// projected splits a handler's field into its root and the name under it
// that Projection picks: metadata.labels.team is metadata and labels.
func projected(field string) (root, name string) {
	root, rest, _ := strings.Cut(field, ".")
	name, _, _ = strings.Cut(rest, ".")
	return root, name
}

// ProjectsMoreThanLabels reports whether Projection holds, for handlers
// hs, a metadata field but the labels, or status or a field of it.
// Otherwise it is the object's labels and every top-level field but
// apiVersion, kind, metadata and status.
func ProjectsMoreThanLabels(hs []*definition.Handler) bool {
	for _, h := range hs {
		for _, f := range h.Fields {
			switch root, name := projected(f); {
			case root == "status", root == "metadata" && name != "" && name != "labels":
				return true
			}
		}
	}
	return false
}

// Observe records a watched object's projection in st and returns the
// generation its handlers see: 1 at first sight, one more at each change,
// and one more when it is first seen deleted (deleted: gone, or marked
// for deletion).
//
// The deletion is a change of its own, as it is for a custom resource,
// whose generation the API server bumps when it marks it for deletion.
// Without it, a delete run would be for the generation last seen, the one
// the handler's create or update run was for: a handler on [create,
// delete] would have the key of its create run, which the archive holds
// as succeeded, and so never run on delete; and the failed attempts of
// that create run would count for the delete run.
func Observe(st *State, projection map[string]any, deleted bool, now time.Time) int64 {
	// Marshalled as it is: JSON's encoding of maps sorts their keys, and
	// a number encodes alike as int64 or float64, so an object read from
	// the cache or decoded from JSON (a gone object's last state) hashes
	// the same, and as the normalized copy (a JSON round trip) this once
	// hashed. An integer beyond 2^53 is the exception, which float64
	// rounds: such a projection is normalized first, as it was.
	var data []byte
	if hasWideInt(projection) {
		data, _ = json.Marshal(normalize(projection))
	} else {
		data, _ = json.Marshal(projection)
	}
	sum := sha256.Sum256(data)
	hash := hex.EncodeToString(sum[:12])
	switch {
	case st.Observed == nil:
		st.Observed = &Observed{Generation: 1, Hash: hash, Since: strconv.FormatInt(now.UnixMilli(), 10), Deleted: deleted}
	case st.Observed.Hash != hash || deleted && !st.Observed.Deleted:
		st.Observed.Generation++
		st.Observed.Hash = hash
		st.Observed.Deleted = st.Observed.Deleted || deleted
	}
	return st.Observed.Generation
}

// hasWideInt reports whether v holds an integer a float64 cannot hold
// exactly (beyond 2^53).
func hasWideInt(v any) bool {
	const exact = 1 << 53
	switch v := v.(type) {
	case int64:
		return v > exact || v < -exact
	case map[string]any:
		for _, e := range v {
			if hasWideInt(e) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if hasWideInt(e) {
				return true
			}
		}
	}
	return false
}

package runsapi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/opkit-dev/opkit/internal/archive"
)

// filter is what a list or watch selects: its namespace, and the
// value each label or field of its selectors names, which the archive's
// query filters on.
type filter struct {
	// namespace is the request's, or the one metadata.namespace names;
	// "" for every namespace.
	namespace string
	// values are the selected values, by label key or field path.
	values map[string]string
	// none is set when two terms want different values of one thing:
	// nothing matches.
	none bool
	// since is the time the since field selects from (status.startedSince
	// of runs, status.receivedSince of deliveries): what started or came
	// at or after it, to the millisecond, as the archive's ids do; zero
	// for any time.
	since time.Time
	// labels and fields are the selectors as parsed, but the since
	// field, which watched objects are matched against.
	labels labels.Selector
	fields fields.Selector
}

// value is the value selected for a label or field, "" if none.
func (s *filter) value(key string) string { return s.values[key] }

// set records that key selects v; another value for the same thing
// (a label and the field it mirrors) selects nothing.
func (s *filter) set(key, v string) {
	if old, ok := s.values[key]; ok && old != v {
		s.none = true
	}
	s.values[key] = v
}

// parseSelection reads the labelSelector and fieldSelector of a list or
// watch of resource, whose labels and fields (each mapped to the key it
// sets: a label and the field it mirrors set the same) are those given,
// and whose field sinceField selects by time (filter.since). A selector
// the archive cannot express is a 400 naming it.
func parseSelection(r *http.Request, namespace, resource string, labelKeys, fieldKeys map[string]string, sinceField string) (*filter, error) {
	sel := &filter{namespace: namespace, values: map[string]string{}, labels: labels.Everything(), fields: fields.Everything()}
	bad := func(format string, args ...any) error {
		return apierrors.NewBadRequest(fmt.Sprintf(format, args...))
	}
	if text := r.URL.Query().Get("labelSelector"); text != "" {
		ls, err := labels.Parse(text)
		if err != nil {
			return nil, bad("labelSelector %q: %v", text, err)
		}
		reqs, _ := ls.Requirements()
		for _, req := range reqs {
			key, ok := labelKeys[req.Key()]
			if !ok {
				return nil, bad("labelSelector %q: %s has no label %s; the labels of %s are %s", text, resource, req.Key(), resource, strings.Join(slices.Sorted(maps.Keys(labelKeys)), ", "))
			}
			vals := req.Values().List()
			switch op := req.Operator(); {
			case (op == selection.Equals || op == selection.DoubleEquals || op == selection.In) && len(vals) == 1 && vals[0] == "":
				return nil, bad("labelSelector %q: %q: the archive selects %s by a value of a label (%s=VALUE), not by an empty one", text, req.String(), resource, req.Key())
			case (op == selection.Equals || op == selection.DoubleEquals || op == selection.In) && len(vals) == 1:
				sel.set(key, vals[0])
			default:
				return nil, bad("labelSelector %q: %q: the archive selects %s by one value of a label (%s=VALUE), not with %s", text, req.String(), resource, req.Key(), op)
			}
		}
		sel.labels = ls
	}
	if text := r.URL.Query().Get("fieldSelector"); text != "" {
		fs, err := fields.ParseSelector(text)
		if err != nil {
			return nil, bad("fieldSelector %q: %v", text, err)
		}
		var matched []fields.Selector
		for _, req := range fs.Requirements() {
			if req.Operator != selection.Equals && req.Operator != selection.DoubleEquals {
				return nil, bad("fieldSelector %q: %s%s%s: the archive selects %s by one value of a field (%s=VALUE), not with %s", text, req.Field, req.Operator, req.Value, resource, req.Field, req.Operator)
			}
			if req.Value == "" {
				return nil, bad("fieldSelector %q: %s=: the archive selects %s by a value of a field (%s=VALUE), not by an empty one", text, req.Field, resource, req.Field)
			}
			if req.Field == sinceField {
				t, err := time.Parse(time.RFC3339Nano, req.Value)
				if err != nil {
					return nil, bad("fieldSelector %q: %s=%s: want a time in RFC 3339, e.g. %s=2026-11-27T10:00:00Z", text, req.Field, req.Value, req.Field)
				}
				if sel.since.IsZero() || t.After(sel.since) {
					sel.since = t // the later of two bounds: both hold
				}
				continue
			}
			matched = append(matched, fields.OneTermEqualSelector(req.Field, req.Value))
			if req.Field == "metadata.namespace" {
				if sel.namespace != "" && sel.namespace != req.Value {
					sel.none = true
				}
				sel.namespace = req.Value
				continue
			}
			key, ok := fieldKeys[req.Field]
			if !ok {
				return nil, bad("fieldSelector %q: %s cannot be selected by %s; the fields are metadata.namespace, %s, %s", text, resource, req.Field, strings.Join(slices.Sorted(maps.Keys(fieldKeys)), ", "), sinceField)
			}
			sel.set(key, req.Value)
		}
		sel.fields = fields.AndSelectors(matched...)
	}
	return sel, nil
}

// A continue token is the archive's cursor (the id of the last object of
// the page) and a digest of the list it continues: its resource,
// namespace and selection. A token is refused with another list, where
// the cursor would select by the other's position what the client did
// not ask for; and a token that is not of this form was not returned here.
// The digest is no secret: a token names a position, and reading any list
// needs only the right to read it.

// listDigest is the digest of the list of resource that sel selects: its
// namespace, the values it selects and since. Selectors that select the
// same (a label and the field it mirrors, = and ==) have the same.
func listDigest(resource string, sel *filter) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%t\x00%d", resource, sel.namespace, sel.none, sel.since.UnixMilli())
	for _, k := range slices.Sorted(maps.Keys(sel.values)) {
		fmt.Fprintf(h, "\x00%s=%s", k, sel.values[k])
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// continueToken is the token of the page of the list that follows
// cursor; "" when cursor is (the last page).
func continueToken(resource string, sel *filter, cursor string) string {
	if cursor == "" {
		return ""
	}
	return cursor + "." + listDigest(resource, sel)
}

// readContinue returns the archive's cursor of a continue token of the
// list of resource that sel selects, or a 400 that says why it is not
// one.
func readContinue(token, resource string, sel *filter) (string, error) {
	cursor, digest, ok := strings.Cut(token, ".")
	if !ok || !archive.ValidID(cursor) || len(digest) != 16 || strings.Trim(digest, "0123456789abcdef") != "" {
		return "", apierrors.NewBadRequest(fmt.Sprintf("continue %q is not a token this server returned: list again without it", token))
	}
	if digest != listDigest(resource, sel) {
		return "", apierrors.NewBadRequest(fmt.Sprintf("continue %q is the token of another list: a token continues the list that returned it, of the same %s, namespace and selectors; list again without it", token, resource))
	}
	return cursor, nil
}

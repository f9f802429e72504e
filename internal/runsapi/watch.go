package runsapi

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	runsv1alpha1 "github.com/opkit-dev/opkit/api/runs/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

// seenSlack is how far back each poll of a watch looks for new objects
// before the last poll: a run is recorded a little after the start time
// its id carries.
const seenSlack = 5 * time.Second

// watch answers a watch: it polls the archive every PollInterval and
// sends ADDED for each object that comes (a run started, a delivery
// received), MODIFIED when one it sent changes (a run finished, a
// delivery handled), and DELETED when one stops matching the selectors
// (a watch of status.outcome=Running sees a run that finished leave).
// See the package doc for the resourceVersions it resumes from.
func (h *Handler) watch(w http.ResponseWriter, r *http.Request, req request) {
	k := h.kindOf(req.resource)
	sel, err := k.parse(r, req.namespace)
	if err != nil {
		writeStatus(w, err)
		return
	}
	from, err := parseResourceVersion(r.URL.Query().Get("resourceVersion"))
	if err != nil {
		writeStatus(w, err)
		return
	}
	now := time.Now()
	if from.IsZero() {
		from = now
	}
	if now.Sub(from) > h.o.ResumeWindow {
		writeStatus(w, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%s ago; a watch resumes from at most %s ago): list again", from.UnixNano(), now.Sub(from).Round(time.Second), h.o.ResumeWindow)))
		return
	}
	ctx, cancel, err := withTimeoutSeconds(r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	defer cancel()
	topt, asTable := wantsTable(r)
	bookmarks := queryBool(r, "allowWatchBookmarks")
	flusher, _ := w.(http.Flusher)

	sent := map[string]*known{}
	headers := true
	send := func(typ watch.EventType, obj *object) error {
		payload := obj.api
		if asTable {
			payload = table(k, []*object{obj}, topt, metav1.ListMeta{ResourceVersion: obj.meta.ResourceVersion}, headers)
			headers = false
		}
		return sendRaw(w, flusher, typ, payload)
	}
	// observe sends what changed of obj for the client.
	observe := func(obj *object) error {
		if typ, ok := change(sent, obj, sel.matches(obj)); ok {
			return send(typ, obj)
		}
		return nil
	}

	// What may still change at the start is what the client has listed:
	// it is followed without an event of its own.
	if err := followListed(ctx, k, sel, from, sent); err != nil {
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("reading the archive: %w", err)))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	if sel.none {
		<-ctx.Done()
		return
	}
	since := from
	lastBookmark := now
	tick := time.NewTicker(h.o.PollInterval)
	defer tick.Stop()
	for {
		polled := time.Now()
		if err := h.poll(ctx, k, sel, since, sent, observe); err != nil {
			if ctx.Err() == nil {
				status := apierrors.NewInternalError(fmt.Errorf("reading the archive: %w", err)).Status()
				status.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
				_ = sendRaw(w, flusher, watch.Error, &status)
			}
			return
		}
		// The next poll looks back a little, for runs recorded late.
		since = polled.Add(-seenSlack)
		for id, kn := range sent {
			if t, _ := archive.TimeOfID(id); kn.done && t.Before(since) {
				delete(sent, id)
			}
		}
		if bookmarks && polled.Sub(lastBookmark) >= h.o.BookmarkInterval {
			lastBookmark = polled
			mark := map[string]any{"kind": k.kind(), "apiVersion": runsv1alpha1.SchemeGroupVersion.String(),
				"metadata": metav1.ObjectMeta{ResourceVersion: resourceVersion(polled)}}
			if err := sendRaw(w, flusher, watch.Bookmark, mark); err != nil {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// withTimeoutSeconds is the request's context, ended after its
// timeoutSeconds, if any.
func withTimeoutSeconds(r *http.Request) (context.Context, context.CancelFunc, error) {
	ctx := r.Context()
	text := r.URL.Query().Get("timeoutSeconds")
	if text == "" {
		return ctx, func() {}, nil
	}
	secs, err := strconv.Atoi(text)
	if err != nil || secs < 0 {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("timeoutSeconds %q: want a number of seconds", text))
	}
	if secs == 0 {
		return ctx, func() {}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second)
	return ctx, cancel, nil
}

// change is the event to send of obj, which matches the client's
// selector or not, to a client that was sent what sent holds (updated),
// and whether there is one: Added when it begins to match (or is new and
// matches), Modified when it changed and still matches, Deleted when it
// no longer matches.
func change(sent map[string]*known, obj *object, matches bool) (watch.EventType, bool) {
	kn, ok := sent[obj.id]
	if !ok {
		sent[obj.id] = &known{rv: obj.meta.ResourceVersion, matched: matches, done: obj.done}
		return watch.Added, matches
	}
	if kn.rv == obj.meta.ResourceVersion {
		return "", false
	}
	kn.rv, kn.done = obj.meta.ResourceVersion, obj.done
	switch {
	case matches && kn.matched:
		return watch.Modified, true
	case matches:
		kn.matched = true
		return watch.Added, true
	case kn.matched:
		kn.matched = false
		return watch.Deleted, true
	}
	return "", false
}

// poll reads what came since, and what changed of the objects followed,
// and hands each to observe, oldest first.
func (h *Handler) poll(ctx context.Context, k kind, sel *filter, since time.Time, sent map[string]*known, observe func(*object) error) error {
	fresh, err := k.since(ctx, sel, since)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, obj := range fresh {
		seen[obj.id] = true
		if err := observe(obj); err != nil {
			return err
		}
	}
	// The objects followed that were not in that read, and may still
	// change: read one by one.
	for _, id := range slices.Sorted(maps.Keys(sent)) {
		kn := sent[id]
		if seen[id] || kn.done {
			continue
		}
		obj, err := k.get(ctx, id)
		if isNotFound(err) {
			// Pruned: a run is never pruned while it runs, so this is
			// rare; the client keeps its last state.
			kn.done = true
			continue
		}
		if err != nil {
			return err
		}
		if err := observe(obj); err != nil {
			return err
		}
	}
	return nil
}

// known is what a watch's client has of an object that may still
// change, or was seen lately.
type known struct {
	// rv is the resourceVersion it was sent (or listed) at.
	rv string
	// matched says it matched the selectors then: the client has it.
	matched bool
	// done says no later change comes.
	done bool
}

// sendRaw writes one watch event, and flushes it.
func sendRaw(w http.ResponseWriter, flusher http.Flusher, typ watch.EventType, payload any) error {
	data, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	line, err := json.Marshal(metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: data}})
	if err != nil {
		return err
	}
	if _, err := w.Write(append(line, '\n')); err != nil {
		return err
	}
	if flusher != nil {
		flusher.Flush()
	}
	return nil
}

// followListed records in sent what of k may still change and the client
// has listed (changed before from): it is followed from there without an
// event of its own.
func followListed(ctx context.Context, k kind, sel *filter, from time.Time, sent map[string]*known) error {
	if sel.none {
		return nil
	}
	open, err := k.unfinished(ctx, sel)
	if err != nil {
		return err
	}
	for _, obj := range open {
		if obj.changed.Before(from) {
			sent[obj.id] = &known{rv: obj.meta.ResourceVersion, matched: sel.matches(obj)}
		}
	}
	return nil
}

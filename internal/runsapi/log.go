package runsapi

import (
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/opkit-dev/opkit/internal/archive"
)

// serveLog answers runs/ID/log: the run's log as text, cleaned of
// terminal control sequences as opkit logs prints it, with the archive's
// cut marked where a long log lost its middle. With follow=true it
// streams what the run appends until the run ends (or the client goes).
func (h *Handler) serveLog(w http.ResponseWriter, r *http.Request, req request) {
	ctx := r.Context()
	follow := queryBool(r, "follow")
	notFound := func(err error) bool {
		if isNotFound(err) {
			writeStatus(w, apierrors.NewNotFound(groupResource(runsResource), req.name))
			return true
		}
		if err != nil {
			writeStatus(w, apierrors.NewInternalError(fmt.Errorf("reading the archive: %w", err)))
			return true
		}
		return false
	}
	k := runs{store: h.o.Archive, namespace: h.o.Namespace}
	obj, err := k.get(ctx, req.name)
	if err == nil && obj.namespace != req.namespace {
		err = archive.ErrNotFound
	}
	if notFound(err) {
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	flusher, _ := w.(http.Flusher)
	out := archive.NewCleanWriter(w)
	var offset int64
	for started := false; ; started = true {
		// The run first: a log read after the run shows it finished is
		// whole.
		run, err := h.o.Archive.Get(ctx, req.name)
		if !started && notFound(err) || err != nil {
			return
		}
		log, err := h.o.Archive.Logs(ctx, req.name, offset)
		if !started && notFound(err) || err != nil {
			return
		}
		if !started {
			w.WriteHeader(http.StatusOK)
		}
		if _, err := out.Write(log.Data); err != nil {
			return
		}
		offset = log.Next
		if !follow || run.Outcome != archive.Running {
			_ = out.Flush()
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		select {
		case <-ctx.Done():
			_ = out.Flush()
			return
		case <-time.After(h.o.PollInterval):
		}
	}
}

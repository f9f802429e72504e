package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

// rerun answers a run page's Run again form, as opkit rerun does: it
// refuses (409, nothing written) what the run's record refuses
// (archive.Run.RerunRefusal), a run whose object is gone or being
// deleted, and an object with a request not answered yet; it checks, as
// every action, the CSRF token and patch on the object (a custom
// resource: the console offers no action on objects opkit only watches);
// and writes v1alpha1.RerunAnnotation by a merge patch over the
// resourceVersion it read. It waits up to decisionWait for the engine's
// answer: the new run's page when it started, else the run's page, whose
// object's timeline shows the Event that answers.
func (s *Server) rerun(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	u, id, ok := s.formOn(w, r, "a run id")
	if !ok {
		return
	}
	sameInput, reason, err := readRerun(postForm(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	run, err := s.opts.Archive.Get(ctx, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if why := run.RerunRefusal(sameInput); why != "" {
		s.fail(w, r, &httpError{http.StatusConflict, sentence(why)})
		return
	}
	op, err := s.mayAct(ctx, u, run.Operator, run.Namespace)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(op.GVK)
	err = s.client.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: run.Name}, obj)
	switch {
	case apierrors.IsNotFound(err):
		err = &httpError{http.StatusConflict, fmt.Sprintf("%s %s, the object of run %s, is gone: there is nothing to run handler %s for again.", run.Kind, run.Object(), id, run.Handler)}
	case err != nil:
	case string(obj.GetUID()) != run.UID:
		err = &httpError{http.StatusConflict, fmt.Sprintf("%s %s, the object of run %s, is gone: the %s of that name now is another object, made since.", run.Kind, run.Object(), id, run.Kind)}
	case obj.GetDeletionTimestamp() != nil:
		err = &httpError{http.StatusConflict, fmt.Sprintf("%s %s is being deleted: its handlers do not run again.", run.Kind, run.Object())}
	default:
		if _, pending := obj.GetAnnotations()[v1alpha1.RerunAnnotation]; pending {
			err = &httpError{http.StatusConflict, fmt.Sprintf("A re-run request is already on %s %s and not answered yet: its timeline's Events will say what became of it.", run.Kind, run.Object())}
		}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	now := time.Now().UTC()
	req := v1alpha1.Rerun{Request: archive.NewID(now), Run: id, SameInput: sameInput, Reason: reason, By: s.decidedBy(u), At: now.Format(time.RFC3339)}
	if err := s.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, req.Patch(obj.GetResourceVersion()))); err != nil {
		if apierrors.IsConflict(err) {
			err = &httpError{http.StatusConflict, fmt.Sprintf("%s %s changed while you asked; nothing was sent: ask again.", run.Kind, run.Object())}
		}
		s.fail(w, r, err)
		return
	}
	back := "/runs/" + id
	if started := s.awaitRerun(ctx, obj, req.Request); started != "" {
		back = "/runs/" + started
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// readRerun reads a Run again form: whether the run gets the binding
// context the run got, and why, in at most maxReason bytes (it is
// written in an annotation, and recorded with the run) or a 400 that
// says so.
func readRerun(form url.Values) (sameInput bool, reason string, err error) {
	reason = strings.TrimSpace(form.Get("reason"))
	if len(reason) > maxReason {
		return false, "", badRequest("the reason is %d bytes long; at most %d are kept: say it shorter", len(reason), maxReason)
	}
	return form.Get("sameInput") != "", reason, nil
}

// awaitRerun waits up to decisionWait for the engine's Event answering
// the re-run request on obj, and returns the id of the run it started;
// "" when it refused it or has not answered yet.
func (s *Server) awaitRerun(ctx context.Context, obj *unstructured.Unstructured, request string) (started string) {
	poll(ctx, func(ctx context.Context) bool {
		events, _ := s.events(ctx, obj)
		for _, e := range events {
			if !strings.Contains(e.Message, "request "+request+" ") {
				continue
			}
			if e.Reason == v1alpha1.EventRerunStarted {
				if _, after, ok := strings.Cut(e.Message, ", as run "); ok && len(after) >= 18 && archive.ValidID(after[:18]) {
					started = after[:18]
				}
			}
			return true
		}
		return false
	})
	return started
}

package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

// Redeliver: a delivery's page offers to handle it again, on purpose, as
// opkit events redeliver does, by creating a Redelivery object
// (v1alpha1.NewRedelivery) in Options.RedeliveryNamespace, which the
// engine that runs the delivery's operator answers in its status. POST
// /events/ID/redeliver checks the CSRF token, that the user may read the
// delivery (as its page) and, under Kubernetes auth, may create
// redeliveries.opkit.dev in that namespace (a SubjectAccessReview, as
// every action's check); the console then creates the object with its
// own client, the user as By (decidedBy: as a decision's), and the form's
// reason. It waits up to decisionWait for the engine's answer and shows
// the delivery's page with ?redelivery=NAME, which says the answer
// (accepted, linking the new delivery; refused, with why), and follows it
// live until there is one. The console decides nothing itself: what may
// be redelivered is the engine's to say.

// redeliveryResource is what redelivering needs create on.
var redeliveryResource = resource{Group: v1alpha1.Group, Resource: v1alpha1.RedeliveryResource}

// maxRedeliveryReason is the longest reason the Redelivery CRD takes.
const maxRedeliveryReason = 1024

// mayRedeliver checks that u may create Redeliveries where this console
// writes them.
func (s *Server) mayRedeliver(ctx context.Context, u *user) error {
	ns := s.opts.RedeliveryNamespace
	if ns == "" {
		return &httpError{http.StatusConflict, "this console does not know where its engine reads Redeliveries (console.Options.RedeliveryNamespace): use opkit events redeliver"}
	}
	ok, err := s.auth.allowed(ctx, u, redeliveryResource, "create", ns)
	switch {
	case err != nil:
		return err
	case !ok:
		return forbidden("%s may not create %s in namespace %s", u.Name, redeliveryResource, ns)
	}
	return nil
}

// redeliver answers the Redeliver form of a delivery's page.
func (s *Server) redeliver(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	u, id, ok := s.formOn(w, r, "a delivery id: /events lists the deliveries the archive keeps")
	if !ok {
		return
	}
	d, err := s.opts.Archive.GetDelivery(ctx, id)
	if errors.Is(err, archive.ErrNotFound) {
		err = notFound("no delivery %s in the run archive: it was never received here, or retention pruned it", id)
	}
	if err == nil {
		_, err = s.mayReadDeliveries(ctx, u, d.Operator)
	}
	if err == nil {
		err = s.mayRedeliver(ctx, u)
	}
	reason, formErr := readRedelivery(postForm(r))
	if err == nil {
		err = formErr
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ns := s.opts.RedeliveryNamespace
	obj := v1alpha1.NewRedelivery(ns, v1alpha1.RedeliverySpec{Delivery: id, By: s.decidedBy(u), Reason: reason})
	if err := s.client.Create(ctx, obj); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			err = &httpError{http.StatusConflict, "no engine has installed redeliveries.opkit.dev in this cluster: the engine installs it with its first operator that has a source; nothing was asked"}
		} else {
			err = fmt.Errorf("asking for the redelivery of %s (a Redelivery in namespace %s): %w", id, ns, err)
		}
		s.fail(w, r, err)
		return
	}
	s.awaitRedelivery(ctx, obj)
	http.Redirect(w, r, deliveryURL(id)+"?"+url.Values{"redelivery": {obj.GetName()}}.Encode(), http.StatusSeeOther)
}

// readRedelivery reads the Redeliver form: why, in at most
// maxRedeliveryReason characters, or a 400 that says so.
func readRedelivery(form url.Values) (reason string, err error) {
	reason = strings.TrimSpace(form.Get("reason"))
	if n := utf8.RuneCountInString(reason); n > maxRedeliveryReason {
		return "", badRequest("the reason is %d characters long: at most %d", n, maxRedeliveryReason)
	}
	return reason, nil
}

// awaitRedelivery waits up to decisionWait for the engine to answer obj.
func (s *Server) awaitRedelivery(ctx context.Context, obj *unstructured.Unstructured) {
	poll(ctx, func(ctx context.Context) bool {
		cur := obj.DeepCopy()
		if err := s.client.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
			return true
		}
		_, status, err := v1alpha1.ReadRedelivery(cur)
		return err != nil || status.Outcome != ""
	})
}

// redeliveryView is what a delivery's page says of redelivering it: the
// form (Offer), or why it is not offered (Refused), and the answer to
// the Redelivery ?redelivery= names (Asked).
type redeliveryView struct {
	Offer     bool
	Refused   string
	Namespace string
	MaxReason int
	Asked     *askedRedelivery
}

// askedRedelivery is a Redelivery of the delivery and the engine's answer
// (Waiting until there is one).
type askedRedelivery struct {
	Name    string
	Spec    v1alpha1.RedeliverySpec
	Status  v1alpha1.RedeliveryStatus
	Waiting bool
}

// redeliveryOf is what the page of delivery d says of redelivering it,
// for u; asked is the name of a Redelivery the user was sent back with.
func (s *Server) redeliveryOf(ctx context.Context, u *user, v *view, d *archive.Delivery, asked string) *redeliveryView {
	rv := &redeliveryView{Namespace: s.opts.RedeliveryNamespace, MaxReason: maxRedeliveryReason}
	if rv.Namespace == "" {
		return nil
	}
	switch err := s.mayRedeliver(ctx, u); {
	case d.Outcome == archive.DeliveryPending:
		rv.Refused = "It can be redelivered once it is handled."
	case err != nil:
		rv.Refused = "You cannot redeliver it here: " + err.Error() + "."
	default:
		rv.Offer = true
	}
	if asked == "" {
		return rv
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RedeliveryKind))
	err := s.client.Get(ctx, client.ObjectKey{Namespace: rv.Namespace, Name: asked}, obj)
	var spec v1alpha1.RedeliverySpec
	var status v1alpha1.RedeliveryStatus
	if err == nil {
		spec, status, err = v1alpha1.ReadRedelivery(obj)
	}
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		v.Notices = append(v.Notices, fmt.Sprintf("No Redelivery %s in namespace %s: it was deleted, or never made.", asked, rv.Namespace))
	case err != nil:
		v.Notices = append(v.Notices, fmt.Sprintf("The Redelivery %s cannot be read: %v", asked, err))
	case spec.Delivery != d.ID:
		v.Notices = append(v.Notices, fmt.Sprintf("The Redelivery %s is not of this delivery.", asked))
	default:
		rv.Asked = &askedRedelivery{Name: asked, Spec: spec, Status: status, Waiting: status.Outcome == ""}
	}
	return rv
}

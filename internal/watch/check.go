package watch

import (
	"context"
	"fmt"
	"strings"

	"golang.org/x/sync/errgroup"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/internal/definition"
)

// needNamespaces checks that the handlers of a watch of a cluster-scoped
// kind name the namespaces their objects' would default to: a Job's, a
// ServiceAccount's, a Secret's.
func needNamespaces(d *definition.Definition) error {
	for i, h := range d.Operator.Spec.Handlers {
		field := fmt.Sprintf("spec.handlers[%d]", i)
		switch {
		case h.Job != nil && h.Job.Namespace == "":
			return fmt.Errorf("%s.job.namespace: required: the watched objects have no namespace for the Jobs", field)
		case h.Exec != nil && h.Exec.ServiceAccount != nil && h.Exec.ServiceAccount.Namespace == "":
			return fmt.Errorf("%s.exec.serviceAccount.namespace: required: the watched objects have no namespace for the ServiceAccount", field)
		case h.Exec != nil:
			for j, env := range h.Exec.Env {
				if ref := env.ValueFrom; ref != nil && ref.SecretKeyRef != nil && ref.SecretKeyRef.Namespace == "" {
					return fmt.Errorf("%s.exec.env[%d].valueFrom.secretKeyRef.namespace: required: the watched objects have no namespace for the Secret", field, j)
				}
			}
		}
	}
	return nil
}

// Check refuses a watch of a kind the cluster does not serve or the
// engine may not get, list and watch where it watches, naming the field.
func Check(ctx context.Context, cfg Config, d *definition.Definition) error {
	w := d.Watch
	mapping, err := cfg.Mapper.RESTMapping(w.GVK.GroupKind(), w.GVK.Version)
	if err != nil {
		return fmt.Errorf("operator %s: spec.watch: kind %s is not served by the cluster: %w", d.Operator.Name, w.GVK, err)
	}
	namespaces := cfg.Namespaces
	if len(namespaces) == 0 || mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		namespaces = []string{""}
	}
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		if err := needNamespaces(d); err != nil {
			return fmt.Errorf("operator %s: %w (%s is cluster-scoped)", d.Operator.Name, err, w.GVK.Kind)
		}
	}
	verbs := []string{"get", "list", "watch"}
	if w.Finalizer {
		verbs = append(verbs, "patch")
	}
	// The reviews go at once (a few at a time), and the first refused in
	// the order of namespaces and verbs is reported.
	type check struct {
		ns, verb string
		allowed  bool
		err      error
	}
	var checks []*check
	for _, ns := range namespaces {
		for _, verb := range verbs {
			checks = append(checks, &check{ns: ns, verb: verb})
		}
	}
	var g errgroup.Group
	g.SetLimit(8)
	for _, c := range checks {
		g.Go(func() error {
			review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: c.verb, Namespace: c.ns, Group: mapping.Resource.Group, Version: mapping.Resource.Version, Resource: mapping.Resource.Resource},
			}}
			got, err := cfg.Clientset.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
			c.err, c.allowed = err, err == nil && got.Status.Allowed
			return nil
		})
	}
	_ = g.Wait()
	for _, c := range checks {
		if c.err != nil {
			return fmt.Errorf("operator %s: spec.watch: checking the engine may %s %s: %w", d.Operator.Name, c.verb, mapping.Resource.Resource, c.err)
		}
		if !c.allowed {
			where := "in all namespaces"
			if c.ns != "" {
				where = "in namespace " + c.ns
			}
			return fmt.Errorf("operator %s: spec.watch: the engine may not %s %s %s; grant it %s and %s on %s there", d.Operator.Name, c.verb, mapping.Resource.GroupResource(), where, strings.Join(verbs[:len(verbs)-1], ", "), verbs[len(verbs)-1], mapping.Resource.GroupResource())
		}
	}
	return nil
}

package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/executor"
	"github.com/opkit-dev/opkit/internal/scenario"
	"github.com/opkit-dev/opkit/internal/source"
)

// TestFieldManager is the field manager of what apply steps write.
const TestFieldManager = "opkit-test"

// describe says what a step does, in one line.
func describe(s *scenario.Step) string {
	if s.Refused != nil {
		return describeAction(s) + fmt.Sprintf(", refused with %q", s.Refused.Message)
	}
	return describeAction(s)
}

func describeAction(s *scenario.Step) string {
	if s.Name != "" {
		return s.Kind() + " " + s.Name
	}
	switch {
	case s.Apply != nil:
		names := make([]string, len(s.Apply.Objects))
		for i, o := range s.Apply.Objects {
			u := unstructured.Unstructured{Object: o}
			names[i] = u.GetKind() + " " + u.GetName()
		}
		return "apply " + strings.Join(names, ", ")
	case s.Patch != nil:
		return "patch " + s.Patch.Object.String()
	case s.Delete != nil:
		return "delete " + s.Delete.Object.String()
	case s.Retry != nil:
		return "retry " + s.Retry.Object.String()
	case s.Advance != nil:
		return "advance " + s.Advance.By.String()
	case s.Stub != nil:
		return "stub " + s.Stub.Handler
	case s.Unstub != nil:
		return "unstub " + s.Unstub.Handler
	case s.Send != nil:
		return "send to " + s.Send.Source
	case s.Expect != nil:
		return "expect " + describeExpect(s.Expect)
	}
	return s.Kind()
}

// step runs one step.
func (r *scenarioRun) step(ctx context.Context, s *scenario.Step) error {
	switch {
	case s.Apply != nil:
		return refusal(s.Refused, r.apply(ctx, s.Apply))
	case s.Patch != nil:
		obj, err := r.object(s.Patch.Object)
		if err != nil {
			return err
		}
		patch, err := json.Marshal(s.Patch.Merge)
		if err != nil {
			return err
		}
		if err := r.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return refusal(s.Refused, fmt.Errorf("patching %s: %w", s.Patch.Object, err))
		}
		return refusal(s.Refused, nil)
	case s.Delete != nil:
		obj, err := r.object(s.Delete.Object)
		if err != nil {
			return err
		}
		if err := r.client.Delete(ctx, obj); err != nil {
			return refusal(s.Refused, fmt.Errorf("deleting %s: %w", s.Delete.Object, err))
		}
		return refusal(s.Refused, nil)
	case s.Retry != nil:
		obj, err := r.object(s.Retry.Object)
		if err != nil {
			return err
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{v1alpha1.RetryAnnotation: time.Now().UTC().Format(time.RFC3339Nano)}}})
		if err := r.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return fmt.Errorf("asking for a retry of %s: %w", s.Retry.Object, err)
		}
		return nil
	case s.Advance != nil:
		// Objects' times (creationTimestamp) are the API server's, in
		// real time: the clock never lags behind it.
		if now := time.Now(); r.clock.Now().Before(now) {
			r.clock.SetTime(now)
		}
		r.clock.Step(s.Advance.By)
		r.eng.ClockStepped()
		return nil
	case s.Stub != nil:
		return r.stub(s.Stub)
	case s.Unstub != nil:
		d, err := r.operator(s.Unstub.Operator)
		if err != nil {
			return err
		}
		if _, err := handler(d, s.Unstub.Handler); err != nil {
			return err
		}
		r.stubs.Delete(d.Operator.Name, s.Unstub.Handler)
		return nil
	case s.Send != nil:
		return r.send(ctx, s.Send)
	case s.Expect != nil:
		return r.expect(ctx, s.Expect)
	}
	return fmt.Errorf("a step with no action")
}

// apply creates or updates each object in the scenario's namespace,
// server-side.
func (r *scenarioRun) apply(ctx context.Context, a *scenario.Apply) error {
	for _, o := range a.Objects {
		u := &unstructured.Unstructured{Object: deepCopy(o)}
		mapping, err := r.cl.mapping(u.GroupVersionKind())
		if err != nil {
			return err
		}
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			u.SetNamespace(r.ns)
		} else {
			return fmt.Errorf("%s %s is cluster-scoped: a scenario applies objects in its own namespace only", u.GetKind(), u.GetName())
		}
		apply := client.ApplyConfigurationFromUnstructured(u)
		if err := r.client.Apply(ctx, apply, client.FieldOwner(TestFieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

// refusal holds the outcome of a step's request, err, to what the step
// expects: that the API server accepts it (want nil), or refuses it with
// a message containing want.Message. A refusal is an answer of the API
// server's checks (400 Bad Request, 403 Forbidden, 422 Invalid); any
// other error (no such object, no answer) is the step's failure either
// way.
func refusal(want *scenario.Refused, err error) error {
	msg, refused := refusedMessage(err)
	switch {
	case want == nil && refused:
		return &errStep{what: "refused by the API server", expected: "accepted", found: msg + "\n(to expect this refusal, add to the step: refused: {message: TEXT OF IT})"}
	case want == nil:
		return err
	case err == nil:
		return &errStep{what: "accepted, not refused", expected: fmt.Sprintf("refused, with a message containing %q", want.Message), found: "accepted: the API server made the change"}
	case !refused:
		return fmt.Errorf("expected a refusal with a message containing %q; failed otherwise: %w", want.Message, err)
	case !strings.Contains(msg, want.Message):
		return &errStep{what: "refused with another message", expected: fmt.Sprintf("a message containing %q", want.Message), found: msg}
	}
	return nil
}

// refusedMessage is the message of an error the API server's checks
// answered a request with; ok is false for any other error.
func refusedMessage(err error) (msg string, ok bool) {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return "", false
	}
	switch status.Status().Code {
	case http.StatusBadRequest, http.StatusForbidden, http.StatusUnprocessableEntity:
		return status.Status().Message, true
	}
	return "", false
}

// object resolves a reference to an object of the scenario's namespace.
func (r *scenarioRun) object(ref scenario.Ref) (*unstructured.Unstructured, error) {
	gvk, err := r.gvk(ref)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	u.SetName(ref.Name)
	mapping, err := r.cl.mapping(gvk)
	if err != nil {
		return nil, err
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		u.SetNamespace(r.ns)
	}
	return u, nil
}

// gvk finds a reference's kind: its apiVersion's when given, else an
// operator's custom resource of that kind, else the one kind of that name
// the API serves.
func (r *scenarioRun) gvk(ref scenario.Ref) (schema.GroupVersionKind, error) {
	if ref.APIVersion != "" {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			return schema.GroupVersionKind{}, err
		}
		return gv.WithKind(ref.Kind), nil
	}
	for _, d := range r.defs {
		if d.Owns() && d.GVK.Kind == ref.Kind {
			return d.GVK, nil
		}
	}
	return r.cl.kind(ref.Kind)
}

// mapping is the REST mapping of a kind, with discovery read again once
// when the kind is new (a CRD installed since).
func (c *cluster) mapping(gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		c.mapper.Reset()
		m, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("kind %s: %w", gvk, err)
	}
	return m, nil
}

// kind finds the one served kind of that name, preferring the core group.
func (c *cluster) kind(kind string) (schema.GroupVersionKind, error) {
	var found []schema.GroupVersionKind
	for range 2 {
		lists, err := c.disc.ServerPreferredResources()
		if err != nil && len(lists) == 0 {
			return schema.GroupVersionKind{}, err
		}
		found = nil
		for _, l := range lists {
			gv, err := schema.ParseGroupVersion(l.GroupVersion)
			if err != nil {
				continue
			}
			for _, res := range l.APIResources {
				if res.Kind == kind && !strings.Contains(res.Name, "/") {
					found = append(found, gv.WithKind(kind))
				}
			}
		}
		if len(found) > 0 {
			break
		}
		c.disc.Invalidate()
	}
	switch {
	case len(found) == 0:
		return schema.GroupVersionKind{}, fmt.Errorf("no kind %s is served: give its apiVersion, or check its CRD", kind)
	case len(found) == 1:
		return found[0], nil
	}
	for _, gvk := range found {
		if gvk.Group == "" {
			return gvk, nil
		}
	}
	names := make([]string, len(found))
	for i, gvk := range found {
		names[i] = gvk.GroupVersion().String()
	}
	return schema.GroupVersionKind{}, fmt.Errorf("kind %s is served by %s: give its apiVersion", kind, strings.Join(names, ", "))
}

// operator finds the definition a step names, or the scenario's only one.
func (r *scenarioRun) operator(name string) (*definition.Definition, error) {
	if name == "" {
		if len(r.defs) == 1 {
			return r.defs[0], nil
		}
		return nil, fmt.Errorf("the scenario runs %d operators (%s): name one in the step (operator: NAME)", len(r.defs), strings.Join(r.operatorNames(), ", "))
	}
	for _, d := range r.defs {
		if d.Operator.Name == name {
			return d, nil
		}
	}
	return nil, fmt.Errorf("no operator %q in the scenario's files; they define %s", name, strings.Join(r.operatorNames(), ", "))
}

func (r *scenarioRun) operatorNames() []string {
	names := make([]string, len(r.defs))
	for i, d := range r.defs {
		names[i] = d.Operator.Name
	}
	return names
}

// handler finds a handler of d by name, an admission handler (on validate
// or mutate) included: their calls are runs too, and can be stubbed.
func handler(d *definition.Definition, name string) (*definition.Handler, error) {
	var names []string
	for _, h := range slices.Concat(d.Handlers, d.Admission) {
		if h.Name == name {
			return h, nil
		}
		names = append(names, h.Name)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("operator %s has no handler %q: it has none", d.Operator.Name, name)
	}
	return nil, fmt.Errorf("operator %s has no handler %q; its handlers: %s", d.Operator.Name, name, strings.Join(names, ", "))
}

// stub replaces a handler's action by canned results.
func (r *scenarioRun) stub(s *scenario.Stub) error {
	d, err := r.operator(s.Operator)
	if err != nil {
		return err
	}
	if _, err := handler(d, s.Handler); err != nil {
		return err
	}
	results := make([]executor.CannedResult, len(s.Results))
	for i, res := range s.Results {
		results[i].Log = res.Log
		if res.Fail != "" {
			results[i].Failure = &executor.Failure{Message: res.Fail, Permanent: res.Permanent}
			continue
		}
		if res.Result != nil {
			data, err := json.Marshal(res.Result)
			if err != nil {
				return err
			}
			parsed, err := executor.ParseResult(data)
			if err != nil {
				return fmt.Errorf("results[%d].result is not a handler result: %w", i, err)
			}
			results[i].Result = parsed
		}
	}
	r.stubs.Set(d.Operator.Name, s.Handler, executor.NewCanned(results...))
	return nil
}

// send posts a webhook delivery to one of the engine's sources, signed
// with the source's secret, and checks the answer's status.
func (r *scenarioRun) send(ctx context.Context, s *scenario.Send) error {
	d, err := r.operator(s.Operator)
	if err != nil {
		return err
	}
	src := d.EventSource(s.Source)
	if src == nil {
		var names []string
		for _, src := range d.Sources {
			names = append(names, src.Name)
		}
		return fmt.Errorf("operator %s has no source %q; its sources: %s", d.Operator.Name, s.Source, strings.Join(names, ", "))
	}
	body, err := json.Marshal(s.Payload)
	if err != nil {
		return err
	}
	if src.Consumed() {
		return r.inject(ctx, d, src, s, body)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	for k, v := range s.Headers {
		h.Set(k, v)
	}
	if src.DeliveryHeader != "" && h.Get(src.DeliveryHeader) == "" {
		h.Set(src.DeliveryHeader, "opkit-test-"+utilrand.String(10))
	}
	if src.EventHeader != "" && s.Event != "" {
		h.Set(src.EventHeader, s.Event)
	}
	status, answer, err := Deliver(ctx, r.client, r.eng.HooksAddr(), d.Operator.Name, src, body, h)
	if err != nil {
		return err
	}
	if status != s.Status {
		return &errStep{what: "the delivery's answer", expected: fmt.Sprintf("%d", s.Status), found: fmt.Sprintf("%d %s", status, strings.TrimSpace(string(answer)))}
	}
	return nil
}

// inject hands a message to a consumed source (githubPoll, nats, kafka)
// as its consumer would: opkit test's engine reaches no GitHub, NATS or
// Kafka. The status is the one a webhook delivery would be answered with.
func (r *scenarioRun) inject(ctx context.Context, d *definition.Definition, src *definition.EventSource, s *scenario.Send, body []byte) error {
	m := source.Message{ID: s.ID, Event: s.Event, Body: body, Headers: map[string]string{}}
	if m.ID == "" {
		m.ID = "opkit-test-" + utilrand.String(10)
	}
	for k, v := range s.Headers {
		m.Headers[strings.ToLower(k)] = v
	}
	if src.Kind == definition.KindGitHubPoll {
		m.Headers["x-github-event"], m.Headers["x-github-delivery"] = m.Event, m.ID
	}
	_, status, err := r.eng.Inject(ctx, d.Operator.Name, src.Name, m)
	if err != nil {
		return err
	}
	if status != s.Status {
		return &errStep{what: "the message's outcome", expected: fmt.Sprintf("%d", s.Status), found: fmt.Sprintf("%d", status)}
	}
	return nil
}

// deepCopy copies a JSON-like object.
func deepCopy(o map[string]any) map[string]any {
	return (&unstructured.Unstructured{Object: o}).DeepCopy().Object
}

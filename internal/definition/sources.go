package definition

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/textproto"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// Verification kinds of an EventSource.
const (
	VerifyGitHub = "github"
	VerifyHMAC   = "hmac"
	VerifyBearer = "bearer"
)

// GitHub's webhook headers, the defaults of a github source.
const (
	GitHubSignatureHeader = "X-Hub-Signature-256"
	GitHubDeliveryHeader  = "X-GitHub-Delivery"
	GitHubEventHeader     = "X-GitHub-Event"
)

// Kinds of EventSource: where its deliveries come from.
const (
	// KindWebhook and KindCloudEvents are posted to the hooks listener.
	KindWebhook     = "webhook"
	KindCloudEvents = "cloudEvents"
	// KindGitHubPoll, KindNATS and KindKafka are taken by a consumer the
	// engine runs (package source's Consumer) while the operator runs.
	KindGitHubPoll = "githubPoll"
	KindNATS       = "nats"
	KindKafka      = "kafka"
)

// Defaults of a consumer's source.
const (
	DefaultPollInterval = 60 * time.Second
	MinPollInterval     = 10 * time.Second
	DefaultGitHubAPI    = "https://api.github.com"
)

// EventSource is a compiled spec.sources[] entry: how its deliveries are
// verified and read, which it accepts, and what an accepted one does.
type EventSource struct {
	Name string
	// Member is the name the engine's consumer of a consumed source goes
	// by: opkit-<operator>-<source>, the default NATS consumer and Kafka
	// group, and the name of the Kafka consumer's static member id.
	Member string
	// Kind is where deliveries come from: KindWebhook, KindCloudEvents,
	// KindGitHubPoll, KindNATS or KindKafka.
	Kind string
	// CloudEvents, GitHubPoll, NATS and Kafka are the source's spec, its
	// defaults filled in, for the kind that has one; nil for the others.
	CloudEvents *v1alpha1.CloudEventsSource
	GitHubPoll  *v1alpha1.GitHubPollSource
	NATS        *v1alpha1.NATSSource
	Kafka       *v1alpha1.KafkaSource
	// PollInterval is a githubPoll source's interval.
	PollInterval time.Duration
	// Verify is how a delivery proves its sender: VerifyGitHub,
	// VerifyHMAC or VerifyBearer, with the shared secret in Secret.
	Verify string
	Secret v1alpha1.SecretKeySelector
	// SignatureHeader and SignaturePrefix are where the hex HMAC-SHA256 of
	// the body is, for github (X-Hub-Signature-256, "sha256=") and hmac.
	SignatureHeader string
	SignaturePrefix string
	// DeliveryHeader holds the sender's delivery id (empty: the sender
	// gives none, and replays are not recognised); EventHeader the kind of
	// event (empty: none). Both canonical (textproto) header names.
	DeliveryHeader string
	EventHeader    string
	// MaxBodyBytes refuses a larger body (a message's, for a consumer).
	MaxBodyBytes int64
	// Filter is the condition a delivery must meet, or nil for all.
	Filter *Expression
	// Object is the custom resource applied per accepted delivery, or nil.
	Object *ObjectTemplate
	// Handlers are the handlers on event its deliveries run, in order.
	Handlers []*Handler
}

// ObjectTemplate is a source's object: a template of one custom resource
// of the operator, rendered per delivery.
type ObjectTemplate struct {
	// Template is the decoded template, apiVersion and kind filled in.
	Template map[string]any
	// Slots are its strings with expressions.
	Slots []*Slot
	GVK   schema.GroupVersionKind
}

// EventVars are the values a source's expressions see of one delivery.
type EventVars struct {
	// Payload is the decoded JSON body.
	Payload any
	// Headers are the delivery's headers by lower-case name, first value.
	Headers map[string]string
	// Event is what the sender says the event is (EventHeader), or "".
	Event string
	// DeliveryID is the sender's delivery id, or "".
	DeliveryID string
	// Source is the source's name.
	Source string
}

func (v EventVars) activation() map[string]any {
	headers := v.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	return map[string]any{
		"payload": v.Payload, "headers": headers, "event": v.Event,
		"delivery": map[string]any{"id": v.DeliveryID, "source": v.Source},
	}
}

// Accepts reports whether a delivery meets the source's filter.
func (s *EventSource) Accepts(vars EventVars) (bool, error) {
	if s.Filter == nil {
		return true, nil
	}
	return s.Filter.evalBool(vars.activation())
}

// Render returns the source's object for one delivery.
func (o *ObjectTemplate) Render(vars EventVars) (map[string]any, error) {
	return renderTemplate(o.Template, o.Slots, vars.activation())
}

// EventSource returns the operator's event source of that name, or nil.
func (d *Definition) EventSource(name string) *EventSource {
	for _, s := range d.Sources {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// eventEnv is the CEL environment of a source's filter and object:
// payload (dyn), headers (map of strings), event (string) and delivery
// (id and source).
func eventEnv() (*cel.Env, error) {
	set, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions: []cel.EnvOption{
			cel.Variable("payload", cel.DynType),
			cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
			cel.Variable("event", cel.StringType),
			cel.Variable("delivery", cel.MapType(cel.StringType, cel.StringType)),
		},
	})
	if err != nil {
		return nil, err
	}
	return set.NewExpressionsEnv(), nil
}

// compileSources compiles spec.sources and ties each to the handlers on
// event that name it (or name none). It runs after compileHandlers.
func compileSources(l *errorList, d *Definition) {
	op := d.Operator
	srcs := op.Spec.Sources
	names := map[string]bool{}
	named := true // every source has a valid name: references can be checked
	for _, s := range srcs {
		names[s.Name] = true
		named = named && handlerNameRE.MatchString(s.Name) && len(s.Name) <= 63
	}
	for i, h := range op.Spec.Handlers {
		field := fmt.Sprintf("spec.handlers[%d]", i)
		onEvent := slices.Contains(h.On, v1alpha1.OnEvent)
		switch {
		case len(h.Sources) > 0 && !onEvent:
			l.add(field+".sources", "sources names the sources of the event trigger, which this handler does not have: add event to on")
		case onEvent && len(h.On) > 1:
			l.add(field+".on", "a handler on event runs for the operator, once per delivery, with no object: it cannot have other triggers (%s); give those their own handler", strings.Join(slices.DeleteFunc(slices.Clone(h.On), func(t string) bool { return t == v1alpha1.OnEvent }), ", "))
		case onEvent && len(srcs) == 0:
			l.add(field+".on", "the event trigger runs the handler for deliveries of the operator's sources, and it declares none: add spec.sources")
		}
		for j, s := range h.Sources {
			if named && !names[s] {
				l.add(fmt.Sprintf("%s.sources[%d]", field, j), "there is no source named %q (sources: %s)", s, strings.Join(slices.Sorted(maps.Keys(names)), ", "))
			}
		}
	}
	if len(srcs) == 0 {
		return
	}
	env, err := eventEnv()
	if err != nil {
		l.add("spec.sources", "%v", err)
		return
	}
	seen := map[string]bool{}
	for i, s := range srcs {
		field := fmt.Sprintf("spec.sources[%d]", i)
		switch {
		case s.Name == "":
			l.add(field+".name", "required: it names the source in its URL, /hooks/%s/<name>", op.Name)
		case !handlerNameRE.MatchString(s.Name) || len(s.Name) > 63:
			l.add(field+".name", "%q is not a DNS label (lower-case letters, digits and '-', at most 63)", s.Name)
		case seen[s.Name]:
			l.add(field+".name", "duplicate source name %q: each source needs its own", s.Name)
		}
		seen[s.Name] = true
		out := &EventSource{Name: s.Name}
		compileKind(l, field, op.Name, s, out)
		if s.Filter != "" {
			out.Filter = compileCondition(l, env, field+".filter", s.Filter)
		}
		if s.Object != nil {
			out.Object = compileObjectTemplate(l, env, field+".object", s.Object.Raw, d)
		}
		for hi, h := range op.Spec.Handlers {
			if slices.Contains(h.On, v1alpha1.OnEvent) && (len(h.Sources) == 0 || slices.Contains(h.Sources, s.Name)) && hi < len(d.Handlers) {
				out.Handlers = append(out.Handlers, d.Handlers[hi])
			}
		}
		if len(out.Handlers) == 0 && out.Object == nil && s.Name != "" {
			l.add(field, "source %q does nothing with a delivery: add a handler with on: [event] (and sources: [%s]), or an object to create", s.Name, s.Name)
		}
		d.Sources = append(d.Sources, out)
	}
}

// compileKind checks the one kind a source has.
func compileKind(l *errorList, field, operator string, s v1alpha1.Source, out *EventSource) {
	var kinds []string
	for _, k := range []struct {
		set  bool
		name string
	}{{s.Webhook != nil, KindWebhook}, {s.CloudEvents != nil, KindCloudEvents}, {s.GitHubPoll != nil, KindGitHubPoll}, {s.NATS != nil, KindNATS}, {s.Kafka != nil, KindKafka}} {
		if k.set {
			kinds = append(kinds, k.name)
		}
	}
	if len(kinds) != 1 {
		what := "none"
		if len(kinds) > 1 {
			what = strings.Join(kinds, " and ")
		}
		l.add(field, "set exactly one of webhook, cloudEvents, githubPoll, nats and kafka (this one has %s): where the source's events come from", what)
		return
	}
	out.Kind = kinds[0]
	consumer := "opkit-" + operator + "-" + s.Name
	out.Member = consumer
	switch out.Kind {
	case KindWebhook:
		compileWebhook(l, field+".webhook", s.Webhook, out)
	case KindCloudEvents:
		compileCloudEvents(l, field+".cloudEvents", s.CloudEvents, out)
	case KindGitHubPoll:
		compileGitHubPoll(l, field+".githubPoll", s.GitHubPoll, out)
	case KindNATS:
		compileNATS(l, field+".nats", *s.NATS, consumer, out)
	case KindKafka:
		compileKafka(l, field+".kafka", *s.Kafka, consumer, out)
	}
}

// kafkaNameRE is a Kafka topic or group name.
var kafkaNameRE = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// checkNATSName checks a stream's or consumer's name.
func checkNATSName(l *errorList, field, name string, required bool) {
	switch {
	case name == "" && required:
		l.add(field, "required")
	case len(name) > 255 || strings.ContainsAny(name, " \t\r\n.*>/\\"):
		l.add(field, "%q is not a JetStream name (no spaces, '.', '*', '>', '/' or '\\', at most 255)", name)
	}
}

// checkTLS checks a source's TLS.
func checkTLS(l *errorList, field string, t *v1alpha1.SourceTLS) {
	if t != nil && t.CASecretRef != nil {
		checkSecretRef(l, field+".caSecretRef", *t.CASecretRef)
	}
}

// checkMaxBody checks a body limit and returns it, defaulted.
func checkMaxBody(l *errorList, field string, n int64) int64 {
	switch {
	case n == 0:
		return v1alpha1.DefaultWebhookBody
	case n < 0 || n > v1alpha1.MaxWebhookBody:
		l.add(field, "%d is out of range: from 1 to %d (25 MiB)", n, v1alpha1.MaxWebhookBody)
		return v1alpha1.DefaultWebhookBody
	}
	return n
}

// checkChoice checks a field that takes one of two values: empty, it is
// set to the first, the default; any other value is reported.
func checkChoice(l *errorList, field string, v *string, first, second string) {
	switch *v {
	case "":
		*v = first
	case first, second:
	default:
		l.add(field, "%q: %s or %s", *v, first, second)
	}
}

// countSet is how many of set are true: how many of a choice's fields are
// set.
func countSet(set ...bool) int {
	n := 0
	for _, s := range set {
		if s {
			n++
		}
	}
	return n
}

// compileCloudEvents checks a cloudEvents source: verified as an hmac or
// bearer webhook, its delivery id and event read from the event itself.
func compileCloudEvents(l *errorList, field string, c *v1alpha1.CloudEventsSource, out *EventSource) {
	ce := *c
	if (c.HMAC != nil) == (c.Bearer != nil) {
		l.add(field, "set exactly one of hmac and bearer: a source never accepts a delivery it cannot verify")
	} else {
		compileSecretVerify(l, field, c.HMAC, c.Bearer, out)
	}
	checkChoice(l, field+".batch", &ce.Batch, v1alpha1.BatchRefuse, v1alpha1.BatchSplit)
	ce.MaxBodyBytes = checkMaxBody(l, field+".maxBodyBytes", ce.MaxBodyBytes)
	out.CloudEvents, out.MaxBodyBytes = &ce, ce.MaxBodyBytes
}

// compileSecretVerify sets out's verification from the one of hmac and
// bearer that is set (a webhook's or a cloudEvents source's).
func compileSecretVerify(l *errorList, field string, hmac *v1alpha1.HMACVerification, bearer *v1alpha1.WebhookSecret, out *EventSource) {
	if hmac != nil {
		out.Verify, out.SignaturePrefix = VerifyHMAC, hmac.Prefix
		out.SignatureHeader = checkHeader(l, field+".hmac.header", hmac.Header, true)
		out.Secret = checkSecretRef(l, field+".hmac.secretRef", hmac.SecretRef)
		return
	}
	out.Verify = VerifyBearer
	out.Secret = checkSecretRef(l, field+".bearer.secretRef", bearer.SecretRef)
}

// compileGitHubPoll checks a githubPoll source.
func compileGitHubPoll(l *errorList, field string, g *v1alpha1.GitHubPollSource, out *EventSource) {
	p := *g
	switch {
	case (p.Repository == "") == (p.Organization == ""):
		l.add(field, "set exactly one of repository (owner/name) and organization")
	case p.Repository != "":
		owner, name, ok := strings.Cut(p.Repository, "/")
		if !ok || !githubLoginRE.MatchString(owner) || !githubRepoRE.MatchString(name) {
			l.add(field+".repository", "%q is not owner/name", p.Repository)
		}
	default:
		if !githubLoginRE.MatchString(p.Organization) {
			l.add(field+".organization", "%q is not an organization's login (letters, digits and '-')", p.Organization)
		}
	}
	switch {
	case (p.TokenSecretRef == nil) == (p.App == nil):
		l.add(field, "set exactly one of tokenSecretRef and app: how opkit authenticates to GitHub")
	case p.TokenSecretRef != nil:
		checkSecretRef(l, field+".tokenSecretRef", *p.TokenSecretRef)
	default:
		if p.App.AppID <= 0 {
			l.add(field+".app.appID", "required: the App's id")
		}
		if p.App.InstallationID <= 0 {
			l.add(field+".app.installationID", "required: the installation's id")
		}
		checkSecretRef(l, field+".app.privateKeySecretRef", p.App.PrivateKeySecretRef)
	}
	if p.APIURL == "" {
		p.APIURL = DefaultGitHubAPI
	}
	if u, err := url.Parse(p.APIURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		l.add(field+".apiURL", "%q is not an http(s) URL like https://api.github.com", p.APIURL)
	}
	out.PollInterval = DefaultPollInterval
	if p.Interval != "" {
		d, err := time.ParseDuration(p.Interval)
		switch {
		case err != nil:
			l.add(field+".interval", "%q is not a duration like 30s or 2m", p.Interval)
		case d < MinPollInterval:
			l.add(field+".interval", "%s is too short: at least %s (GitHub's X-Poll-Interval asks for 60s)", d, MinPollInterval)
		default:
			out.PollInterval = d
		}
	}
	checkChoice(l, field+".since", &p.Since, v1alpha1.SinceNow, v1alpha1.SinceAll)
	out.GitHubPoll = &p
	out.EventHeader = GitHubEventHeader
	// GitHub's own cap on a webhook's payload: the events API's are
	// smaller.
	out.MaxBodyBytes = v1alpha1.MaxWebhookBody
}

// GitHub's names.
var (
	githubLoginRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,38})$`)
	githubRepoRE  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)
)

// compileWebhook checks a source's webhook.
func compileWebhook(l *errorList, field string, w *v1alpha1.WebhookSource, out *EventSource) {
	if n := countSet(w.GitHub != nil, w.HMAC != nil, w.Bearer != nil); n != 1 {
		l.add(field, "set exactly one of github, hmac and bearer (this one has %d): a source never accepts a delivery it cannot verify", n)
		return
	}
	switch {
	case w.GitHub != nil:
		out.Verify, out.SignatureHeader, out.SignaturePrefix = VerifyGitHub, GitHubSignatureHeader, "sha256="
		out.DeliveryHeader, out.EventHeader = GitHubDeliveryHeader, GitHubEventHeader
		out.Secret = checkSecretRef(l, field+".github.secretRef", w.GitHub.SecretRef)
	default:
		compileSecretVerify(l, field, w.HMAC, w.Bearer, out)
	}
	if w.DeliveryHeader != "" {
		out.DeliveryHeader = checkHeader(l, field+".deliveryHeader", w.DeliveryHeader, false)
	}
	if w.EventHeader != "" {
		out.EventHeader = checkHeader(l, field+".eventHeader", w.EventHeader, false)
	}
	out.MaxBodyBytes = checkMaxBody(l, field+".maxBodyBytes", w.MaxBodyBytes)
}

// SecretUse is a Secret key a source reads, and what for.
type SecretUse struct {
	Ref v1alpha1.SecretKeySelector
	// For says what the key holds, e.g. "its shared secret".
	For string
}

// SecretRefs are the Secret keys the source reads.
func (s *EventSource) SecretRefs() []SecretUse {
	var out []SecretUse
	add := func(ref *v1alpha1.SecretKeySelector, what string) {
		if ref != nil && ref.Name != "" {
			out = append(out, SecretUse{Ref: *ref, For: what})
		}
	}
	switch s.Kind {
	case KindWebhook, KindCloudEvents, "":
		add(&s.Secret, "its shared secret")
	case KindGitHubPoll:
		add(s.GitHubPoll.TokenSecretRef, "its GitHub token")
		if s.GitHubPoll.App != nil {
			add(&s.GitHubPoll.App.PrivateKeySecretRef, "its GitHub App's private key")
		}
	case KindNATS:
		add(s.NATS.TokenSecretRef, "its NATS token")
		add(s.NATS.CredsSecretRef, "its NATS credentials")
		add(s.NATS.PasswordSecretRef, "its NATS password")
		if s.NATS.TLS != nil {
			add(s.NATS.TLS.CASecretRef, "the CA of its NATS servers")
		}
	case KindKafka:
		if s.Kafka.SASL != nil {
			add(&s.Kafka.SASL.PasswordSecretRef, "its Kafka password")
		}
		if s.Kafka.TLS != nil {
			add(s.Kafka.TLS.CASecretRef, "the CA of its Kafka brokers")
		}
	}
	return out
}

// Consumed reports whether the source's deliveries are taken by a
// consumer the engine runs, not posted to its hooks listener.
func (s *EventSource) Consumed() bool {
	return s.Kind == KindGitHubPoll || s.Kind == KindNATS || s.Kind == KindKafka
}

// checkHeader checks a header name and returns its canonical form.
func checkHeader(l *errorList, field, name string, required bool) string {
	switch {
	case name == "" && required:
		l.add(field, "required: the header's name, like X-Signature")
		return ""
	case len(validation.IsHTTPHeaderName(name)) > 0:
		l.add(field, "%q is not an HTTP header name (letters, digits and '-', like X-Delivery-Id)", name)
		return ""
	}
	return textproto.CanonicalMIMEHeaderKey(name)
}

// checkSecretRef checks the Secret key of a source's shared secret.
func checkSecretRef(l *errorList, field string, ref v1alpha1.SecretKeySelector) v1alpha1.SecretKeySelector {
	if msgs := validation.IsDNS1123Label(ref.Namespace); len(msgs) > 0 {
		l.add(field+".namespace", "required, a namespace name: an Operator is cluster-scoped, so the Secret's namespace must be named (%s)", strings.Join(msgs, "; "))
	}
	if msgs := validation.IsDNS1123Subdomain(ref.Name); len(msgs) > 0 {
		l.add(field+".name", "required, a Secret name (%s)", strings.Join(msgs, "; "))
	}
	if msgs := validation.IsConfigMapKey(ref.Key); len(msgs) > 0 {
		l.add(field+".key", "required, a key of the Secret (%s)", strings.Join(msgs, "; "))
	}
	return ref
}

// compileObjectTemplate checks a source's object: a custom resource of
// the operator's own, named by the template.
func compileObjectTemplate(l *errorList, env *cel.Env, field string, raw []byte, d *Definition) *ObjectTemplate {
	if !d.Owns() {
		l.add(field, "a source's object is a custom resource of the operator's own: declare spec.resource, or run a handler on event instead")
		return nil
	}
	var tmpl map[string]any
	if err := json.Unmarshal(raw, &tmpl); err != nil || tmpl == nil {
		l.add(field, "expected an object: the custom resource to create or patch, like {metadata: {name: ..., namespace: ...}, spec: {...}}")
		return nil
	}
	out := &ObjectTemplate{Template: tmpl, GVK: d.GVK}
	for _, k := range []string{"apiVersion", "kind"} {
		want := map[string]string{"apiVersion": d.GVK.GroupVersion().String(), "kind": d.GVK.Kind}[k]
		if v, ok := tmpl[k]; ok && v != want {
			l.add(field+"."+k, "%v: a source's object is the operator's own custom resource, %s; leave %s out", v, want, k)
		}
		tmpl[k] = want
	}
	meta, _ := tmpl["metadata"].(map[string]any)
	if meta == nil || meta["name"] == nil {
		l.add(field+".metadata.name", "required: the object's name, often from the payload, like deploy-${string(payload.comment.id)}")
	}
	namespaced := d.Operator.Spec.Resource.Scope != v1alpha1.ClusterScoped
	switch {
	case namespaced && (meta == nil || meta["namespace"] == nil):
		l.add(field+".metadata.namespace", "required: %s is namespaced", d.GVK.Kind)
	case !namespaced && meta != nil && meta["namespace"] != nil:
		l.add(field+".metadata.namespace", "%s is cluster-scoped: leave namespace out", d.GVK.Kind)
	}
	if _, ok := tmpl["status"]; ok {
		l.add(field+".status", "the status is the operator's to write: leave it out")
	}
	walkStrings(tmpl, nil, func(path []any, s string) {
		if slot := compileString(l, env, field+pathString(path), s, path); slot != nil && !slot.verbatim(s) {
			out.Slots = append(out.Slots, slot)
		}
	})
	return out
}

package definition

import (
	"crypto/x509"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/cel/common"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// Handler is a compiled handler: its triggers, policies and one action.
type Handler struct {
	Name string
	// On is the set of triggers.
	On []string
	// Fields are the dotted paths under spec an update must touch; empty
	// (with no RelatedFields) means any.
	Fields []string
	// RelatedFields are the fields of related objects whose change is an
	// update for the handler too: related.<id>.<path>.
	RelatedFields []RelatedField
	// When is the condition of the when trigger, or nil.
	When *Expression
	// States are the states whose entering (trigger enter) or leaving
	// (trigger exit) runs the handler, as declared; each is known (the
	// StateMachine's State.Enter and State.Exit list the handler).
	States []string

	schemas map[string]common.Schema // types children and related for When
	// Every, EveryExpr or Cron is the schedule, for the schedule trigger:
	// a fixed interval, one computed per object, or a cron expression.
	Every     time.Duration
	EveryExpr *Slot
	Cron      cron.Schedule
	// Location is the time zone of Cron; UTC unless the schedule names one.
	Location *time.Location
	// CatchUp is an operator-wide schedule's policy after downtime:
	// v1alpha1.CatchUpOnce or CatchUpSkip.
	CatchUp string
	// Timeout bounds one run.
	Timeout time.Duration
	Retry   RetryPolicy
	// Exactly one of the actions is set. Exec's command and working
	// directory are resolved against the definition file's directory.
	Exec *v1alpha1.ExecAction
	Job  *v1alpha1.JobAction
	HTTP *v1alpha1.HTTPAction
	// RunnerExec, set when Exec names an image, is Exec as written: its
	// relative command path and working directory are left for a runner
	// to resolve from the operator's files.
	RunnerExec *v1alpha1.ExecAction
	// Admission is set for a handler on validate or mutate, which the
	// API server calls through the engine's webhook; such a handler is in
	// Definition.Admission, never in Definition.Handlers.
	Admission *Admission
}

// Handler defaults.
const (
	DefaultTimeout     = 5 * time.Minute
	DefaultMaxAttempts = 5
	DefaultInitial     = time.Second
	DefaultMaxDelay    = 5 * time.Minute
	DefaultFactor      = 2.0
	DefaultJitter      = 0.1
)

// RetryPolicy is a defaulted retry policy.
type RetryPolicy struct {
	MaxAttempts int
	Initial     time.Duration
	Max         time.Duration
	Factor      float64
	Jitter      float64
}

// Delay is the wait after the failed attempt n (1-based): Initial ×
// Factor^(n-1), capped at Max, plus up to Jitter of it at random.
func (p RetryPolicy) Delay(n int) time.Duration {
	d := float64(p.Initial) * math.Pow(p.Factor, float64(max(n-1, 0)))
	d = min(d, float64(p.Max))
	d += d * p.Jitter * rand.Float64()
	return time.Duration(d)
}

// Next decides what follows the failed attempt n (1-based), the one place
// a retry is decided (the runs of objects and of the operator alike):
// none when the failure is permanent or the attempts are spent (gaveUp),
// else the next attempt at now plus its Delay.
func (p RetryPolicy) Next(n int, permanent bool, now time.Time) (retryAt time.Time, gaveUp bool) {
	if permanent || n >= p.MaxAttempts {
		return time.Time{}, true
	}
	return now.Add(p.Delay(n)), false
}

// Fires reports whether trigger is one of the handler's.
func (h *Handler) Fires(trigger string) bool { return slices.Contains(h.On, trigger) }

// Action names the handler's executor: exec, job or http ("" for none).
func (h *Handler) Action() string {
	switch {
	case h.Exec != nil:
		return "exec"
	case h.Job != nil:
		return "job"
	case h.HTTP != nil:
		return "http"
	}
	return ""
}

// ShortDuration writes d as a definition would, without its zero units:
// 10m, 1h30m, 45s (time.Duration's String gives 10m0s).
func ShortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// MinEvery is the shortest interval of a schedule.
const MinEvery = time.Second

// RelatedField is one field of a related object: related.<ID> then Path,
// map keys (string) and list indexes (int).
type RelatedField struct {
	Source string
	ID     string
	Path   []any
}

// Value is the field's value in related (Vars.Related), or nil when the
// object or the field is missing.
func (f RelatedField) Value(related map[string]any) any {
	v := related[f.ID]
	for _, p := range f.Path {
		switch p := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[p]
		case int:
			l, _ := v.([]any)
			if p >= len(l) {
				return nil
			}
			v = l[p]
		}
	}
	return v
}

// WhenHolds evaluates the When condition for vars. An error wrapping
// ErrChildMissing means it cannot be known yet (what it reads does not
// exist).
func (h *Handler) WhenHolds(vars Vars) (bool, error) {
	return h.When.evalBool(vars.activation(h.schemas))
}

// Touches reports whether a change of the dotted spec paths changed
// concerns the handler: always without any fields; otherwise when a
// changed path is one of Fields, lies under one, or contains one.
func (h *Handler) Touches(changed []string) bool {
	if len(h.Fields) == 0 && len(h.RelatedFields) == 0 {
		return len(changed) > 0
	}
	for _, c := range changed {
		for _, f := range h.Fields {
			if c == f || strings.HasPrefix(c, f+".") || strings.HasPrefix(f, c+".") {
				return true
			}
		}
	}
	return false
}

var relatedPartRE = regexp.MustCompile(`\.[A-Za-z0-9_-]+|\[[0-9]+\]`)

var relatedFieldRE = regexp.MustCompile(`^related\.([a-z][a-zA-Z0-9_]*)((?:\.[A-Za-z0-9_-]+|\[[0-9]+\])*)$`)

// parseRelatedField parses related.<id>.<path>, with [n] list indexes.
func parseRelatedField(f string, relatedIDs map[string]bool) (RelatedField, error) {
	m := relatedFieldRE.FindStringSubmatch(f)
	if m == nil {
		return RelatedField{}, fmt.Errorf("%q is not a related object's field like related.app.spec.template.spec.containers[0].image", f)
	}
	if !relatedIDs[m[1]] {
		return RelatedField{}, fmt.Errorf("%q reads related.%s, but there is no related object with id %q (related: %s)", f, m[1], m[1], strings.Join(slices.Sorted(maps.Keys(relatedIDs)), ", "))
	}
	rf := RelatedField{Source: f, ID: m[1]}
	for _, p := range relatedPartRE.FindAllString(m[2], -1) {
		if p[0] == '.' {
			rf.Path = append(rf.Path, p[1:])
			continue
		}
		n, _ := strconv.Atoi(p[1 : len(p)-1])
		rf.Path = append(rf.Path, n)
	}
	return rf, nil
}

var (
	handlerNameRE = regexp.MustCompile(v1alpha1.HandlerNamePattern)
	fieldPathRE   = regexp.MustCompile(`^spec(\.[A-Za-z0-9_-]+)*$`)
	objectPathRE  = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z0-9_/-]+)*$`)
	triggers      = []string{v1alpha1.OnCreate, v1alpha1.OnUpdate, v1alpha1.OnDelete, v1alpha1.OnResume, v1alpha1.OnSchedule, v1alpha1.OnWhen, v1alpha1.OnEvent, v1alpha1.OnEnter, v1alpha1.OnExit, v1alpha1.OnValidate, v1alpha1.OnMutate}
	cronParser    = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	// cronCheckFrom is where Compile looks for a cron's first time: a
	// leap year's start, so that 29 February is found.
	cronCheckFrom = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// compileHandlers validates and defaults spec.handlers. dir is the
// definition file's directory, or "" for the cluster.
//
// noNamespace, when not empty, says why the handlers' objects have no
// namespace (the resource is cluster-scoped...): what is namespaced must
// then name one.
func compileHandlers(l *errorList, envs *celEnvs, hs []v1alpha1.Handler, dir string, noNamespace string, relatedIDs map[string]bool, subj subject) []*Handler {
	var out []*Handler
	names := map[string]bool{}
	for i, h := range hs {
		field := fmt.Sprintf("spec.handlers[%d]", i)
		c := &Handler{Name: h.Name, Timeout: h.Timeout.Duration}
		switch {
		case h.Name == "":
			l.add(field+".name", "required")
		case !handlerNameRE.MatchString(h.Name) || len(h.Name) > 63:
			l.add(field+".name", "%q is not a DNS label (lower-case letters, digits and '-', at most 63)", h.Name)
		case names[h.Name]:
			l.add(field+".name", "duplicate handler name %q: each handler needs its own", h.Name)
		}
		names[h.Name] = true
		if len(h.On) == 0 {
			l.add(field+".on", "required: one or more of %s", strings.Join(triggers, ", "))
		}
		for j, t := range h.On {
			switch {
			case !slices.Contains(triggers, t):
				l.add(fmt.Sprintf("%s.on[%d]", field, j), "unknown trigger %q; expected one of %s", t, strings.Join(triggers, ", "))
			case slices.Contains(c.On, t):
				l.add(fmt.Sprintf("%s.on[%d]", field, j), "trigger %q is listed twice", t)
			default:
				c.On = append(c.On, t)
			}
		}
		if len(h.Fields) > 0 && !c.Fires(v1alpha1.OnUpdate) {
			l.add(field+".fields", "fields filters the update trigger, which this handler does not have")
		}
		for j, f := range h.Fields {
			f = strings.TrimPrefix(f, ".")
			if strings.HasPrefix(f, "related.") {
				rf, err := parseRelatedField(f, relatedIDs)
				if err != nil {
					l.add(fmt.Sprintf("%s.fields[%d]", field, j), "%v", err)
					continue
				}
				c.RelatedFields = append(c.RelatedFields, rf)
				continue
			}
			if subj == watchedSubject {
				root, _, _ := strings.Cut(f, ".")
				switch {
				case !objectPathRE.MatchString(f) || root == "apiVersion" || root == "kind":
					l.add(fmt.Sprintf("%s.fields[%d]", field, j), "%q is not a dotted path in the watched object (e.g. spec.template, metadata.labels, data)", h.Fields[j])
					continue
				case f == "metadata":
					l.add(fmt.Sprintf("%s.fields[%d]", field, j), "name a field of the metadata, like metadata.labels or metadata.annotations: the whole metadata changes at every write")
					continue
				}
				c.Fields = append(c.Fields, f)
				continue
			}
			if !fieldPathRE.MatchString(f) {
				l.add(fmt.Sprintf("%s.fields[%d]", field, j), "%q is not a dotted path under spec (e.g. spec.replicas) or a related object's field (e.g. related.app.spec.template.spec.containers[0].image)", h.Fields[j])
				continue
			}
			c.Fields = append(c.Fields, f)
		}
		switch {
		case h.When != "" && !c.Fires(v1alpha1.OnWhen):
			l.add(field+".when", "when is the condition of the when trigger, which this handler does not have: add when to on")
		case h.When == "" && c.Fires(v1alpha1.OnWhen):
			l.add(field+".when", "required by the when trigger: a CEL condition over self, children and related, like children.server.status.readyReplicas == self.spec.replicas")
		case h.When != "":
			c.When = compileCondition(l, envs.object, field+".when", h.When)
		}
		compileSchedule(l, envs, field, h, c, subj)
		compileHandlerStates(l, field, h, c, subj)
		switch {
		case c.Timeout < 0:
			l.add(field+".timeout", "must be positive")
		case c.Timeout > 24*time.Hour:
			l.add(field+".timeout", "%s is longer than the 24h limit", c.Timeout)
		case c.Timeout == 0:
			c.Timeout = DefaultTimeout
		}
		c.Retry = compileRetry(l, field+".retry", h.Retry)
		nn := noNamespace
		if c.Fires(v1alpha1.OnEvent) {
			nn = "a handler on event runs for the operator, with no object, and so no namespace"
		}
		compileAction(l, field, h, c, dir, nn)
		compileAdmission(l, field, h, c, subj)
		out = append(out, c)
	}
	return out
}

func compileRetry(l *errorList, field string, r *v1alpha1.Retry) RetryPolicy {
	p := RetryPolicy{MaxAttempts: DefaultMaxAttempts, Initial: DefaultInitial, Max: DefaultMaxDelay, Factor: DefaultFactor, Jitter: DefaultJitter}
	if r == nil {
		return p
	}
	if r.MaxAttempts < 0 {
		l.add(field+".maxAttempts", "must be at least 1")
	} else if r.MaxAttempts > 0 {
		p.MaxAttempts = int(r.MaxAttempts)
	}
	if d := r.InitialDelay.Duration; d < 0 {
		l.add(field+".initialDelay", "must be positive")
	} else if d > 0 {
		p.Initial = d
	}
	if d := r.MaxDelay.Duration; d < 0 {
		l.add(field+".maxDelay", "must be positive")
	} else if d > 0 {
		p.Max = d
	}
	if p.Max < p.Initial {
		l.add(field+".maxDelay", "%s is shorter than initialDelay %s", p.Max, p.Initial)
	}
	if r.Factor != 0 && (r.Factor < 1 || r.Factor > 10) {
		l.add(field+".factor", "%g is outside 1 to 10", r.Factor)
	} else if r.Factor != 0 {
		p.Factor = r.Factor
	}
	if r.Jitter != nil && (*r.Jitter < 0 || *r.Jitter > 1) {
		l.add(field+".jitter", "%g is outside 0 to 1", *r.Jitter)
	} else if r.Jitter != nil {
		p.Jitter = *r.Jitter
	}
	return p
}

// compileEnv checks environment variables: names, and each one's value
// either literal or from a Secret. An exec handler's Secret is read by the
// engine, from the object's namespace unless one is named (which a
// cluster-scoped resource must); a job handler's by the kubelet, from the
// Job's namespace only (jobNamespace, or the object's when "").
func compileEnv(l *errorList, field string, env []v1alpha1.EnvVar, noNamespace string, jobNamespace string) {
	job := strings.HasSuffix(field, ".job.env")
	for j, v := range env {
		f := fmt.Sprintf("%s[%d]", field, j)
		if v.Name == "" || strings.ContainsAny(v.Name, "=\x00") {
			l.add(f+".name", "%q is not an environment variable name", v.Name)
		}
		if v.ValueFrom == nil {
			continue
		}
		ref := v.ValueFrom.SecretKeyRef
		switch {
		case v.Value != "":
			l.add(f, "set value or valueFrom, not both")
		case ref == nil:
			l.add(f+".valueFrom.secretKeyRef", "required: the Secret and key to read")
		case job && ref.Namespace != "" && ref.Namespace != jobNamespace:
			l.add(f+".valueFrom.secretKeyRef.namespace", "a Job's pod reads Secrets of its own namespace only: leave namespace out, or set job.namespace to %q", ref.Namespace)
		case !job && noNamespace != "" && ref.Namespace == "":
			l.add(f+".valueFrom.secretKeyRef.namespace", "required: %s, so the Secret's namespace must be named", noNamespace)
		}
	}
}

func compileAction(l *errorList, field string, h v1alpha1.Handler, c *Handler, dir string, noNamespace string) {
	if n := countSet(h.Exec != nil, h.Job != nil, h.HTTP != nil); n != 1 {
		l.add(field, "a handler has exactly one of exec, job and http; this one has %d", n)
		return
	}
	switch {
	case h.Exec != nil:
		e := *h.DeepCopy().Exec
		if len(e.Command) == 0 || e.Command[0] == "" {
			l.add(field+".exec.command", "required: the program and its arguments")
			return
		}
		if e.Image != "" {
			if _, err := name.ParseReference(e.Image); err != nil || strings.TrimSpace(e.Image) != e.Image {
				l.add(field+".exec.image", "handler %s: %q is not an image reference like python:3.12-slim or ghcr.io/team/tools:1.4", h.Name, e.Image)
			}
			c.RunnerExec = h.DeepCopy().Exec
		}
		// A relative program path with a slash, and a relative working
		// directory, are relative to the definition's file.
		if dir != "" && strings.Contains(e.Command[0], "/") && !filepath.IsAbs(e.Command[0]) {
			e.Command[0] = filepath.Join(dir, e.Command[0])
		}
		if dir != "" && !filepath.IsAbs(e.WorkingDir) {
			e.WorkingDir = filepath.Join(dir, e.WorkingDir)
		}
		compileEnv(l, field+".exec.env", e.Env, noNamespace, "")
		if sa := e.ServiceAccount; sa != nil {
			if msgs := validation.IsDNS1123Subdomain(sa.Name); len(msgs) > 0 {
				l.add(field+".exec.serviceAccount.name", "%q is not a ServiceAccount name: %s", sa.Name, strings.Join(msgs, "; "))
			}
			if noNamespace != "" && sa.Namespace == "" {
				l.add(field+".exec.serviceAccount.namespace", "required: %s, so the ServiceAccount's namespace must be named", noNamespace)
			}
		}
		switch e.Mode {
		case "", v1alpha1.ExecRun:
			if e.Processes != 0 {
				l.add(field+".exec.processes", "set with mode: Serve only: a handler in mode Run starts a process per run")
			}
		case v1alpha1.ExecServe:
			if e.ServiceAccount != nil {
				l.add(field+".exec.serviceAccount", "not with mode: Serve: its token is requested for each run, and a Serve process outlives runs; use mode: Run, or an http handler")
			}
			if e.Processes < 0 || e.Processes > 64 {
				l.add(field+".exec.processes", "%d is not between 1 and 64", e.Processes)
			}
		default:
			l.add(field+".exec.mode", "%q is not Run or Serve", e.Mode)
		}
		c.Exec = &e
	case h.Job != nil:
		if h.Job.Image == "" {
			l.add(field+".job.image", "required")
		}
		if noNamespace != "" && h.Job.Namespace == "" {
			l.add(field+".job.namespace", "required: %s, so its Jobs need a namespace", noNamespace)
		}
		compileEnv(l, field+".job.env", h.Job.Env, "", h.Job.Namespace)
		c.Job = h.DeepCopy().Job
	default:
		u, err := url.Parse(h.HTTP.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			l.add(field+".http.url", "%q is not an http or https URL", h.HTTP.URL)
		}
		if h.HTTP.CABundle != "" && !x509.NewCertPool().AppendCertsFromPEM([]byte(h.HTTP.CABundle)) {
			l.add(field+".http.caBundle", "holds no PEM certificate")
		}
		c.HTTP = h.DeepCopy().HTTP
	}
}

package definition

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// watchOp reacts to Deployments it does not own. Its lines are counted by
// the tests below: namespaces[1] is on line 10, the selector on 11, the
// operator of matchExpressions[0] on 14, the filter on 15, the handler's
// fields on 19.
const watchOp = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: deploys}
spec:
  watch:
    apiVersion: apps/v1
    kind: Deployment
    namespaces:
    - team-b
    - team-a
    selector:
      matchLabels: {app: web}
      matchExpressions:
      - {key: tier, operator: In, values: [front]}
    filter: "self.spec.replicas > 0"
  handlers:
  - name: rolled
    on: [create, update]
    fields: [metadata.annotations, status.readyReplicas, spec.template]
    exec: {command: [/bin/true]}
`

// calendarOp has neither resource nor watch: operator-wide schedules.
// The first handler's on is on line 7, its schedule on 8, every on 9; the
// second's cron on 14, timeZone on 15, catchUp on 16.
const calendarOp = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: nightly}
spec:
  handlers:
  - name: tick
    on: [schedule]
    schedule:
      every: 2s
    exec: {command: [/bin/true]}
  - name: report
    on: [schedule]
    schedule:
      cron: "0 9 * * *"
      timeZone: Europe/Prague
      catchUp: Skip
    job: {image: busybox, namespace: ops}
`

// deploymentSchema resolves apps/v1 Deployment from a subset of what the
// API server publishes: metadata's creationTimestamp is a date-time, as
// in ObjectMeta.
var deploymentSchema = staticSchemas{{Group: "apps", Version: "v1", Kind: "Deployment"}: `{
  "type": "object",
  "properties": {
    "apiVersion": {"type": "string"},
    "kind": {"type": "string"},
    "metadata": {"type": "object", "properties": {
      "name": {"type": "string"},
      "namespace": {"type": "string"},
      "creationTimestamp": {"type": "string", "format": "date-time"},
      "labels": {"type": "object", "additionalProperties": {"type": "string"}},
      "annotations": {"type": "object", "additionalProperties": {"type": "string"}}
    }},
    "spec": {"type": "object", "properties": {
      "replicas": {"type": "integer"},
      "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
    }},
    "status": {"type": "object", "properties": {"readyReplicas": {"type": "integer"}}}
  }
}`}

// replace returns s with from replaced by to once, failing the test when
// from is not in s (a table entry that no longer changes anything).
func replace(t *testing.T, s, from, to string) string {
	t.Helper()
	out := strings.Replace(s, from, to, 1)
	if from != "" && out == s {
		t.Fatalf("%q is not in the definition", from)
	}
	return out
}

// compileOne compiles yaml read as file, with schemas when not nil.
func compileOne(t *testing.T, file, yaml string, schemas SchemaResolver) (*Definition, error) {
	t.Helper()
	srcs, err := Load(file, []byte(yaml))
	if err != nil {
		return nil, err
	}
	if len(srcs) != 1 {
		t.Fatalf("%s: %d operators, want 1", file, len(srcs))
	}
	if schemas != nil {
		return CompileWithSchemas(srcs[0], schemas)
	}
	return Compile(srcs[0])
}

// wantOneError checks that err is exactly one problem, in file at line,
// at field, with a message containing message.
func wantOneError(t *testing.T, err error, file string, line int, field, message string) {
	t.Helper()
	if err == nil {
		t.Fatalf("compiled; want %s:%d: %s: ...%s...", file, line, field, message)
	}
	es, ok := errors.AsType[Errors](err)
	if !ok {
		t.Fatalf("error %T %v, want Errors", err, err)
	}
	if len(es) != 1 {
		t.Errorf("%d errors, want one:\n%v", len(es), err)
	}
	e := es[0]
	if e.File != file || e.Line != line || e.Field != field || !strings.Contains(e.Message, message) {
		t.Errorf("got %s\n(file %q, line %d, field %q)\nwant %s:%d: %s: ...%s...", e, e.File, e.Line, e.Field, file, line, field, message)
	}
}

func TestAWatchCompilesWithItsNamespacesSelectorFilterAndFields(t *testing.T) {
	d, err := compileOne(t, "watch.yaml", watchOp, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Owns() || d.Calendar() || d.Watch == nil {
		t.Fatalf("owns %v, calendar %v, watch %v; want a watch", d.Owns(), d.Calendar(), d.Watch)
	}
	w := d.Watch
	if want := (schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}); w.GVK != want {
		t.Errorf("GVK %v, want %v", w.GVK, want)
	}
	if strings.Join(w.Namespaces, ",") != "team-a,team-b" {
		t.Errorf("namespaces %v, want team-a,team-b (sorted)", w.Namespaces)
	}
	if got := w.Selector.String(); got != "app=web,tier in (front)" {
		t.Errorf("selector %q", got)
	}
	if got := d.What(); got != "the watch of Deployment.apps" {
		t.Errorf("What() = %q", got)
	}
	for replicas, want := range map[int64]bool{0: false, 3: true} {
		ok, err := w.Matches(map[string]any{"spec": map[string]any{"replicas": replicas}})
		if err != nil || ok != want {
			t.Errorf("Matches with %d replicas = %v, %v; want %v", replicas, ok, err, want)
		}
	}
	h := d.Handlers[0]
	if strings.Join(h.Fields, ",") != "metadata.annotations,status.readyReplicas,spec.template" {
		t.Errorf("fields %v", h.Fields)
	}
	// Fields are paths from the object's root.
	if !h.Touches([]string{"spec.template.spec.containers"}) || !h.Touches([]string{"metadata.annotations.note"}) || h.Touches([]string{"spec.replicas"}) {
		t.Error("Touches does not read the fields as paths from the root")
	}

	// Neither namespaces, nor selector, nor filter: every object of the kind.
	all := replace(t, replace(t, watchOp, "    filter: \"self.spec.replicas > 0\"\n", ""), "    namespaces:\n    - team-b\n    - team-a\n    selector:\n      matchLabels: {app: web}\n      matchExpressions:\n      - {key: tier, operator: In, values: [front]}\n", "")
	d, err = compileOne(t, "watch.yaml", all, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w := d.Watch; len(w.Namespaces) != 0 || !w.Selector.Empty() || w.Filter != nil {
		t.Errorf("watch %+v; want all namespaces, every label, no filter", w)
	}
	if ok, err := d.Watch.Matches(map[string]any{}); !ok || err != nil {
		t.Errorf("Matches without a filter = %v, %v; want true", ok, err)
	}
}

func TestBadWatchesNameTheFieldAndLine(t *testing.T) {
	for name, tc := range map[string]struct {
		from, to string
		line     int
		field    string
		message  string
	}{
		"resource and watch": {"  watch:\n", "  resource: {group: demo.example.com, kind: App, versions: [{name: v1}]}\n  watch:\n", 6, "spec.watch", "set at most one of resource"},
		"no apiVersion":      {"    apiVersion: apps/v1\n", "", 5, "spec.watch.apiVersion", "required, and it cannot be an expression"},
		"apiVersion expr":    {"    apiVersion: apps/v1\n", "    apiVersion: ${self.spec.group}\n", 6, "spec.watch.apiVersion", "cannot be an expression"},
		"bad apiVersion":     {"    apiVersion: apps/v1\n", "    apiVersion: apps/v1/beta\n", 6, "spec.watch.apiVersion", "unexpected GroupVersion string"},
		"no kind":            {"    kind: Deployment\n", "", 5, "spec.watch.kind", "required, and it cannot be an expression"},
		"kind expr":          {"    kind: Deployment\n", "    kind: ${self.kind}\n", 7, "spec.watch.kind", "cannot be an expression"},
		"namespace name":     {"    - team-a\n", "    - Team_A\n", 10, "spec.watch.namespaces[1]", `"Team_A" is not a namespace name`},
		"namespace twice":    {"    - team-a\n", "    - team-b\n", 10, "spec.watch.namespaces[1]", `namespace "team-b" is listed twice`},
		"label key":          {"{app: web}", `{"bad key!": web}`, 12, "spec.watch.selector.matchLabels.bad key!", `"bad key!" is not a label key`},
		"label value":        {"{app: web}", `{app: "bad value!"}`, 12, "spec.watch.selector.matchLabels.app", `"bad value!" is not a label value`},
		"operator":           {"operator: In", "operator: Near", 14, "spec.watch.selector.matchExpressions[0].operator", `"Near"`},
		"expression key":     {"key: tier", `key: "bad key!"`, 14, "spec.watch.selector.matchExpressions[0].key", `"bad key!" is not a label key`},
		"In without values":  {"values: [front]", "values: []", 14, "spec.watch.selector.matchExpressions[0].values", "In needs values"},
		"Exists with values": {"operator: In", "operator: Exists", 14, "spec.watch.selector.matchExpressions[0].values", "Exists takes no values"},
		"filter syntax":      {`"self.spec.replicas > 0"`, `"self.spec.replicas >"`, 15, "spec.watch.filter", "Syntax error"},
		"filter not a bool":  {`"self.spec.replicas > 0"`, `"size(self.metadata.name)"`, 15, "spec.watch.filter", "is of type int: a condition must be a bool"},
		"filter children":    {`"self.spec.replicas > 0"`, `"has(children.config.data)"`, 15, "spec.watch.filter", "a watch's filter reads self alone"},
		"filter related":     {`"self.spec.replicas > 0"`, `"size(related.pods) > 0"`, 15, "spec.watch.filter", "a watch's filter reads self alone"},
		"related":            {"  handlers:\n", "  related:\n  - {id: config, apiVersion: v1, kind: ConfigMap, name: x}\n  handlers:\n", 16, "spec.related", "a watch operator owns nothing: related objects are read for a custom resource"},
		"children":           {"  handlers:\n", "  children:\n  - id: config\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n  handlers:\n", 16, "spec.children", "a watch operator owns nothing: children need a custom resource"},
		"status":             {"  handlers:\n", "  status: {phase: ready}\n  handlers:\n", 16, "spec.status", "a watch operator owns nothing: status fields are written to a custom resource"},
		"fields apiVersion":  {"spec.template]", "apiVersion]", 19, "spec.handlers[0].fields[2]", `"apiVersion" is not a dotted path in the watched object`},
		"fields kind":        {"spec.template]", "kind]", 19, "spec.handlers[0].fields[2]", `"kind" is not a dotted path in the watched object`},
		"fields not a path":  {"spec.template]", `"spec template"]`, 19, "spec.handlers[0].fields[2]", `"spec template" is not a dotted path in the watched object`},
		"fields digit":       {"spec.template]", `"0.spec"]`, 19, "spec.handlers[0].fields[2]", `"0.spec" is not a dotted path in the watched object`},
		"fields empty part":  {"spec.template]", `"spec..template"]`, 19, "spec.handlers[0].fields[2]", `"spec..template" is not a dotted path in the watched object`},
		"fields end dot":     {"spec.template]", `"spec."]`, 19, "spec.handlers[0].fields[2]", `"spec." is not a dotted path in the watched object`},
		"fields metadata":    {"spec.template]", `metadata]`, 19, "spec.handlers[0].fields[2]", `name a field of the metadata, like metadata.labels`},
		"fields related":     {"spec.template]", `"related.app.data"]`, 19, "spec.handlers[0].fields[2]", `there is no related object with id "app"`},
		"catchUp per object": {"    exec: {command: [/bin/true]}\n", "    exec: {command: [/bin/true]}\n  - name: poll\n    on: [schedule]\n    schedule: {every: 1m, catchUp: Skip}\n    exec: {command: [/bin/true]}\n", 23, "spec.handlers[1].schedule.catchUp", "catchUp is for operator-wide schedules"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := compileOne(t, "watch.yaml", replace(t, watchOp, tc.from, tc.to), nil)
			wantOneError(t, err, "watch.yaml", tc.line, tc.field, tc.message)
		})
	}
}

func TestACatchUpOnASchedulePerCustomResourceIsRefused(t *testing.T) {
	_, err := compileOne(t, "app.yaml", base+"  handlers:\n  - name: poll\n    on: [schedule]\n    schedule: {every: 1m, catchUp: Once}\n    exec: {command: [/bin/true]}\n", nil)
	wantOneError(t, err, "app.yaml", 18, "spec.handlers[0].schedule.catchUp", "catchUp is for operator-wide schedules")
}

func TestACalendarCompilesItsSchedules(t *testing.T) {
	d, err := compileOne(t, "cal.yaml", calendarOp, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Calendar() || d.Owns() || d.Watch != nil || d.What() != "operator-wide schedules" {
		t.Fatalf("calendar %v, owns %v, watch %v, what %q", d.Calendar(), d.Owns(), d.Watch, d.What())
	}
	tick, report := d.Handlers[0], d.Handlers[1]
	if tick.Every != 2*time.Second || tick.Cron != nil || tick.CatchUp != v1alpha1.CatchUpOnce {
		t.Errorf("tick: every %s, cron %v, catchUp %q; want 2s, none, Once (the default)", tick.Every, tick.Cron, tick.CatchUp)
	}
	if report.Cron == nil || report.Location == nil || report.Location.String() != "Europe/Prague" || report.CatchUp != v1alpha1.CatchUpSkip {
		t.Errorf("report: cron %v, location %v, catchUp %q; want a cron in Europe/Prague, Skip", report.Cron, report.Location, report.CatchUp)
	}
	// A cron without a time zone is in UTC.
	d, err = compileOne(t, "cal.yaml", replace(t, calendarOp, "      timeZone: Europe/Prague\n", ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if loc := d.Handlers[1].Location; loc != time.UTC {
		t.Errorf("location %v, want UTC", loc)
	}
}

func TestBadCalendarsNameTheFieldAndLine(t *testing.T) {
	for name, tc := range map[string]struct {
		from, to string
		line     int
		field    string
		message  string
	}{
		"no handlers":        {calendarOp[strings.Index(calendarOp, "  handlers:\n"):], "  handlers: []\n", 4, "spec", "an Operator declares spec.resource"},
		"other triggers":     {"    on: [schedule]\n    schedule:\n      every", "    on: [schedule, create]\n    schedule:\n      every", 7, "spec.handlers[0].on", "its handlers run on schedule (on: [schedule]) or on event"},
		"no schedule":        {"    on: [schedule]\n    schedule:\n      every: 2s\n", "    on: [schedule]\n", 6, "spec.handlers[0].schedule", "required by the schedule trigger"},
		"every template":     {"every: 2s", `every: "${self.spec.seconds}s"`, 9, "spec.handlers[0].schedule.every", "an operator-wide schedule has no object to compute its interval from"},
		"every too short":    {"every: 2s", "every: 500ms", 9, "spec.handlers[0].schedule.every", "shorter than the 1s minimum"},
		"every and cron":     {"every: 2s", "every: 2s\n      cron: '* * * * *'", 8, "spec.handlers[0].schedule", "set exactly one of every and cron"},
		"catchUp unknown":    {"catchUp: Skip", "catchUp: Later", 16, "spec.handlers[1].schedule.catchUp", `"Later": expected Once or Skip`},
		"timeZone unknown":   {"Europe/Prague", "Europe/Praha", 15, "spec.handlers[1].schedule.timeZone", `"Europe/Praha" is not an IANA time zone`},
		"timeZone Local":     {"Europe/Prague", "Local", 15, "spec.handlers[1].schedule.timeZone", `"Local" is not an IANA time zone`},
		"timeZone and every": {"every: 2s", "every: 2s\n      timeZone: Europe/Prague", 10, "spec.handlers[0].schedule.timeZone", "a time zone applies to cron"},
		"cron":               {`"0 9 * * *"`, `"every day"`, 14, "spec.handlers[1].schedule.cron", "is not a cron expression of five fields"},
		// robfig/cron reads a time zone in the expression itself: it
		// would override timeZone unseen, and without a space after it
		// the parser panics.
		"cron TZ= no space": {`"0 9 * * *"`, `"TZ=UTC"`, 14, "spec.handlers[1].schedule.cron", "set the time zone in timeZone"},
		"cron CRON_TZ=":     {`"0 9 * * *"`, `"CRON_TZ=America/New_York 0 9 * * *"`, 14, "spec.handlers[1].schedule.cron", "set the time zone in timeZone"},
		"cron never due":    {`"0 9 * * *"`, `"0 9 30 2 *"`, 14, "spec.handlers[1].schedule.cron", "never comes due"},
		"cron @every":       {`"0 9 * * *"`, `"@every 5m"`, 14, "spec.handlers[1].schedule.cron", "write every: 5m"},
		"job namespace":     {"    job: {image: busybox, namespace: ops}\n", "    job: {image: busybox}\n", 17, "spec.handlers[1].job.namespace", "required"},
		"related":           {"  handlers:\n", "  related:\n  - {id: config, apiVersion: v1, kind: ConfigMap, name: x}\n  handlers:\n", 5, "spec.related", "runs operator-wide schedules only"},
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("Compile panicked: %v", p)
					}
				}()
				_, err = compileOne(t, "cal.yaml", replace(t, calendarOp, tc.from, tc.to), nil)
			}()
			wantOneError(t, err, "cal.yaml", tc.line, tc.field, tc.message)
		})
	}
}

func TestAWatchIsTypedByItsKindsSchema(t *testing.T) {
	typed := replace(t, watchOp, "    exec: {command: [/bin/true]}\n", "    exec: {command: [/bin/true]}\n  - name: ready\n    on: [when]\n    when: \"self.status.readyReplicas == self.spec.replicas\"\n    exec: {command: [/bin/true]}\n")
	d, err := compileOne(t, "watch.yaml", typed, deploymentSchema)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Typed() {
		t.Error("Typed() is false")
	}
	for name, tc := range map[string]struct {
		from, to string
		line     int
		field    string
		message  string
	}{
		"filter field": {"self.spec.replicas > 0", "self.spec.replicaz > 0", 15, "spec.watch.filter", "undefined field 'replicaz'"},
		"filter type":  {"self.spec.replicas > 0", "self.metadata.name", 15, "spec.watch.filter", "is of type string: a condition must be a bool"},
		"when field":   {"self.status.readyReplicas ==", "self.status.ready ==", 23, "spec.handlers[1].when", "undefined field 'ready'"},
		"not served":   {"    kind: Deployment\n", "    kind: Widget\n", 7, "spec.watch.kind", "kind apps/v1 Widget is not served by the cluster"},
	} {
		t.Run(name, func(t *testing.T) {
			yaml := replace(t, typed, tc.from, tc.to)
			_, err := compileOne(t, "watch.yaml", yaml, deploymentSchema)
			wantOneError(t, err, "watch.yaml", tc.line, tc.field, tc.message)
			// Untyped, self is dyn: only the kind's schema knows better.
			if name == "filter field" || name == "when field" || name == "not served" {
				if _, err := compileOne(t, "watch.yaml", yaml, nil); err != nil {
					t.Errorf("untyped: %v", err)
				}
			}
		})
	}
}

// A watch without expressions compiles the same with schemas or
// without (its engine does not fetch them); with a filter, a when, or a
// template's ${}, the watched kind's schema types self; an owned
// resource's children are typed by theirs.
func TestOnlyADefinitionTheSchemasCanChangeNeedsThem(t *testing.T) {
	noFilter := replace(t, watchOp, "    filter: \"self.spec.replicas > 0\"\n", "")
	for name, c := range map[string]struct {
		yaml string
		want bool
	}{
		"a watch with a filter":   {watchOp, true},
		"a watch without any":     {noFilter, false},
		"a handler's when":        {replace(t, noFilter, "    exec: {command: [/bin/true]}\n", "    exec: {command: [/bin/true]}\n  - name: ready\n    on: [when]\n    when: \"self.status.readyReplicas == self.spec.replicas\"\n    exec: {command: [/bin/true]}\n"), true},
		"a schedule's template":   {replace(t, noFilter, "    exec: {command: [/bin/true]}\n", "    exec: {command: [/bin/true]}\n  - name: tick\n    on: [schedule]\n    schedule: {every: \"${duration(self.metadata.annotations['every'])}\"}\n    exec: {command: [/bin/true]}\n"), true},
		"a schedule, written out": {replace(t, noFilter, "    exec: {command: [/bin/true]}\n", "    exec: {command: [/bin/true]}\n  - name: tick\n    on: [schedule]\n    schedule: {every: 5m}\n    exec: {command: [/bin/true]}\n"), false},
		"operator-wide schedules": {calendarOp, false},
		"an owned resource":       {base, true},
	} {
		d, err := compileOne(t, "op.yaml", c.yaml, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := d.NeedsSchemas(); got != c.want {
			t.Errorf("%s: NeedsSchemas() = %v; want %v", name, got, c.want)
		}
	}
}

func TestATypedFilterReadsTheObjectByItsSchema(t *testing.T) {
	yaml := replace(t, watchOp, `"self.spec.replicas > 0"`, `"self.metadata.creationTimestamp > timestamp('2026-01-01T00:00:00Z')"`)
	d, err := compileOne(t, "watch.yaml", yaml, deploymentSchema)
	if err != nil {
		t.Fatal(err)
	}
	for created, want := range map[string]bool{"2026-03-01T10:00:00Z": true, "2025-03-01T10:00:00Z": false} {
		obj := map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web", "creationTimestamp": created}, "spec": map[string]any{"replicas": int64(1)}}
		if ok, err := d.Watch.Matches(obj); err != nil || ok != want {
			t.Errorf("created %s: Matches = %v, %v; want %v", created, ok, err, want)
		}
	}
}

func TestNextSlotOfAnEveryIsAMultipleSinceTheEpoch(t *testing.T) {
	for _, every := range []time.Duration{2 * time.Second, 7 * time.Second, 90 * time.Second} {
		h := &Handler{Name: "tick", Every: every}
		for _, from := range []time.Time{
			time.Unix(1000, 0),
			time.Unix(1000, 1),
			time.Date(2026, 3, 28, 12, 0, 0, 500_000_000, time.UTC),
			time.Date(2026, 3, 28, 13, 0, 3, 0, time.FixedZone("CET", 3600)),
		} {
			slot, err := h.NextSlot(from)
			if err != nil {
				t.Fatal(err)
			}
			if !slot.After(from) || slot.Sub(from) > every {
				t.Errorf("every %s from %s: %s; want within (from, from+%s]", every, from, slot, every)
			}
			if slot.UnixNano()%int64(every) != 0 {
				t.Errorf("every %s from %s: %s is %s past a multiple of %s since the Unix epoch", every, from, slot, time.Duration(slot.UnixNano()%int64(every)), every)
			}
		}
	}
	// Go's zero time is 62135596800s before the epoch, 4s past a multiple
	// of 7s: slots counted from it would be 1004, 1011...
	h := &Handler{Name: "tick", Every: 7 * time.Second}
	slot, _ := h.NextSlot(time.Unix(1000, 0))
	if want := time.Unix(1001, 0); !slot.Equal(want) {
		t.Errorf("every 7s from 1000s: %d; want 1001 (7 × 143)", slot.Unix())
	}
	// A slot is after t: at a slot, the next one.
	if slot, _ := h.NextSlot(time.Unix(1001, 0)); !slot.Equal(time.Unix(1008, 0)) {
		t.Errorf("every 7s from the slot 1001s: %d; want 1008", slot.Unix())
	}
	if _, err := (&Handler{Name: "when-only"}).NextSlot(time.Unix(1000, 0)); err == nil {
		t.Error("a handler without a schedule has a next slot")
	}
}

func TestNextSlotOfACronIsInItsTimeZoneAcrossDST(t *testing.T) {
	d, err := compileOne(t, "cal.yaml", calendarOp, nil)
	if err != nil {
		t.Fatal(err)
	}
	report := d.Handlers[1]
	prague, err := time.LoadLocation("Europe/Prague")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		from  time.Time
		want  []time.Time // in UTC
		label string
	}{
		// Summer time starts on 29 March 2026 at 02:00 CET: 09:00 is 08:00
		// UTC before, 07:00 UTC after.
		{time.Date(2026, 3, 28, 0, 0, 0, 0, time.UTC), []time.Time{
			time.Date(2026, 3, 28, 8, 0, 0, 0, time.UTC),
			time.Date(2026, 3, 29, 7, 0, 0, 0, time.UTC),
			time.Date(2026, 3, 30, 7, 0, 0, 0, time.UTC),
		}, "spring"},
		// It ends on 25 October 2026 at 03:00 CEST.
		{time.Date(2026, 10, 24, 0, 0, 0, 0, time.UTC), []time.Time{
			time.Date(2026, 10, 24, 7, 0, 0, 0, time.UTC),
			time.Date(2026, 10, 25, 8, 0, 0, 0, time.UTC),
			time.Date(2026, 10, 26, 8, 0, 0, 0, time.UTC),
		}, "autumn"},
	} {
		at := tc.from
		for _, want := range tc.want {
			slot, err := report.NextSlot(at)
			if err != nil {
				t.Fatal(err)
			}
			if !slot.Equal(want) {
				t.Errorf("%s: after %s: %s; want %s", tc.label, at.UTC(), slot.UTC(), want)
			}
			if p := slot.In(prague); p.Hour() != 9 || p.Minute() != 0 {
				t.Errorf("%s: slot %s is %s in Prague; want 09:00", tc.label, slot.UTC(), p.Format("15:04"))
			}
			at = slot
		}
	}
	// Without a time zone, 09:00 UTC.
	d, err = compileOne(t, "cal.yaml", replace(t, calendarOp, "      timeZone: Europe/Prague\n", ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if slot, err := d.Handlers[1].NextSlot(time.Date(2026, 3, 28, 0, 0, 0, 0, time.UTC)); err != nil || !slot.Equal(time.Date(2026, 3, 28, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("in UTC: %s, %v; want 09:00 UTC", slot.UTC(), err)
	}
}

func TestACronThatNeverComesDueIsAnErrorNotAZeroTime(t *testing.T) {
	// Built as Compile would, past its check: 30 February never comes.
	sched, err := cronParser.Parse("0 9 30 2 *")
	if err != nil {
		t.Fatal(err)
	}
	h := &Handler{Name: "never", Cron: sched, Location: time.UTC}
	from := time.Date(2026, 3, 28, 0, 0, 0, 0, time.UTC)
	if slot, err := h.NextSlot(from); err == nil {
		t.Errorf("NextSlot = %s, no error; want one", slot)
	}
	if next, err := h.Next(from, nil); err == nil {
		t.Errorf("Next = %s, no error; want one (a zero time would be due at once, again and again)", next)
	}
}

func TestAWatchOfSecretsIsRefused(t *testing.T) {
	yaml := replace(t, watchOp, "apiVersion: apps/v1\n    kind: Deployment", "apiVersion: v1\n    kind: Secret")
	_, err := compileOne(t, "watch.yaml", yaml, nil)
	wantOneError(t, err, "watch.yaml", 7, "spec.watch.kind", "watching Secrets is not supported")
}

func TestAWatchsFieldsMayStartLikeApiVersionOrKind(t *testing.T) {
	yaml := replace(t, watchOp, "spec.template]", "spec.template, kinds, apiVersions.x]")
	if _, err := compileOne(t, "watch.yaml", yaml, nil); err != nil {
		t.Errorf("fields kinds and apiVersions.x refused: %v", err)
	}
}

func TestATypedWhenOverAWatchedObjectReadsItByItsSchema(t *testing.T) {
	yaml := replace(t, watchOp, `    exec: {command: [/bin/true]}
`, `    exec: {command: [/bin/true]}
  - name: old
    on: [when]
    when: "self.metadata.creationTimestamp < timestamp('2026-01-01T00:00:00Z')"
    exec: {command: [/bin/true]}
`)
	d, err := compileOne(t, "watch.yaml", yaml, deploymentSchema)
	if err != nil {
		t.Fatal(err)
	}
	for created, want := range map[string]bool{"2026-03-01T10:00:00Z": false, "2025-03-01T10:00:00Z": true} {
		obj := map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web", "creationTimestamp": created}, "spec": map[string]any{"replicas": int64(1)}}
		if ok, err := d.Handlers[1].WhenHolds(Vars{Self: obj}); err != nil || ok != want {
			t.Errorf("created %s: WhenHolds = %v, %v; want %v", created, ok, err, want)
		}
	}
}

package definition

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestHandlersCompileWithDefaults(t *testing.T) {
	d, err := compileFile(t, "ops/app.yaml", base+`  handlers:
  - name: announce
    on: [create, update]
    fields: [spec.image, .spec.replicas]
    exec:
      command: [./hooks/announce.sh, --loud]
      env: [{name: GREETING, value: hi}]
  - name: backup
    on: [schedule]
    schedule: {cron: "*/5 * * * *"}
    timeout: 30s
    retry: {maxAttempts: 3, initialDelay: 2s, maxDelay: 10s, factor: 3, jitter: 0}
    job: {image: busybox:1.36, command: [sh, -c, "echo hi"]}
  - name: notify
    on: [delete]
    http: {url: "https://hooks.example.com/notify"}
`)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Handlers) != 3 {
		t.Fatalf("%d handlers, want 3", len(d.Handlers))
	}
	announce, backup, notify := d.Handlers[0], d.Handlers[1], d.Handlers[2]
	dir, _ := filepath.Abs("ops")
	if got := announce.Exec.Command[0]; got != filepath.Join(dir, "hooks/announce.sh") {
		t.Errorf("command resolved to %q, want it under %s", got, dir)
	}
	if announce.Exec.WorkingDir != dir {
		t.Errorf("working dir %q, want %q", announce.Exec.WorkingDir, dir)
	}
	if announce.Timeout != DefaultTimeout || announce.Retry.MaxAttempts != DefaultMaxAttempts || announce.Action() != "exec" {
		t.Errorf("announce defaults: %+v", announce)
	}
	if strings.Join(announce.Fields, ",") != "spec.image,spec.replicas" {
		t.Errorf("fields %v", announce.Fields)
	}
	if backup.Timeout != 30*time.Second || backup.Retry != (RetryPolicy{MaxAttempts: 3, Initial: 2 * time.Second, Max: 10 * time.Second, Factor: 3, Jitter: 0}) {
		t.Errorf("backup policy: %+v %+v", backup.Timeout, backup.Retry)
	}
	from := time.Date(2026, 1, 1, 10, 2, 0, 0, time.UTC)
	if next, err := backup.Next(from, nil); err != nil || !next.Equal(time.Date(2026, 1, 1, 10, 5, 0, 0, time.UTC)) {
		t.Errorf("next run after %s: %s (%v)", from, next, err)
	}
	if notify.Action() != "http" || !notify.Fires("delete") || notify.Fires("update") {
		t.Errorf("notify: %+v", notify)
	}
}

func TestRetryDelaysGrowAndAreCapped(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 10, Initial: time.Second, Max: 10 * time.Second, Factor: 2, Jitter: 0}
	var got []time.Duration
	for n := 1; n <= 6; n++ {
		got = append(got, p.Delay(n))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays %v, want %v", got, want)
		}
	}
	p.Jitter = 0.5
	for range 100 {
		if d := p.Delay(2); d < 2*time.Second || d > 3*time.Second {
			t.Fatalf("delay with 50%% jitter %s, want within [2s, 3s]", d)
		}
	}
}

func TestFieldsFilterMatchesPathsAboveAndBelow(t *testing.T) {
	h := &Handler{Fields: []string{"spec.template.image"}}
	for _, c := range []struct {
		changed []string
		want    bool
	}{
		{[]string{"spec.template.image"}, true},
		{[]string{"spec.template"}, true},                  // the whole template was replaced
		{[]string{"spec.template.image.tag"}, true},        // a field below
		{[]string{"spec.template.imagePullPolicy"}, false}, // a sibling that shares a prefix
		{[]string{"spec.replicas"}, false},
		{nil, false},
	} {
		if got := h.Touches(c.changed); got != c.want {
			t.Errorf("Touches(%v) = %v, want %v", c.changed, got, c.want)
		}
	}
	if !(&Handler{}).Touches([]string{"spec.anything"}) {
		t.Error("a handler without fields should fire on any change")
	}
}

func TestInvalidHandlersNameEachProblem(t *testing.T) {
	_, err := compileFile(t, "app.yaml", base+`  handlers:
  - name: Bad_Name
    on: [create, explode, create]
    exec: {command: [echo]}
  - name: two
    on: [create]
    exec: {command: [echo]}
    http: {url: "https://x.example.com"}
  - name: sched
    on: [schedule]
    schedule: {cron: "every tuesday"}
    exec: {command: [echo]}
  - name: fields
    on: [create]
    fields: [metadata.labels]
    timeout: 48h
    retry: {maxAttempts: -1, initialDelay: 10s, maxDelay: 1s, factor: 20}
    http: {url: "ftp://x", caBundle: "not pem"}
  - name: sched
    on: [update]
    schedule: {every: 1s}
    exec: {command: [""]}
`)
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error %v is not Errors", err)
	}
	for _, want := range []string{
		`spec.handlers[0].name: "Bad_Name" is not a DNS label`,
		`spec.handlers[0].on[1]: unknown trigger "explode"`,
		`spec.handlers[0].on[2]: trigger "create" is listed twice`,
		`spec.handlers[1]: a handler has exactly one of exec, job and http; this one has 2`,
		`spec.handlers[2].schedule.cron: "every tuesday" is not a cron expression`,
		`spec.handlers[3].fields: fields filters the update trigger`,
		`spec.handlers[3].fields[0]: "metadata.labels" is not a dotted path under spec`,
		`spec.handlers[3].timeout: 48h0m0s is longer than the 24h limit`,
		`spec.handlers[3].retry.maxAttempts: must be at least 1`,
		`spec.handlers[3].retry.maxDelay: 1s is shorter than initialDelay 10s`,
		`spec.handlers[3].retry.factor: 20 is outside 1 to 10`,
		`spec.handlers[3].http.url: "ftp://x" is not an http or https URL`,
		`spec.handlers[3].http.caBundle: holds no PEM certificate`,
		`spec.handlers[4].name: duplicate handler name "sched"`,
		`spec.handlers[4].schedule: set, but the handler has no schedule trigger`,
		`spec.handlers[4].exec.command: required`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors lack %q:\n%v", want, err)
		}
	}
	for _, e := range errs {
		if e.Line == 0 {
			t.Errorf("%s: no line", e)
		}
	}
}

func TestStatusFieldsAreTypedInTheCRD(t *testing.T) {
	d, err := compileFile(t, "app.yaml", base+`  status:
    image: "${self.spec.image}"
    replicas: "${self.spec.replicas}"
    label: "image ${self.spec.image}"
    ready: "${self.spec.replicas > 0}"
    share: "${double(self.spec.replicas) / 2.0}"
    whole: "${self.spec}"
`)
	if err != nil {
		t.Fatal(err)
	}
	status := d.CRD().Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"]
	if status.XPreserveUnknownFields == nil || !*status.XPreserveUnknownFields {
		t.Error("the status is not open: opkit's and the handlers' fields would be pruned")
	}
	want := map[string]string{"image": "string", "replicas": "integer", "label": "string", "ready": "boolean", "share": "number"}
	for name, typ := range want {
		if got := status.Properties[name].Type; got != typ {
			t.Errorf("status.%s: type %q, want %q", name, got, typ)
		}
	}
	if _, ok := status.Properties["whole"]; ok {
		t.Error("a map-typed status field was declared; it should stay open")
	}
}

func TestEveryIsComputedPerObjectAndCheckedAtLoad(t *testing.T) {
	op := func(every string) string {
		return base + "  handlers:\n  - name: poll\n    on: [schedule]\n    schedule: {every: " + every + "}\n    exec: {command: [./poll]}\n"
	}
	for every, want := range map[string]time.Duration{
		`"90s"`:                          90 * time.Second,
		`"${self.spec.image}s"`:          0, // computed per object, below
		`"${duration(self.spec.image)}"`: 0,
	} {
		d, err := compileFile(t, "app.yaml", op(every))
		if err != nil {
			t.Fatalf("every %s: %v", every, err)
		}
		h := d.Handlers[0]
		if want != 0 {
			if got, err := h.Interval(nil); err != nil || got != want {
				t.Errorf("every %s: %s (%v), want %s", every, got, err, want)
			}
			continue
		}
		value := "45"
		if strings.Contains(every, "duration(") {
			value = "45s"
		}
		self := map[string]any{"spec": map[string]any{"image": value}}
		if got, err := h.Interval(self); err != nil || got != 45*time.Second {
			t.Errorf("every %s for image %q: %s (%v), want 45s", every, value, got, err)
		}
		if _, err := h.Interval(map[string]any{"spec": map[string]any{"image": "0.1"}}); err == nil || !strings.Contains(err.Error(), "spec.handlers[0].schedule.every") {
			t.Errorf("every %s for an interval under 1s or not a duration: %v; want an error naming the field", every, err)
		}
	}
	for every, want := range map[string]string{
		`"${self.spec.nosuch}s"`:  "app.yaml:18: spec.handlers[0].schedule.every: ${self.spec.nosuch}: ",
		`"${self.spec.replicas}"`: "app.yaml:18: spec.handlers[0].schedule.every: ${self.spec.replicas} is of type int; expected a duration",
		`"5 minutes"`:             "app.yaml:18: spec.handlers[0].schedule.every: ",
		`"500ms"`:                 "app.yaml:18: spec.handlers[0].schedule.every: 500ms is shorter than the 1s minimum",
	} {
		_, err := compileFile(t, "app.yaml", op(every))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("every %s: %v; want %q", every, err, want)
		}
	}
}

func TestEnvFromSecretsIsChecked(t *testing.T) {
	secret := func(ns string) string {
		return `{name: TOKEN, valueFrom: {secretKeyRef: {namespace: "` + ns + `", name: api, key: token}}}`
	}
	_, err := compileFile(t, "app.yaml", base+`  handlers:
  - name: both
    on: [create]
    exec: {command: [echo], env: [{name: TOKEN, value: x, valueFrom: {secretKeyRef: {name: api, key: token}}}]}
  - name: nothing
    on: [create]
    exec: {command: [echo], env: [{name: TOKEN, valueFrom: {}}]}
  - name: elsewhere
    on: [create]
    job: {image: busybox, env: [`+secret("vault")+`]}
  - name: fine
    on: [create]
    exec: {command: [echo], env: [{name: TOKEN, valueFrom: {secretKeyRef: {name: api, key: token}}}, `+secret("vault")+`]}
    job: {image: busybox, namespace: vault, env: [`+secret("vault")+`]}
`)
	want := []string{
		`app.yaml:18: spec.handlers[0].exec.env[0]: set value or valueFrom, not both`,
		`app.yaml:21: spec.handlers[1].exec.env[0].valueFrom.secretKeyRef: required: the Secret and key to read`,
		`app.yaml:24: spec.handlers[2].job.env[0].valueFrom.secretKeyRef.namespace: a Job's pod reads Secrets of its own namespace only: leave namespace out, or set job.namespace to "vault"`,
		`app.yaml:25: spec.handlers[3]: a handler has exactly one of exec, job and http; this one has 2`,
	}
	if err == nil || strings.Count(err.Error(), "\n")+1 != len(want) {
		t.Fatalf("errors:\n%v\nwant exactly:\n%s", err, strings.Join(want, "\n"))
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("errors lack %q:\n%v", w, err)
		}
	}

	// A cluster-scoped resource's exec handler has no namespace to read
	// its Secret from but the one named.
	cluster := strings.Replace(base, "    kind: App\n", "    kind: App\n    scope: Cluster\n", 1)
	_, err = compileFile(t, "app.yaml", cluster+`  handlers:
  - name: cleanup
    on: [delete]
    exec: {command: [echo], env: [{name: TOKEN, valueFrom: {secretKeyRef: {name: api, key: token}}}, `+secret("vault")+`]}
`)
	if want := `spec.handlers[0].exec.env[0].valueFrom.secretKeyRef.namespace: required: the resource is cluster-scoped, so the Secret's namespace must be named`; err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "env[1]") {
		t.Errorf("error %v, want only %q", err, want)
	}
}

func TestStatusSchemaTypesHandlerFieldsAndColumnsAreChecked(t *testing.T) {
	version := func(extra string) string {
		return strings.Replace(base, "          replicas: {type: integer}\n", "          replicas: {type: integer}\n"+extra, 1)
	}
	d, err := compileFile(t, "app.yaml", version(`      statusSchema:
        properties:
          backups: {type: integer}
          lastBackup: {type: string, format: date-time}
      printerColumns:
      - {name: Backups, jsonPath: .status.backups, type: integer}
      - {name: Last, jsonPath: .status.lastBackup, type: date}
      - {name: Image, jsonPath: .spec.image, type: string}
      - {name: Note, jsonPath: .status.note, type: string}
      - {name: Ready, jsonPath: '.status.conditions[?(@.type=="Ready")].status', type: string}
`)+`  status:
    size: "${self.spec.replicas}"
`)
	if err != nil {
		t.Fatal(err)
	}
	status := d.CRD().Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"]
	for name, typ := range map[string]string{"backups": "integer", "lastBackup": "string", "size": "integer"} {
		if got := status.Properties[name].Type; got != typ {
			t.Errorf("status.%s: type %q, want %q", name, got, typ)
		}
	}
	if status.XPreserveUnknownFields == nil || !*status.XPreserveUnknownFields {
		t.Error("the status is not open to the fields no schema declares")
	}
	// Only the column over an untyped status field is warned of.
	if len(d.Warnings) != 1 || d.Warnings[0].Line != 23 || !strings.Contains(d.Warnings[0].Error(),
		`printerColumns[3].jsonPath: .status.note has no type: a handler that writes it as another type than string leaves the column blank, with no error; type it in statusSchema: {properties: {note: {type: string}}}`) {
		t.Errorf("warnings %v, want one of the Note column", d.Warnings)
	}

	_, err = compileFile(t, "app.yaml", version(`      statusSchema:
        required: [backups]
        properties:
          backups: {type: integer}
          size: {type: string}
          conditions: {type: array}
          detail: {type: object, properties: {at: {}}}
      printerColumns:
      - {name: Backups, jsonPath: .status.backups, type: boolean}
      - {name: Replicas, jsonPath: .spec.replicas, type: boolean}
      - {name: Typo, jsonPath: .spec.imgae, type: string}
      - {name: Name, jsonPath: .name, type: string}
`)+`  status:
    size: "${self.spec.replicas}"
`)
	want := []string{
		`app.yaml:16: spec.resource.versions[0].statusSchema.required: status fields cannot be required`,
		`app.yaml:19: spec.resource.versions[0].statusSchema.properties.size.type: "string", but spec.status.size computes a integer: declare type integer, or leave the field out (spec.status types it)`,
		`app.yaml:20: spec.resource.versions[0].statusSchema.properties.conditions: "conditions" is written and typed by opkit; choose another name`,
		`app.yaml:21: spec.resource.versions[0].statusSchema.properties.detail.properties.at.type: Required value: must not be empty for specified object fields: every field needs a type`,
		`app.yaml:23: spec.resource.versions[0].printerColumns[0].type: boolean, but .status.backups is a integer: the column would stay blank; make it type integer`,
		`app.yaml:24: spec.resource.versions[0].printerColumns[1].type: boolean, but .spec.replicas is a integer: the column would stay blank; make it type integer`,
		`app.yaml:25: spec.resource.versions[0].printerColumns[2].jsonPath: .spec.imgae: the schema has no field spec.imgae, so the column is always blank`,
		`app.yaml:26: spec.resource.versions[0].printerColumns[3].jsonPath: ".name": a column shows a field of .spec or .status`,
	}
	if err == nil {
		t.Fatal("compiled")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("errors lack %q:\n%v", w, err)
		}
	}
}

func TestAServiceAccountForExecIsChecked(t *testing.T) {
	_, err := compileFile(t, "app.yaml", base+`  handlers:
  - name: read
    on: [create]
    exec: {command: [echo], serviceAccount: {name: Bad_Name}}
`)
	if want := `app.yaml:18: spec.handlers[0].exec.serviceAccount.name: "Bad_Name" is not a ServiceAccount name`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want %q", err, want)
	}
	cluster := strings.Replace(base, "    kind: App\n", "    kind: App\n    scope: Cluster\n", 1)
	_, err = compileFile(t, "app.yaml", cluster+`  handlers:
  - name: read
    on: [create]
    exec: {command: [echo], serviceAccount: {name: reader}}
`)
	if want := `spec.handlers[0].exec.serviceAccount.namespace: required: the resource is cluster-scoped`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want %q", err, want)
	}
}

func TestAnExecModeIsRunOrServe(t *testing.T) {
	for _, c := range []struct{ exec, want string }{
		{`{command: [echo], mode: Serve, processes: 2}`, ""},
		{`{command: [echo], mode: Run}`, ""},
		{`{command: [echo], mode: serve}`, `spec.handlers[0].exec.mode: "serve" is not Run or Serve`},
		{`{command: [echo], processes: 2}`, `spec.handlers[0].exec.processes: set with mode: Serve only`},
		{`{command: [echo], mode: Serve, processes: 65}`, `spec.handlers[0].exec.processes: 65 is not between 1 and 64`},
		{`{command: [echo], mode: Serve, serviceAccount: {name: reader}}`, `spec.handlers[0].exec.serviceAccount: not with mode: Serve: its token is requested for each run`},
	} {
		_, err := compileFile(t, "app.yaml", base+`  handlers:
  - name: read
    on: [create]
    exec: `+c.exec+`
`)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("exec %s: %v", c.exec, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("exec %s: error %v, want %q", c.exec, err, c.want)
		}
	}
}

func TestAnExecImageIsAnImageReferenceNamingItsHandler(t *testing.T) {
	for _, image := range []string{"Python:3.12", "python:3.12 ", "python:", "python@sha256:nothex"} {
		_, err := compileFile(t, "app.yaml", base+`  handlers:
  - name: notify
    on: [create]
    exec: {command: [./notify.py], image: "`+image+`"}
`)
		want := fmt.Sprintf(`app.yaml:18: spec.handlers[0].exec.image: handler notify: %q is not an image reference like python:3.12-slim`, image)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("image %q: error %v, want %q", image, err, want)
		}
	}
	d, err := compileFile(t, "app.yaml", base+`  handlers:
  - name: notify
    on: [create]
    exec: {command: [./hooks/notify.py], image: "python:3.12-slim", workingDir: data}
`)
	if err != nil {
		t.Fatal(err)
	}
	h := d.Handlers[0]
	if h.RunnerExec == nil || h.RunnerExec.Image != "python:3.12-slim" || h.RunnerExec.Command[0] != "./hooks/notify.py" || h.RunnerExec.WorkingDir != "data" {
		t.Errorf("RunnerExec %+v: want the action as written, its paths relative", h.RunnerExec)
	}
	if !filepath.IsAbs(h.Exec.Command[0]) {
		t.Errorf("Exec.Command[0] %q: want it resolved from the file's directory, for an engine without runners", h.Exec.Command[0])
	}
}

// TestRetryPolicyNextDecidesEveryRetry: a permanent failure and the last
// attempt give up; any other failure comes back after its delay.
func TestRetryPolicyNextDecidesEveryRetry(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 3, Initial: time.Second, Max: time.Minute, Factor: 2}
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		attempt   int
		permanent bool
		gaveUp    bool
		after     time.Duration
	}{
		{1, false, false, time.Second},
		{2, false, false, 2 * time.Second},
		{3, false, true, 0},
		{4, false, true, 0},
		{1, true, true, 0},
	} {
		at, gaveUp := p.Next(c.attempt, c.permanent, now)
		if gaveUp != c.gaveUp || (!gaveUp && at.Sub(now) != c.after) || (gaveUp && !at.IsZero()) {
			t.Errorf("attempt %d (permanent %v) of %d: retry at %v, gave up %v; want gave up %v, after %s", c.attempt, c.permanent, p.MaxAttempts, at, gaveUp, c.gaveUp, c.after)
		}
	}
}

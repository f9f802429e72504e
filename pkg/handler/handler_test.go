package handler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/pkg/handler"
)

type spec struct {
	Name     string `json:"name"`
	Language string `json:"language,omitempty"`
}

type status struct {
	Greeting string `json:"greeting,omitempty"`
}

type (
	greeting = handler.Object[spec, status]
	runCtx   = handler.Context[greeting, spec]
	result   = handler.Result[status]
	table    = handler.Handlers[greeting, spec, status]
)

// says is a Func that answers with a status naming what it is.
func says(what string) handler.Func[greeting, spec, status] {
	return func(context.Context, *runCtx) (*result, error) {
		return &result{Status: &status{Greeting: what}}, nil
	}
}

func fails(err error) handler.Func[greeting, spec, status] {
	return func(context.Context, *runCtx) (*result, error) { return nil, err }
}

func world(trigger handler.Trigger) *runCtx {
	return &runCtx{
		Operator: "greetings", Handler: "greet", Trigger: trigger, RunID: "01jd5v3q8m2k4x7zab",
		IdempotencyKey: "0b6a3f2e/1/greet", Attempt: 1,
		Object: &greeting{APIVersion: "demo.example.com/v1", Kind: "Greeting", Metadata: handler.ObjectMeta{Name: "world", Namespace: "default"}, Spec: spec{Name: "World"}},
	}
}

// answer is the JSON a result is written as: compact, <, > and &
// as they are.
func answer(t *testing.T, v any) string {
	t.Helper()
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func TestCallRunsTheFunctionOfTheContextsTrigger(t *testing.T) {
	h := table{handler.OnCreate: says("created"), handler.OnUpdate: says("updated")}
	for trigger, want := range map[handler.Trigger]string{handler.OnCreate: "created", handler.OnUpdate: "updated"} {
		res := h.Call(t.Context(), world(trigger))
		if res.Error != nil || res.Status == nil || res.Status.Greeting != want {
			t.Errorf("%s: got %s, want the status of %q", trigger, answer(t, res), want)
		}
	}
}

func TestATriggerWithoutAFunctionRunsTheDefault(t *testing.T) {
	for _, def := range []handler.Trigger{handler.OnAny, ""} {
		h := table{handler.OnCreate: says("created"), def: says("default")}
		if got := h.Call(t.Context(), world(handler.OnResume)); got.Status == nil || got.Status.Greeting != "default" {
			t.Errorf("default under %q: resume got %s, want the default's", def, answer(t, got))
		}
		if got := h.Call(t.Context(), world(handler.OnCreate)); got.Status == nil || got.Status.Greeting != "created" {
			t.Errorf("default under %q: create got %s, want create's own", def, answer(t, got))
		}
	}
}

func TestATriggerWithNoFunctionAndNoDefaultFailsPermanentlyNamingWhatIsHandled(t *testing.T) {
	h := table{handler.OnDelete: says("deleted"), handler.OnCreate: says("created")}
	got := h.Call(t.Context(), world(handler.OnResume))
	want := `{"error":{"message":"this program has no function for trigger \"resume\" and no default: it handles create, delete","permanent":true}}`
	if answer(t, got) != want {
		t.Errorf("got  %s\nwant %s", answer(t, got), want)
	}
}

func TestATableWithAKeyThatIsNoTriggerFailsEveryRunNamingIt(t *testing.T) {
	for _, c := range []struct {
		name string
		h    table
		want string
	}{
		{"a misspelling", table{handler.OnCreate: says("created"), "updte": says("updated")},
			`the program's handler.Handlers has a function for "updte", which is not a trigger: the triggers are create, update, delete, resume, schedule, when, requeue, event, rerun, manual, enter, exit`},
		{"an admission trigger", table{handler.OnValidate: says("valid")},
			`the program's handler.Handlers has a function for "validate", a trigger of a handler.Admission table`},
		{"two defaults", table{handler.OnAny: says("any"), "": says("empty")},
			`the program's handler.Handlers has two defaults, under "*" and "": keep one`},
	} {
		got := c.h.Call(t.Context(), world(handler.OnCreate))
		if got.Error == nil || !got.Error.Permanent || got.Error.Message != c.want {
			t.Errorf("%s: got %s, want the permanent error %q", c.name, answer(t, got), c.want)
		}
	}
}

func TestErrorsBecomeErrorResultsAndExitStatusesByKind(t *testing.T) {
	down := errors.New("the greeting service is down")
	for _, c := range []struct {
		name string
		f    handler.Func[greeting, spec, status]
		want string
		exit int
	}{
		{"permanent", fails(handler.Permanent(errors.New("spec.language xx is not one of en, fr, de"))),
			`{"error":{"message":"spec.language xx is not one of en, fr, de","permanent":true}}`, 0},
		{"temporary", fails(handler.Temporary(down)),
			`{"error":{"message":"the greeting service is down"}}`, 75},
		{"a wrapped permanent keeps the whole message", fails(fmt.Errorf("greeting world: %w", handler.Permanent(down))),
			`{"error":{"message":"greeting world: the greeting service is down","permanent":true}}`, 0},
		{"the outer kind wins", fails(handler.Temporary(fmt.Errorf("retrying: %w", handler.Permanent(down)))),
			`{"error":{"message":"retrying: the greeting service is down"}}`, 75},
		{"any other error is a bug, retried", fails(fmt.Errorf("greeting world: %w", down)),
			`{"error":{"message":"greeting world: the greeting service is down"}}`, 1},
		{"a panic", func(context.Context, *runCtx) (*result, error) { panic("boom") },
			`{"error":{"message":"panic: boom"}}`, 1},
		{"Temporary(nil) is no error", fails(handler.Temporary(nil)), `{}`, 0},
		{"Permanent(nil) is no error", fails(handler.Permanent(nil)), `{}`, 0},
		{"a result's own temporary error", func(context.Context, *runCtx) (*result, error) {
			return &result{Error: &handler.ResultError{Message: "not yet"}}, nil
		}, `{"error":{"message":"not yet"}}`, 75},
		{"a result's own permanent error", func(context.Context, *runCtx) (*result, error) {
			return &result{Error: &handler.ResultError{Message: "never", Permanent: true}}, nil
		}, `{"error":{"message":"never","permanent":true}}`, 0},
		{"an error with a result drops the result", func(context.Context, *runCtx) (*result, error) {
			return &result{Status: &status{Greeting: "half"}}, handler.Temporary(down)
		}, `{"error":{"message":"the greeting service is down"}}`, 75},
	} {
		h := table{handler.OnCreate: c.f}
		if got := answer(t, h.Call(handler.WithLog(t.Context(), io.Discard), world(handler.OnCreate))); got != c.want {
			t.Errorf("%s: Call got %s, want %s", c.name, got, c.want)
		}
		var out, log bytes.Buffer
		exit := handler.Once(t.Context(), h, strings.NewReader(answer(t, world(handler.OnCreate))), &out, &log)
		if got := strings.TrimSuffix(out.String(), "\n"); got != c.want || exit != c.exit {
			t.Errorf("%s: Once wrote %s and returned %d, want %s and %d", c.name, got, exit, c.want, c.exit)
		}
	}
}

func TestABugIsLoggedAndAPanicWithItsStack(t *testing.T) {
	var log bytes.Buffer
	ctx := handler.WithLog(t.Context(), &log)
	table{handler.OnCreate: fails(errors.New("nil map"))}.Call(ctx, world(handler.OnCreate))
	if log.String() != "error: nil map\n" {
		t.Errorf("a bug logged %q, want %q", log.String(), "error: nil map\n")
	}
	log.Reset()
	table{handler.OnCreate: func(context.Context, *runCtx) (*result, error) { panic("boom") }}.Call(ctx, world(handler.OnCreate))
	if !strings.HasPrefix(log.String(), "panic: boom\n\ngoroutine ") || !strings.Contains(log.String(), "handler_test.TestABugIsLoggedAndAPanicWithItsStack") {
		t.Errorf("a panic logged %q, want its message and its stack", log.String())
	}
}

func TestAnErrorAfterTheRunWasStoppedIsTemporary(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	h := table{handler.OnCreate: func(ctx context.Context, _ *runCtx) (*result, error) {
		cancel() // as SIGTERM does
		<-ctx.Done()
		return nil, fmt.Errorf("calling the greeting service: %w", ctx.Err())
	}}
	var out bytes.Buffer
	exit := handler.Once(ctx, h, strings.NewReader(answer(t, world(handler.OnCreate))), &out, io.Discard)
	if want := `{"error":{"message":"calling the greeting service: context canceled"}}` + "\n"; out.String() != want || exit != 75 {
		t.Errorf("got %q and exit %d, want %q and 75", out.String(), exit, want)
	}
}

func TestTheRunsContextIsDoneWhenItReturns(t *testing.T) {
	var runs []context.Context
	h := table{handler.OnAny: func(ctx context.Context, _ *runCtx) (*result, error) {
		runs = append(runs, ctx)
		return nil, nil
	}}
	h.Call(t.Context(), world(handler.OnCreate))
	if len(runs) != 1 || runs[0].Err() == nil {
		t.Errorf("the run's ctx is not done after the run")
	}
}

func TestResultsAreWrittenWithTheSchemasNamesAndNoEmptyField(t *testing.T) {
	allowed := true
	for _, c := range []struct {
		name string
		res  any
		want string
	}{
		{"a nil result", (*result)(nil), `{}`},
		{"a zero result", &result{}, `{}`},
		{"a zero status is still a status", &result{Status: &status{}}, `{"status":{}}`},
		{"requeueAfter", &result{RequeueAfter: handler.Duration(90 * time.Second)}, `{"requeueAfter":"1m30s"}`},
		{"every field", &result{
			Status:       &status{Greeting: "Bonjour, World!"},
			Events:       []handler.Event{handler.Normal("Greeted", "Bonjour, World!"), handler.Warning("Slow", "took 3s")},
			RequeueAfter: handler.Duration(10 * time.Minute),
			Skipped:      true,
			Refuse:       "mallory is not a deployer",
			Error:        &handler.ResultError{Message: "quota exceeded"},
		}, `{"status":{"greeting":"Bonjour, World!"},"events":[{"type":"Normal","reason":"Greeted","message":"Bonjour, World!"},{"type":"Warning","reason":"Slow","message":"took 3s"}],"requeueAfter":"10m0s","skipped":true,"refuse":"mallory is not a deployer","error":{"message":"quota exceeded"}}`},
		{"an event without a type", &result{Events: []handler.Event{{Reason: "Done", Message: "<ok> & done"}}}, `{"events":[{"reason":"Done","message":"<ok> & done"}]}`},
		{"allow", handler.Allow(), `{"allowed":true}`},
		{"deny", handler.Deny("spec.content must not contain <script>"), `{"allowed":false,"message":"spec.content must not contain <script>"}`},
		{"an empty patch is a patch", &handler.AdmissionResult{Patch: map[string]any{}}, `{"patch":{}}`},
		{"every admission field", &handler.AdmissionResult{Allowed: &allowed, Message: "ok", Patch: map[string]any{"spec": map[string]any{"replicas": 1, "old": nil}}, Warnings: []string{"replicas defaulted"}},
			`{"allowed":true,"message":"ok","patch":{"spec":{"old":null,"replicas":1}},"warnings":["replicas defaulted"]}`},
	} {
		var out bytes.Buffer
		h := handler.Admission[greeting]{handler.OnAny: func(context.Context, *handler.AdmissionContext[greeting]) (*handler.AdmissionResult, error) {
			if r, ok := c.res.(*handler.AdmissionResult); ok {
				return r, nil
			}
			return nil, nil
		}}
		var p handler.Program = h
		if r, ok := c.res.(*result); ok {
			p = table{handler.OnAny: func(context.Context, *runCtx) (*result, error) { return r, nil }}
		}
		handler.Once(t.Context(), p, strings.NewReader(`{"trigger": "create"}`), &out, io.Discard)
		if got := strings.TrimSuffix(out.String(), "\n"); got != c.want {
			t.Errorf("%s: got  %s\nwant %s", c.name, got, c.want)
		}
	}
}

func TestANegativeRequeueFailsTheRunSayingSo(t *testing.T) {
	h := table{handler.OnAny: func(context.Context, *runCtx) (*result, error) {
		return &result{RequeueAfter: handler.Duration(-time.Second)}, nil
	}}
	got := h.Call(handler.WithLog(t.Context(), io.Discard), world(handler.OnCreate))
	if got.Error == nil || got.Error.Permanent || !strings.Contains(got.Error.Message, "writing the result") || !strings.Contains(got.Error.Message, "the duration -1s is negative") {
		t.Errorf("got %s, want an error writing the result", answer(t, got))
	}
}

func TestDurationReadsWhatItWrites(t *testing.T) {
	for _, d := range []time.Duration{time.Millisecond, 90 * time.Second, 25 * time.Hour} {
		var back handler.Duration
		if err := json.Unmarshal([]byte(answer(t, handler.Duration(d))), &back); err != nil || time.Duration(back) != d {
			t.Errorf("%v came back as %v (%v)", d, back, err)
		}
	}
	var d handler.Duration
	if err := json.Unmarshal([]byte(`30`), &d); err == nil {
		t.Errorf("a number was read as a duration")
	}
}

// The binding contexts of docs/handlers.md, as the engine writes them.
const (
	updateContext   = `{"operator":"greetings","handler":"greet","trigger":"update","runId":"01jd5v3q8m2k4x7zab","idempotencyKey":"0b6a3f2e-1c1d-4b8e-9a39-2f1d7f4b1a11/2/greet","attempt":1,"object":{"apiVersion":"demo.example.com/v1","kind":"Greeting","metadata":{"name":"world","namespace":"default","generation":2,"creationTimestamp":"2026-11-25T08:00:00Z"},"spec":{"name":"World","language":"fr"},"status":{}},"old":{"name":"World","language":"en"},"diff":[{"op":"change","path":"spec.language","old":"en","new":"fr"}],"children":{}}`
	scheduleContext = `{"operator":"calendar","handler":"tick","trigger":"manual","runId":"01m8848hy03tjp41q1","idempotencyKey":"calendar/schedule/tick/manual/r1","attempt":1,"object":null,"old":null,"diff":null,"children":null,"schedule":{"slot":"2026-11-25T01:14:00Z","manual":{"request":"r1","by":"jane","reason":"the registry is back"}}}`
	eventContext    = `{"operator":"deploys","handler":"acknowledge","trigger":"event","runId":"01m88epcsy5gfmkft9","idempotencyKey":"deploys/event/github/72d3/acknowledge","attempt":1,"object":null,"old":null,"diff":null,"children":null,"event":{"id":"01m88epcsy5gfmkft9","source":"github","deliveryId":"72d3","event":"issue_comment","receivedAt":"2026-11-25T04:21:55.01Z","headers":{"x-github-event":"issue_comment"},"payload":{"action":"created"}}}`
)

func TestAContextReadsTheBindingContextsTheEngineWrites(t *testing.T) {
	var got *runCtx
	h := table{handler.OnAny: func(_ context.Context, c *runCtx) (*result, error) {
		got = c
		return nil, nil
	}}
	handler.Once(t.Context(), h, strings.NewReader(updateContext), io.Discard, io.Discard)
	o := got.Object
	if got.Trigger != handler.OnUpdate || got.Attempt != 1 || got.RunID != "01jd5v3q8m2k4x7zab" || o.Metadata.Generation != 2 ||
		!o.Metadata.CreationTimestamp.Equal(time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)) || o.Spec.Language != "fr" || o.Status == nil ||
		got.Old.Language != "en" || len(got.Diff) != 1 || got.Diff[0].Path != "spec.language" || string(got.Diff[0].Old) != `"en"` || string(got.Diff[0].New) != `"fr"` {
		t.Errorf("the update context was read as %+v", got)
	}

	handler.Once(t.Context(), h, strings.NewReader(scheduleContext), io.Discard, io.Discard)
	if got.Object != nil || got.Old != nil || got.Schedule == nil || !got.Schedule.Slot.Equal(time.Date(2026, 11, 25, 1, 14, 0, 0, time.UTC)) ||
		got.Schedule.Manual == nil || got.Schedule.Manual.By != "jane" || got.Schedule.Manual.Reason != "the registry is back" {
		t.Errorf("the schedule context was read as %+v (schedule %+v)", got, got.Schedule)
	}

	handler.Once(t.Context(), h, strings.NewReader(eventContext), io.Discard, io.Discard)
	if e := got.Event; e == nil || e.Source != "github" || e.DeliveryID != "72d3" || e.Event != "issue_comment" || e.Headers["x-github-event"] != "issue_comment" || string(e.Payload) != `{"action":"created"}` {
		t.Errorf("the event context was read as %+v", got.Event)
	}
}

func TestAContextThatCannotBeReadFailsPermanentlyNamingWhatIsWrong(t *testing.T) {
	h := table{handler.OnAny: says("ran")}
	for _, c := range []struct{ name, input, want string }{
		{"not JSON", "hello, world", `reading the binding context: it is not JSON: invalid character 'h' looking for beginning of value (at byte 1 of "hello, world")`},
		{"empty", "  \n", "reading the binding context: the input is empty, where a JSON object was expected"},
		{"cut short", `{"trigger": "create", "object": {`, `reading the binding context: it is not JSON: unexpected end of JSON input (at byte 33 of "{\"trigger\": \"create\", \"object\": {")`},
		{"an object that does not fit the type", `{"trigger": "create", "object": {"spec": {"name": 42}}}`,
			`reading the binding context: field "object.spec.name" is a JSON number, which the program's type string cannot hold (at byte 52)`},
	} {
		var out bytes.Buffer
		exit := handler.Once(t.Context(), h, strings.NewReader(c.input), &out, io.Discard)
		want := answer(t, map[string]any{"error": map[string]any{"message": c.want, "permanent": true}}) + "\n"
		if out.String() != want || exit != 0 {
			t.Errorf("%s: got %s and exit %d, want %s and 0", c.name, out.String(), exit, want)
		}
	}
}

func TestLogfWritesLinesToTheRunsLog(t *testing.T) {
	var log bytes.Buffer
	h := table{handler.OnAny: func(ctx context.Context, c *runCtx) (*result, error) {
		handler.Logf(ctx, "%s (attempt %d): hello", c.Trigger, c.Attempt)
		handler.Logf(ctx, "ends with its own newline\n")
		return nil, nil
	}}
	h.Call(handler.WithLog(t.Context(), &log), world(handler.OnCreate))
	if want := "create (attempt 1): hello\nends with its own newline\n"; log.String() != want {
		t.Errorf("logged %q, want %q", log.String(), want)
	}
}

func TestKubeObjectKeepsEveryField(t *testing.T) {
	in := `{"apiVersion":"v1","data":{"key":"value"},"kind":"ConfigMap","metadata":{"name":"settings","namespace":"default","labels":{"team":"a"}}}`
	var o handler.KubeObject
	if err := json.Unmarshal([]byte(in), &o); err != nil {
		t.Fatal(err)
	}
	if o.Kind != "ConfigMap" || o.Metadata.Labels["team"] != "a" || string(o.Fields["data"]) != `{"key":"value"}` || len(o.Fields) != 1 {
		t.Errorf("read %+v", o)
	}
	if out := answer(t, o); out != in {
		t.Errorf("wrote %s, want %s", out, in)
	}
}

func TestAdmissionCallAnswersByTrigger(t *testing.T) {
	h := handler.Admission[greeting]{
		handler.OnValidate: func(_ context.Context, c *handler.AdmissionContext[greeting]) (*handler.AdmissionResult, error) {
			if strings.Contains(c.Object.Spec.Name, "<") {
				return handler.Deny("spec.name must not contain <"), nil
			}
			return handler.Allow(), nil
		},
		handler.OnMutate: func(_ context.Context, c *handler.AdmissionContext[greeting]) (*handler.AdmissionResult, error) {
			return &handler.AdmissionResult{Patch: map[string]any{"metadata": map[string]any{"annotations": map[string]any{"created-by": c.UserInfo.Username}}}}, nil
		},
	}
	c := &handler.AdmissionContext[greeting]{Trigger: handler.OnValidate, Operation: "CREATE", Object: &greeting{Spec: spec{Name: "<b>"}}, UserInfo: handler.UserInfo{Username: "alice"}}
	if got := answer(t, h.Call(t.Context(), c)); got != `{"allowed":false,"message":"spec.name must not contain <"}` {
		t.Errorf("validate answered %s", got)
	}
	c.Trigger = handler.OnMutate
	if got := answer(t, h.Call(t.Context(), c)); got != `{"patch":{"metadata":{"annotations":{"created-by":"alice"}}}}` {
		t.Errorf("mutate answered %s", got)
	}
	h[handler.OnValidate] = func(context.Context, *handler.AdmissionContext[greeting]) (*handler.AdmissionResult, error) {
		return &handler.AdmissionResult{Message: "looks fine"}, nil
	}
	c.Trigger = handler.OnValidate
	if got := answer(t, h.Call(t.Context(), c)); got != `{"error":{"message":"a validate handler answers whether the request is allowed: return handler.Allow() or handler.Deny(message), not a result without Allowed","permanent":true}}` {
		t.Errorf("validate without allowed answered %s", got)
	}
	if got := answer(t, h.Call(t.Context(), &handler.AdmissionContext[greeting]{Trigger: handler.OnCreate})); !strings.Contains(got, `has no function for trigger \"create\" and no default: it handles validate, mutate`) {
		t.Errorf("create answered %s", got)
	}
}

// transcript records what Serve writes to its log and out, in order.
type transcript struct{ lines []string }

type stream struct {
	t    *transcript
	name string
}

func (s stream) Write(p []byte) (int, error) {
	for l := range strings.Lines(string(p)) {
		s.t.lines = append(s.t.lines, s.name+" "+strings.TrimSuffix(l, "\n"))
	}
	return len(p), nil
}

func TestServeAnswersEachLineInOrderAfterItsLog(t *testing.T) {
	h := table{
		handler.OnCreate: func(ctx context.Context, c *runCtx) (*result, error) {
			handler.Logf(ctx, "hello, %s", c.Object.Spec.Name)
			return &result{Status: &status{Greeting: "Hello, " + c.Object.Spec.Name + "!"}}, nil
		},
		handler.OnUpdate: fails(handler.Temporary(errors.New("the greeting service is down"))),
		handler.OnDelete: fails(errors.New("a bug")),
	}
	var in strings.Builder
	for _, trigger := range []handler.Trigger{handler.OnCreate, handler.OnUpdate, handler.OnDelete, handler.OnResume} {
		in.WriteString(answer(t, world(trigger)) + "\n")
	}
	in.WriteString("not JSON\n")
	in.WriteString(answer(t, world(handler.OnCreate))) // the last line has no newline
	var tr transcript
	if err := handler.Serve(t.Context(), h, strings.NewReader(in.String()), stream{&tr, "out"}, stream{&tr, "log"}); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	want := []string{
		`log hello, World`,
		`out {"status":{"greeting":"Hello, World!"}}`,
		`out {"error":{"message":"the greeting service is down"}}`,
		`log error: a bug`,
		`out {"error":{"message":"a bug"}}`,
		`out {"error":{"message":"this program has no function for trigger \"resume\" and no default: it handles create, update, delete","permanent":true}}`,
		`out {"error":{"message":"reading the binding context: it is not JSON: invalid character 'o' in literal null (expecting 'u') (at byte 2 of \"not JSON\")","permanent":true}}`,
		`log hello, World`,
		`out {"status":{"greeting":"Hello, World!"}}`,
	}
	if got := strings.Join(tr.lines, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("Serve wrote\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
}

func TestServeReturnsWhenItsContextEndsAndStartsNoRun(t *testing.T) {
	ctx, cancel := context.WithCancelCause(t.Context())
	in, w := io.Pipe()
	t.Cleanup(func() { _ = w.Close() })
	done := make(chan error)
	go func() { done <- handler.Serve(ctx, table{handler.OnAny: says("ran")}, in, io.Discard, io.Discard) }()
	stopped := errors.New("terminated")
	cancel(stopped)
	select {
	case err := <-done:
		if !errors.Is(err, stopped) {
			t.Errorf("Serve returned %v, want the context's cause", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return once its context ended while it waited for a line")
	}
}

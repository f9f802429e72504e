package executor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/executor/executortest"
	"github.com/opkit-dev/opkit/internal/fuzzcheck"
	"github.com/opkit-dev/opkit/internal/jsondepth"
)

// The fuzz targets of the doors through which a handler's output reaches
// the engine: a process's stdout (ParseResult, and a failed process's
// stdout and stderr), a Serve process's answer lines, an http handler's
// response, and a runner agent's reply. Whatever comes through one, the
// engine does not panic, answers within a bound, refuses with a message
// that says what is wrong, and what it accepts re-encodes to the same
// result (the archive, and a runner's reply, carry it so).

// bound is how long decoding one input may take.
const bound = 2 * time.Second

// resultSeeds are results as handlers print them: docs/handlers.md's,
// examples/'s (greet.py's json.dump, audit.sh's printf, goodbye's
// Encoder), admission answers, and outputs refused with a message.
var resultSeeds = []string{
	// Accepted.
	``,
	"\n",
	`null`,
	`{}`,
	"{}\n",
	`{"status": {"greeting": "Bonjour, World!"}, "events": [{"type": "Normal", "reason": "Greeted", "message": "Bonjour, World!"}], "requeueAfter": "10m", "error": {"message": "quota exceeded", "permanent": false}}`,
	`{"status": {"greeting": "Hello, World!"}, "events": [{"reason": "Greeted", "message": "Hello, World!"}]}`,
	"{\"events\": [{\"reason\": \"Audited\", \"message\": \"create\"}]}\n",
	"{\"error\":{\"message\":\"reading the binding context: EOF\",\"permanent\":true}}\n",
	`{"error": {"message": "quota exceeded", "permanent": true}}`,
	`{"skipped": true}`,
	`{"skipped": true, "requeueAfter": "2m30s"}`,
	`{"status": {"phase": "done", "backups": 3, "ready": true, "last": null, "items": [1, "a", {"b": []}]}, "requeueAfter": "1h"}`,
	`{"events": [{"type": "Warning", "reason": "Slow", "message": "took long"}]}`,
	`{"refuse": "mallory is not a member of packit/deployers"}`,
	`{"allowed": true}`,
	`{"allowed": false, "message": "no <script>", "warnings": ["w"]}`,
	`{"allowed": true, "patch": {"spec": {"replicas": 1}, "metadata": {"labels": {"a": null}}}}`,
	`{"patch": {}}`,
	`{"status": {}}`,
	`{"status": {"a": 1}, "status": {"b": 2}}`,
	"{\"status\": {\"name\": \"caf\xc3\xa9 \xff\xfe\"}, \"events\": [{\"reason\": \"\xed\xa0\x80\", \"message\": \"\xc3\"}]}",
	`{"status": {"n": 123456789012345678901234567890, "f": 1e308, "e": -1e-400}}`,
	`{"status": {"x": "\u0000\ud800 <&>"}}`,
	// Refused.
	`hello world`,
	`{"stauts": {}}`,
	`{"status": "done"}`,
	`{"events": [{"reason": 5}]}`,
	`{"events": [{"reason": "a", "foo": 1}]}`,
	`{"error": {"message": "x", "retry": true}}`,
	`{"requeueAfter": 30}`,
	`{"requeueAfter": "soon"}`,
	`{"requeueAfter": "-5s"}`,
	`{"status": {"conditions": []}}`,
	`{"status": {"opkit": {}, "observedGeneration": 2}}`,
	`{"events": [{"type": "Loud", "reason": "X", "message": "m"}]}`,
	`{"events": [{"reason": "", "message": "m"}]}`,
	`{"error": {"permanent": true}}`,
	`{"allowed": "yes"}`,
	`{"status": {"n": 1e400}}`,
	`{"status": {"n": 9007199254740993, "m": [-9223372036854775808, 9223372036854775808, 1e3, -0, 1.5e-400]}, "patch": {"x": 12345678901234567890}}`,
	`{"status": {"a": 9007199254740993.0, "b": 9.007199254740993e15, "c": 10000e-1, "d": 1.5, "e": 9007199254740993.5, "f": 1` + strings.Repeat("0", 300) + `e-300}}`,
	`{"status": {"a": 1}}{"status": {"b": 2}}`,
	`{"status": {"a": 1}} ]`,
	`{} }`,
	`{"a\"b": 1}`,
	`[]`,
	`"done"`,
	"\xef\xbb\xbf{}",
	`{"status": {"x": ` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}}`,
	strings.Repeat("[", 101) + strings.Repeat("]", 101),
	`{"status": {"x": "` + strings.Repeat("[", 200) + `"}}`,
	// At the limit, and one past it: the result, its status, 98 more.
	`{"status": {"x": ` + strings.Repeat("[", 98) + strings.Repeat("]", 98) + `}}`,
	`{"status": {"x": ` + strings.Repeat("[", 99) + strings.Repeat("]", 99) + `}}`,
	// Many problems, and long values: a refusal says the first ones.
	`{"events": [` + strings.Repeat(`{"reason": "", "type": "`+strings.Repeat("Loud", 50)+`"}, `, 2000) + `{"reason": "Done"}], "requeueAfter": "` + strings.Repeat("9", 5000) + `"}`,
	`{"` + strings.Repeat("stauts", 1000) + `": {}}`,
}

// FuzzParseResult: a process's stdout, as the engine reads it after an
// exit status 0 (and the archive's record of a result, and a runner's
// reply).
func FuzzParseResult(f *testing.F) {
	for _, s := range resultSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		var res *Result
		var err error
		fuzzcheck.Within(t, "ParseResult", bound, func() { res, err = ParseResult(out) })
		checkOutcome(t, out, res, err)
	})
}

// FuzzExecExit: what a process that exited with a status other than 0
// wrote, on stdout (a result whose error explains the failure, or not)
// and stderr (whose last line does).
func FuzzExecExit(f *testing.F) {
	f.Add(uint8(1), []byte(`{"error": {"message": "quota exceeded", "permanent": true}}`), []byte("calling the API\n"))
	f.Add(uint8(1), []byte("{\"error\":{\"message\":\"reading the binding context: EOF\",\"permanent\":true}}\n"), []byte{})
	f.Add(uint8(75), []byte{}, []byte("the registry is down\n"))
	f.Add(uint8(75), []byte(`{"error": {"message": "try later"}}`), []byte{})
	f.Add(uint8(2), []byte("not a result"), []byte("Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: 'name'\n"))
	f.Add(uint8(1), []byte{}, []byte("\x1b[31mred\x1b[0m error\r\n\n  \n"))
	f.Add(uint8(127), []byte{}, []byte(strings.Repeat("é", 150)+"\n"))
	f.Add(uint8(1), []byte{}, []byte("\xff\xfe\xfd"))
	f.Fuzz(func(t *testing.T, code uint8, stdout, stderr []byte) {
		c := max(int(code), 1) // 0 is a success, read by ParseResult
		tail := &tailWriter{}
		var fail *Failure
		fuzzcheck.Within(t, "exitedFailure", bound, func() {
			half := len(stderr) / 2
			_, _ = tail.Write(stderr[:half])
			_, _ = tail.Write(stderr[half:])
			fail = exitedFailure(c, stdout, tail)
		})
		if fail == nil {
			t.Fatal("a process that failed has no failure")
		}
		msg := fail.Message
		executortest.CheckWords(t, msg)
		if !strings.HasPrefix(msg, fmt.Sprintf("exit status %d", c)) {
			t.Fatalf("the failure %q does not start with the exit status %d", msg, c)
		}
		res, err := ParseResult(stdout)
		switch {
		case err == nil && res.Error != nil:
			if fail.Permanent != res.Error.Permanent || !strings.Contains(msg, res.Error.Message) {
				t.Fatalf("failure %+v, want the result's error %+v", fail, res.Error)
			}
		case fail.Permanent:
			t.Fatalf("failure %+v is permanent without a result that says so", fail)
		case c == ExitTemporary:
			if !strings.Contains(msg, "temporary") {
				t.Fatalf("exit status 75 gives %q, not a temporary failure", msg)
			}
		default:
			if line := tail.lastLine(); len(line) > 200 || !strings.HasSuffix(msg, line) {
				t.Fatalf("failure %q, want the last line of stderr %q (at most 200 bytes)", msg, line)
			}
		}
	})
}

// FuzzServeAnswers: what a Serve process writes on its stdout, split into
// answers, a line each, each read as a result.
func FuzzServeAnswers(f *testing.F) {
	f.Add([]byte("{\"status\": {\"touched\": true}}\n"))
	f.Add([]byte("{\"events\": [{\"reason\": \"Touched\", \"message\": \"web\"}]}\n{\"status\": {\"touched\": true}}\n"))
	f.Add([]byte("\n\r\n{}\n"))
	f.Add([]byte("{\"error\": {\"message\": \"the registry is down\", \"permanent\": false}}\n"))
	f.Add([]byte("{\"skipped\": true, \"requeueAfter\": \"30s\"}\r\n"))
	f.Add([]byte("touching web\n"))
	f.Add([]byte("{\"status\":\n{\"touched\": true}}\n"))
	f.Add([]byte("{\"status\": {\"touched\": true}}"))
	f.Add([]byte("{\"status\": {\"a\": 1}}{\"status\": {\"b\": 2}}\n"))
	f.Add([]byte("{\"status\": {\"s\": \"" + strings.Repeat("x", 100) + "\"}}\n"))
	f.Add([]byte(strings.Repeat("[", 120) + "\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		// As the engine reads a process (a line may be up to a result's
		// limit), and with a small limit and buffer, so that lines too
		// long are fuzzed too.
		for _, c := range []struct{ size, limit int }{{64 << 10, MaxResultBytes}, {16, 40}} {
			br := bufio.NewReaderSize(bytes.NewReader(stream), c.size)
			rest := stream
			for {
				var text []byte
				var err error
				fuzzcheck.Within(t, "readAnswer", bound, func() { text, err = readAnswer(br, c.limit) })
				want, wantErr := nextLine(rest, c.limit)
				if !errors.Is(err, wantErr) || (!errors.Is(wantErr, errLineTooLong) && !bytes.Equal(text, want)) {
					t.Fatalf("limit %d: line %q, %v; want %q, %v", c.limit, text, err, want, wantErr)
				}
				if err != nil {
					if errors.Is(err, errLineTooLong) && (len(text) <= c.limit+1 || !bytes.HasPrefix(rest, text)) {
						t.Fatalf("limit %d: %d bytes %q are not too long, or not what came", c.limit, len(text), text)
					}
					break
				}
				rest = rest[len(text):]
				var res *Result
				fuzzcheck.Within(t, "parseAnswer", bound, func() { res, err = secrets(nil).parseAnswer(text) })
				// An answer is read as a process's whole stdout is.
				plain, plainErr := ParseResult(bytes.TrimSuffix(text, []byte("\n")))
				if (err == nil) != (plainErr == nil) || (err == nil && !reflect.DeepEqual(res, plain)) {
					t.Fatalf("answer %q: %+v, %v; but as a process's stdout: %+v, %v", text, res, err, plain, plainErr)
				}
				if err != nil {
					checkRefusal(t, text, err)
					if !strings.Contains(err.Error(), "in exec.mode Serve a result is one line of JSON") {
						t.Fatalf("the refusal %q does not say what an answer is", err)
					}
					continue
				}
				checkAccepted(t, text, res)
			}
		}
	})
}

// nextLine is what a line of stream is: up to its newline, or the end;
// errLineTooLong when it is longer than limit and its newline.
func nextLine(stream []byte, limit int) ([]byte, error) {
	line, err := stream, io.EOF
	if i := bytes.IndexByte(stream, '\n'); i >= 0 {
		line, err = stream[:i+1], nil
	}
	if len(line) > limit+1 {
		return nil, errLineTooLong
	}
	return line, err
}

// FuzzHTTPResponse: an http handler's response, its status and body.
func FuzzHTTPResponse(f *testing.F) {
	for _, s := range resultSeeds {
		f.Add(uint16(200), []byte(s))
	}
	f.Add(uint16(201), []byte(`{"status": {"notified": "yes"}}`))
	f.Add(uint16(204), []byte{})
	f.Add(uint16(503), []byte("busy\n"))
	f.Add(uint16(404), []byte("404 page not found\n"))
	f.Add(uint16(429), []byte(`{"error": "rate limited"}`))
	f.Add(uint16(302), []byte("<a href=\"/login\">Found</a>"))
	f.Add(uint16(200), []byte("<html>"))
	const url = "https://hooks.example.com/opkit"
	f.Fuzz(func(t *testing.T, status uint16, body []byte) {
		code := 100 + int(status)%500
		h := &HTTP{
			Action: v1alpha1.HTTPAction{URL: url},
			Transport: roundTrip(func(*http.Request) (*http.Response, error) {
				return &http.Response{
					StatusCode: code, Status: fmt.Sprintf("%d %s", code, http.StatusText(code)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
					Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)),
				}, nil
			}),
		}
		var log bytes.Buffer
		var res *Result
		var err error
		fuzzcheck.Within(t, "HTTP.Run", bound, func() {
			res, err = h.Run(context.Background(), Request{RunID: "01jd5v3q8m2k4x7zab", Key: "uid/2/notify", Input: []byte(`{}`), Timeout: time.Minute, Log: &log})
		})
		if !strings.Contains(log.String(), fmt.Sprintf("POST %s: %d", url, code)) {
			t.Fatalf("the log %q does not say what the POST got", log.String())
		}
		if code >= 200 && code < 300 {
			want, wantErr := ParseResult(body)
			if (err == nil) != (wantErr == nil) || !reflect.DeepEqual(res, want) || (err != nil && err.Error() != wantErr.Error()) {
				t.Fatalf("status %d: %+v, %v; want the body read as a result: %+v, %v", code, res, err, want, wantErr)
			}
			checkOutcome(t, body, res, err)
			return
		}
		fail, ok := errors.AsType[*Failure](err)
		if res != nil || !ok {
			t.Fatalf("status %d: %+v, %v; want a failure", code, res, err)
		}
		executortest.CheckWords(t, fail.Message)
		temporary := code == 408 || code == 429 || code >= 500
		if fail.Permanent == temporary || !strings.HasPrefix(fail.Message, fmt.Sprintf("POST %s: %d", url, code)) {
			t.Fatalf("status %d: failure %+v; want one naming the POST and its status, permanent %v", code, fail, !temporary)
		}
	})
}

type roundTrip func(*http.Request) (*http.Response, error)

func (r roundTrip) RoundTrip(req *http.Request) (*http.Response, error) { return r(req) }

// FuzzRunnerReply: what a runner's agent reports of a run (the outcome of
// its stream), as the engine decodes it (json, as package runners reads
// a frame) and takes it (InImage), with a Secret's value to hide.
func FuzzRunnerReply(f *testing.F) {
	for _, s := range []string{
		`{"result": {"status": {"greeting": "Hello, World!"}, "events": [{"type": "Normal", "reason": "Greeted", "message": "Hello, World!"}]}}`,
		`{"result": {"skipped": true, "requeueAfter": "5m"}}`,
		`{"result": null}`,
		`{}`,
		`{"failure": {"message": "exit status 1: KeyError: 'name'"}}`,
		`{"failure": {"message": "exit status 1: quota exceeded", "permanent": true}}`,
		`{"failure": {"message": "timed out after 30s; its process group was killed"}}`,
		`{"failure": {"message": ""}}`,
		`{"failure": {}, "result": {"status": {}}}`,
		`{"result": "done"}`,
		`{"result": {"status": {"conditions": []}}}`,
		`{"result": {"status": {"token-s3cr3t": "s3cr3t"}, "refuse": "no s3cr3t"}}`,
		`{"failure": {"message": "output begins \"s3\\\"cr3t\""}}`,
		`{"result": {"patch": {"metadata": {"annotations": {"s3cr3t": "a"}}}, "allowed": true}}`,
		`{"result": {"error": {"message": "refused s3cr3t", "permanent": true}}}`,
		`not a reply`,
	} {
		f.Add([]byte(s), "s3cr3t")
	}
	f.Add([]byte(`{"failure": {"message": "output begins \"a\\\"b\""}}`), `a"b`)
	f.Fuzz(func(t *testing.T, reply []byte, secret string) {
		// A Secret's value is text (a token, a password): bytes that are
		// not UTF-8 would match inside a character, and *** would break
		// it.
		secret = strings.ToValidUTF8(secret, "")
		var out Reply
		decodeErr := json.Unmarshal(reply, &out)
		r := &InImage{
			Action: v1alpha1.ExecAction{Command: []string{"./hooks/notify.py"}, Image: "python:3.12-slim", Env: []v1alpha1.EnvVar{
				{Name: "CHANNEL", Value: "ops"},
				{Name: "TOKEN", ValueFrom: &v1alpha1.EnvVarSource{SecretKeyRef: &v1alpha1.SecretKeyRef{Name: "api", Key: "token"}}},
			}},
			Operator: "demo",
			Runners: dispatcher(func(context.Context, Dispatch) (*Reply, error) {
				if decodeErr != nil {
					return nil, &Interrupted{Message: fmt.Sprintf("runner r-1 sent a frame that is not JSON (%v); the run is cancelled, to run again with its key", decodeErr)}
				}
				return &out, nil
			}),
			Secret: func(context.Context, string, string, string) (string, error) { return secret, nil },
		}
		var log bytes.Buffer
		var res *Result
		var err error
		fuzzcheck.Within(t, "InImage.Run", bound, func() {
			res, err = r.Run(context.Background(), Request{RunID: "01jd5v3q8m2k4x7zab", Handler: "notify", Trigger: "create", Key: "uid/1/notify", Attempt: 1,
				Object: &ObjectRef{Namespace: "shop", Name: "cart"}, Input: []byte(`{}`), Timeout: time.Minute, Log: &log})
		})
		executortest.CheckHidden(t, secret, res, err, log.String())
		if i, ok := errors.AsType[*Interrupted](err); ok {
			if decodeErr == nil || res != nil {
				t.Fatalf("interrupted (%v) by a reply that was read: %q", i, reply)
			}
			executortest.CheckWords(t, i.Message)
			return
		}
		if decodeErr != nil {
			t.Fatalf("a reply that is not JSON gave %+v, %v", res, err)
		}
		if out.Failure != nil {
			fail, ok := errors.AsType[*Failure](err)
			if !ok || res != nil || fail.Permanent != out.Failure.Permanent {
				t.Fatalf("the reported failure %+v gave %+v, %v", out.Failure, res, err)
			}
			executortest.CheckWords(t, fail.Message)
			return
		}
		want, wantErr := ParseResult(out.Result)
		if secret != "" && (bytes.Contains(reply, []byte(secret)) || executortest.HiddenIn(secret, want, wantErr, "") != "") {
			// Redacted, which CheckHidden checked: what is left is still
			// a result, or a refusal.
			if err != nil {
				executortest.CheckWords(t, err.Error())
			} else if _, again := ParseResult(mustMarshal(t, res)); again != nil {
				t.Fatalf("the redacted result %+v is not a result: %v", res, again)
			}
			return
		}
		if (err == nil) != (wantErr == nil) || !reflect.DeepEqual(res, want) || (err != nil && err.Error() != wantErr.Error()) {
			t.Fatalf("reply %q: %+v, %v; want its result read as a process's stdout: %+v, %v", reply, res, err, want, wantErr)
		}
		checkOutcome(t, out.Result, res, err)
	})
}

type dispatcher func(context.Context, Dispatch) (*Reply, error)

func (d dispatcher) Dispatch(ctx context.Context, w Dispatch) (*Reply, error) { return d(ctx, w) }

// checkOutcome checks what ParseResult made of out.
func checkOutcome(t *testing.T, out []byte, res *Result, err error) {
	t.Helper()
	switch {
	case err != nil && res != nil:
		t.Fatalf("%q gave a result %+v and an error %v", out, res, err)
	case err != nil:
		checkRefusal(t, out, err)
	case res == nil:
		t.Fatalf("%q gave neither a result nor an error", out)
	default:
		checkAccepted(t, out, res)
	}
}

// refusalForms are how a refusal of output begins.
var refusalForms = []string{"invalid result: ", "output is not a JSON result: ", "output has "}

// namesField is a refusal about one field: it names it.
var namesField = regexp.MustCompile(`^invalid result: (unknown )?field "[^"]*"`)

// checkRefusal: out is refused with a retried *Failure whose message says
// what is wrong with it.
func checkRefusal(t *testing.T, out []byte, err error) {
	t.Helper()
	f, ok := errors.AsType[*Failure](err)
	if !ok {
		t.Fatalf("%q is refused with %T %v, not a *Failure", out, err, err)
	}
	executortest.CheckWords(t, f.Message)
	if f.Permanent {
		t.Fatalf("%q is refused for good (%q): output that is not a result is retried", out, f.Message)
	}
	if !slices.ContainsFunc(refusalForms, func(p string) bool { return strings.HasPrefix(f.Message, p) }) {
		t.Fatalf("the refusal of %q, %q, does not say the output is not a result", out, f.Message)
	}
	if strings.HasPrefix(f.Message, "invalid result: field") || strings.HasPrefix(f.Message, "invalid result: unknown") {
		if !namesField.MatchString(f.Message) {
			t.Fatalf("the refusal %q is about a field and does not name it", f.Message)
		}
	}
	if jsondepth.Check(out, jsondepth.Max) != nil && !strings.Contains(f.Message, "nested deeper than 100 objects and arrays") {
		t.Fatalf("%q nests deeper than %d, and its refusal %q does not say so", out, jsondepth.Max, f.Message)
	}
}

// checkAccepted: out, accepted as res, is a result as docs/handlers.md
// says, within the depth limit, and res re-encoded is read back as res.
func checkAccepted(t *testing.T, out []byte, res *Result) {
	t.Helper()
	if len(bytes.TrimSpace(out)) == 0 {
		if !reflect.DeepEqual(res, &Result{}) {
			t.Fatalf("empty output gave %+v, not an empty result", res)
		}
		return
	}
	if !json.Valid(out) {
		t.Fatalf("%q is accepted as %+v, and is not one JSON value", out, res)
	}
	if err := jsondepth.Check(out, jsondepth.Max); err != nil {
		t.Fatalf("%q is accepted and %v", out, err)
	}
	// The result is one level: what it holds nests one less.
	if !jsondepth.Value(res.Status, jsondepth.Max-1) || !jsondepth.Value(res.Patch, jsondepth.Max-1) {
		t.Fatalf("%q is accepted with a status or patch deeper than %d", out, jsondepth.Max)
	}
	for _, k := range reservedStatus {
		if _, ok := res.Status[k]; ok {
			t.Fatalf("%q is accepted with status.%s, which is opkit's", out, k)
		}
	}
	for i, e := range res.Events {
		if (e.Type != "Normal" && e.Type != "Warning") || e.Reason == "" {
			t.Fatalf("%q is accepted with events[%d] %+v", out, i, e)
		}
	}
	if res.RequeueAfter != "" && res.RequeueDuration() <= 0 {
		t.Fatalf("%q is accepted with requeueAfter %q", out, res.RequeueAfter)
	}
	if res.Error != nil && res.Error.Message == "" {
		t.Fatalf("%q is accepted with an error without a message", out)
	}
	b := mustMarshal(t, res)
	if bytes.IndexByte(b, '\n') >= 0 {
		t.Fatalf("%+v is not encoded on one line: %q", res, b)
	}
	again, err := ParseResult(b)
	if err != nil {
		t.Fatalf("%q is accepted, and re-encoded as %s refused: %v", out, b, err)
	}
	if !reflect.DeepEqual(executortest.Normalized(res), executortest.Normalized(again)) {
		t.Fatalf("%q is accepted as %+v, and re-encoded as %s read as %+v", out, res, b, again)
	}
	if res.Admission() != again.Admission() || (res.Patch == nil) != (again.Patch == nil) {
		t.Fatalf("%q is accepted as an admission answer %v (patch %v), and re-encoded as %s as one %v (patch %v)", out, res.Admission(), res.Patch, b, again.Admission(), again.Patch)
	}
	if b2 := mustMarshal(t, again); !bytes.Equal(b, b2) {
		t.Fatalf("re-encoding is not stable: %s, then %s", b, b2)
	}
}

func mustMarshal(t *testing.T, res *Result) []byte {
	t.Helper()
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatalf("encoding %+v: %v", res, err)
	}
	return b
}

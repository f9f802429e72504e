package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/executor"
	"github.com/opkit-dev/opkit/internal/executor/executortest"
	"github.com/opkit-dev/opkit/internal/fuzzcheck"
	"github.com/opkit-dev/opkit/internal/runners"
)

// The fuzz targets of what a runner's agent streams back to the engine:
// frames, a JSON line each (runners.Frame: some of the command's stderr,
// a heartbeat, the outcome last), read as the engine's runner API reads
// them and taken by the executor of a handler with an image
// (executor.InImage), which redacts the log and the result and checks
// the result again. A runner Pod runs any image, and its handler writes
// what it likes: the engine does not panic, answers within a bound,
// refuses with words, never shows a Secret's value, and takes what the
// agent sends as the agent sent it.

const bound = 2 * time.Second

// engineReads reads a run's stream as the engine's runner API does
// (runners.Server's stream handler): a frame per line, its log to log,
// until the outcome; a stream that ends first, or a line that is not a
// frame, interrupts the run.
func engineReads(stream []byte, log io.Writer) (*executor.Reply, error) {
	lines := bufio.NewReaderSize(bytes.NewReader(stream), 64<<10)
	for {
		line, err := lines.ReadBytes('\n')
		if err != nil {
			return nil, &executor.Interrupted{Message: "runner fuzz-0 was lost mid-run (the stream ended without an outcome); the run is cancelled, to run again with its key"}
		}
		var f runners.Frame
		if err := json.Unmarshal(line, &f); err != nil {
			return nil, &executor.Interrupted{Message: fmt.Sprintf("runner fuzz-0 sent a frame that is not JSON (%v); the run is cancelled, to run again with its key", err)}
		}
		if len(f.Log) > 0 {
			_, _ = log.Write(f.Log)
		}
		if f.Outcome != nil {
			return f.Outcome, nil
		}
	}
}

type dispatcher func(context.Context, executor.Dispatch) (*executor.Reply, error)

func (d dispatcher) Dispatch(ctx context.Context, w executor.Dispatch) (*executor.Reply, error) {
	return d(ctx, w)
}

// takeStream runs a handler with an image whose runner streams stream,
// with secret the value of its env TOKEN: what the engine makes of it.
func takeStream(t *testing.T, stream []byte, secret string) (res *executor.Result, log string, err error) {
	t.Helper()
	r := &executor.InImage{
		Action: v1alpha1.ExecAction{Command: []string{"./hooks/notify.py"}, Image: "python:3.12-slim", Env: []v1alpha1.EnvVar{
			{Name: "CHANNEL", Value: "ops"},
			{Name: "TOKEN", ValueFrom: &v1alpha1.EnvVarSource{SecretKeyRef: &v1alpha1.SecretKeyRef{Name: "api", Key: "token"}}},
		}},
		Operator: "demo",
		Runners: dispatcher(func(_ context.Context, d executor.Dispatch) (*executor.Reply, error) {
			if d.Claimed != nil {
				d.Claimed("fuzz-0")
			}
			return engineReads(stream, d.Log)
		}),
		Secret: func(context.Context, string, string, string) (string, error) { return secret, nil },
	}
	var buf bytes.Buffer
	fuzzcheck.Within(t, "InImage.Run", bound, func() {
		res, err = r.Run(context.Background(), executor.Request{RunID: "01jd5v3q8m2k4x7zab", Handler: "notify", Trigger: "update", Key: "uid/2/notify", Attempt: 1,
			Object: &executor.ObjectRef{Namespace: "shop", Name: "cart"}, Input: []byte(`{"trigger":"update"}`), Timeout: time.Minute, Log: &buf, OnRunner: func(string) {}})
	})
	return res, buf.String(), err
}

// frames is a stream as the agent writes it: the command's stderr in
// pieces, a heartbeat between them, then the outcome of (res, runErr).
func frames(t testing.TB, stderr []string, res *executor.Result, runErr error) []byte {
	t.Helper()
	var buf bytes.Buffer
	fw := &frameWriter{w: &buf}
	for i, s := range stderr {
		if i > 0 {
			if err := fw.send(runners.Frame{Beat: true}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := fw.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := fw.send(runners.Frame{Outcome: executor.NewReply(res, runErr)}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func parsed(t testing.TB, out string) *executor.Result {
	t.Helper()
	res, err := executor.ParseResult([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// FuzzRunnerStream: any stream a runner sends.
func FuzzRunnerStream(f *testing.F) {
	const secret = "s3cr3t-t0ken"
	for _, s := range [][]byte{
		frames(f, []string{"update (attempt 1): Hello, World!\n", "  change spec.name\n"},
			parsed(f, `{"status": {"greeting": "Hello, World!"}, "events": [{"reason": "Greeted", "message": "Hello, World!"}]}`), nil),
		frames(f, []string{"token=" + secret + "\n", secret[:5], secret[5:] + "\n"}, nil,
			&executor.Failure{Message: "exit status 1: refused " + secret}),
		frames(f, nil, nil, &executor.Failure{Message: "exit status 1: quota exceeded", Permanent: true}),
		frames(f, []string{"calling\n"}, nil, &executor.Failure{Message: "timed out after 30s; its process group was killed"}),
		frames(f, nil, parsed(f, `{"skipped": true, "requeueAfter": "5m"}`), nil),
		frames(f, nil, parsed(f, `{"refuse": "mallory is not a member of packit/deployers"}`), nil),
		frames(f, nil, parsed(f, `{"allowed": false, "message": "no", "warnings": ["w"], "patch": {"metadata": {"labels": {"a": null}}}}`), nil),
		frames(f, nil, parsed(f, `{"status": {"token-`+secret+`": "`+secret+`"}, "error": {"message": "refused `+secret+`"}}`), nil),
		frames(f, nil, parsed(f, ``), nil),
		[]byte("{\"beat\":true}\n{\"outcome\":{\"result\":{\"status\":\"done\"}}}\n"),
		[]byte("{\"outcome\":{\"result\":{\"status\":{\"x\":" + strings.Repeat("[", 100) + strings.Repeat("]", 100) + "}}}}\n"),
		[]byte("{\"outcome\":{\"result\":{\"status\":{\"conditions\":[]}}}}\n"),
		[]byte("{\"outcome\":{\"failure\":{\"message\":\"\"}}}\n"),
		[]byte("{\"outcome\":{}}\n"),
		[]byte("{\"outcome\":null}\n{\"log\":\"aGk=\"}\n"),
		[]byte("{\"log\":\"not base64\"}\n"),
		[]byte("{\"log\":\"aGk=\"}\n{\"outcome\":{\"result\":{}}}"),
		[]byte("{\"log\":\"aGk=\",\"log\":\"aG8=\",\"outcome\":{\"result\":{\"skipped\":true}}}\n"),
		[]byte("{\"outcome\":{\"result\":{\"status\":{\"n\":1e400}}}}\n"),
		[]byte("{\"outcome\":{\"result\":\"\xff\"}}\n"),
		[]byte(""),
		[]byte("\n"),
		[]byte("hello\n"),
	} {
		f.Add(s, secret)
	}
	f.Fuzz(func(t *testing.T, stream []byte, secret string) {
		// A Secret's value is text (a token, a password).
		secret = strings.ToValidUTF8(secret, "")
		res, log, err := takeStream(t, stream, secret)
		executortest.CheckHidden(t, secret, res, err, log)
		var sent bytes.Buffer
		out, lost := engineReads(stream, &sent)
		// Where the runner sent the value, it is redacted: what is
		// taken is not what was sent, and is checked otherwise.
		shown := secret != "" && (bytes.Contains(stream, []byte(secret)) || strings.Contains(sent.String(), secret))
		if lost == nil && !shown {
			if out.Failure != nil {
				shown = strings.Contains(out.Failure.Message, secret)
			} else {
				want, wantErr := executor.ParseResult(out.Result)
				shown = executortest.HiddenIn(secret, want, wantErr, "") != ""
			}
		}
		if !shown && log != sent.String() {
			t.Fatalf("the run's log is %q; the runner sent %q", log, sent.String())
		}
		switch {
		case lost != nil:
			if i, ok := errors.AsType[*executor.Interrupted](err); !ok || res != nil {
				t.Fatalf("a stream without an outcome gave %+v, %v; want the run interrupted", res, err)
			} else {
				executortest.CheckWords(t, i.Message)
			}
		case out.Failure != nil:
			fail, ok := errors.AsType[*executor.Failure](err)
			if !ok || res != nil || fail.Permanent != out.Failure.Permanent {
				t.Fatalf("the failure %+v the runner reported gave %+v, %v", out.Failure, res, err)
			}
			executortest.CheckWords(t, fail.Message)
			if !shown && strings.TrimSpace(out.Failure.Message) != "" && fail.Message != out.Failure.Message {
				t.Fatalf("the failure %q the runner reported is recorded as %q", out.Failure.Message, fail.Message)
			}
		default:
			// The engine reads the result as it reads a process's stdout.
			want, wantErr := executor.ParseResult(out.Result)
			if err != nil {
				executortest.CheckWords(t, err.Error())
				if _, ok := errors.AsType[*executor.Failure](err); !ok || res != nil || wantErr == nil {
					t.Fatalf("the result %q is refused with %T %v; it reads as %+v, %v", out.Result, err, err, want, wantErr)
				}
				if !shown && err.Error() != wantErr.Error() {
					t.Fatalf("the result %q is refused with %q, not %q", out.Result, err, wantErr)
				}
				return
			}
			if wantErr != nil || res == nil {
				t.Fatalf("the result %q is taken as %+v; it reads as %v", out.Result, res, wantErr)
			}
			if !shown && !reflect.DeepEqual(res, want) {
				t.Fatalf("the result %q is taken as %+v, not %+v", out.Result, res, want)
			}
			// What is taken, written again, is read back the same (the
			// archive keeps it so).
			b, _ := json.Marshal(res)
			again, err := executor.ParseResult(b)
			if err != nil || !reflect.DeepEqual(executortest.Normalized(res), executortest.Normalized(again)) || res.Admission() != again.Admission() {
				t.Fatalf("the result taken, %+v, written as %s, reads back as %+v, %v", res, b, again, err)
			}
		}
	})
}

// FuzzAgentFrames: what the agent sends of a run (its command's stderr,
// heartbeats, the result or failure Exec gave) is what the engine takes:
// the same log, the same result, the same failure.
func FuzzAgentFrames(f *testing.F) {
	f.Add([]byte("update (attempt 1): Hello, World!\n  change spec.name\n"), []byte(`{"status": {"greeting": "Hello, World!"}, "events": [{"reason": "Greeted", "message": "Hello, World!"}]}`), "", false)
	f.Add([]byte("Traceback (most recent call last):\nKeyError: 'name'\n"), []byte{}, "exit status 1: KeyError: 'name'", false)
	f.Add([]byte{}, []byte(`{"error": {"message": "quota exceeded", "permanent": true}}`), "", false)
	f.Add([]byte("\x1b[31m\xff\xfe\x00\r\n"), []byte(`{"skipped": true, "requeueAfter": "1m"}`), "exit status 1: quota exceeded", true)
	f.Add([]byte("{\"log\":\"x\"}\n"), []byte(`{"refuse": "no"}`), "", false)
	f.Add([]byte{}, []byte(`{"patch": {}}`), "", false)
	f.Add([]byte{}, []byte("hello"), "", false)
	f.Add([]byte{}, []byte{}, "\xff", false)
	f.Fuzz(func(t *testing.T, stderr, stdout []byte, failure string, permanent bool) {
		// What Exec gave: stdout read as a result, or a failure.
		res, runErr := executor.ParseResult(stdout)
		if failure != "" {
			res, runErr = nil, &executor.Failure{Message: failure, Permanent: permanent}
		}
		half := len(stderr) / 2
		var stream []byte
		fuzzcheck.Within(t, "the agent's frames", bound, func() { stream = frames(t, []string{string(stderr[:half]), string(stderr[half:])}, res, runErr) })
		if !utf8.Valid(stream) {
			t.Fatalf("the frames %q are not UTF-8", stream)
		}
		for line := range bytes.Lines(stream) {
			if !bytes.HasSuffix(line, []byte("\n")) || bytes.Count(line, []byte("\n")) != 1 || !json.Valid(line) {
				t.Fatalf("the frame %q is not one line of JSON", line)
			}
		}
		got, log, gotErr := takeStream(t, stream, "")
		if log != string(stderr) {
			t.Fatalf("the command wrote %q; the run's log is %q", stderr, log)
		}
		if runErr != nil {
			sent := executor.AsFailure(runErr)
			want := string([]rune(sent.Message))
			if strings.TrimSpace(want) == "" {
				want = "the runner reported a failure without a message" // words, not none
			}
			fail, ok := errors.AsType[*executor.Failure](gotErr)
			if !ok || got != nil || fail.Permanent != sent.Permanent || fail.Message != want {
				t.Fatalf("the agent reported %+v; the engine took %+v, %v", sent, got, gotErr)
			}
			return
		}
		if gotErr != nil || got == nil || !reflect.DeepEqual(executortest.Normalized(got), executortest.Normalized(res)) || got.Admission() != res.Admission() {
			t.Fatalf("the agent reported %+v; the engine took %+v, %v", res, got, gotErr)
		}
	})
}

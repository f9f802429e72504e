package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/opkit-dev/opkit/internal/conformance"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/stack"
	"github.com/opkit-dev/opkit/internal/tracing"
)

// The environment variables that make this test binary something else
// than the tests: the handler of every rendered definition (the
// recorder), and the engine process the checker starts, stops and kills.
const (
	recorderEnv = "OPKIT_CONFORMANCE_RECORDER"
	// engineEnv names the case's directory: operator.yaml in, runs.db and
	// ready.<pid> out.
	engineEnv    = "OPKIT_CONFORMANCE_ENGINE"
	namespaceEnv = "OPKIT_CONFORMANCE_NAMESPACE"
	// runWaitEnv is the engine's Options.RunWait (a duration): the
	// checker's engine starts alternate between a reconcile that waits
	// for every run it starts, whose end its own status write records,
	// and one that never waits, whose runs' ends the next reconcile
	// records.
	runWaitEnv = "OPKIT_CONFORMANCE_RUN_WAIT"
	// clusterEnv, set to 1, makes the engine process run the case's
	// Operator from the cluster (Def.Cluster): those labelled caseLabel
	// with the case's namespace, as opkit run --selector does.
	clusterEnv = "OPKIT_CONFORMANCE_CLUSTER"
	// caseLabel labels a case's Operator in the cluster.
	caseLabel = "conformance.opkit.dev/case"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(recorderEnv) == "1":
		clustertest.Exit(runRecorder(os.Args[1:]))
	case os.Getenv(engineEnv) != "":
		clustertest.Exit(runEngine(os.Getenv(engineEnv), os.Getenv(namespaceEnv)))
	case os.Getenv(churnHandlerEnv) == "1":
		clustertest.Exit(runChurnHandler())
	case os.Getenv(churnEngineEnv) != "":
		clustertest.Exit(runChurnEngine(os.Getenv(churnEngineEnv), os.Getenv(namespaceEnv)))
	}
	clustertest.Main(m)
}

// record is one execution of a handler, as the recorder appends it to
// records.jsonl in its directory.
type record struct {
	Handler    string            `json:"handler"`
	Trigger    string            `json:"trigger"`
	Key        string            `json:"key"`
	RunID      string            `json:"runId"`
	Attempt    int               `json:"attempt"`
	Engine     int               `json:"engine"` // the engine's pid: which start ran it
	UID        string            `json:"uid"`
	Generation int64             `json:"generation"`
	Count      int               `json:"count"`
	Spec       map[string]string `json:"spec"`
	State      string            `json:"state,omitempty"`
	StateSeq   int64             `json:"stateSeq,omitempty"`
	Blocked    bool              `json:"blocked,omitempty"`
	// DeliveryID and Payload are an event run's delivery's.
	DeliveryID string            `json:"deliveryId,omitempty"`
	Payload    map[string]string `json:"payload,omitempty"`
	// Traceparent is the binding context's, Env the TRACEPARENT of the
	// recorder's environment (a process per run only).
	Traceparent string `json:"traceparent,omitempty"`
	Env         string `json:"env,omitempty"`
}

// bindingContext is what the recorder reads of its input.
type bindingContext struct {
	Handler        string `json:"handler"`
	Trigger        string `json:"trigger"`
	RunID          string `json:"runId"`
	IdempotencyKey string `json:"idempotencyKey"`
	Attempt        int    `json:"attempt"`
	Traceparent    string `json:"traceparent"`
	Object         struct {
		Metadata struct {
			UID        string `json:"uid"`
			Generation int64  `json:"generation"`
		} `json:"metadata"`
		Spec   map[string]string `json:"spec"`
		Data   map[string]string `json:"data"`
		Status struct {
			Count int `json:"count"`
			State struct {
				Name string `json:"name"`
				Seq  int64  `json:"seq"`
			} `json:"state"`
		} `json:"status"`
	} `json:"object"`
	Event struct {
		DeliveryID string            `json:"deliveryId"`
		Payload    map[string]string `json:"payload"`
	} `json:"event"`
}

// runRecorder is the handler of every rendered definition: argv is the case's
// directory, the handler's behaviour and the operator's kind. It appends
// what its binding context holds to records.jsonl, then answers as the
// behaviour says: the first Fail executions of a key fail, the next ones
// succeed, writing status.count + 1 if asked. When the checker left a
// file "block" in the directory, the first execution to take it (of the
// handler it names, if it names one) records itself as blocked and waits
// to be killed with its engine.
func runRecorder(args []string) int {
	if len(args) != 3 {
		fmt.Fprintf(os.Stderr, "recorder: want DIR BEHAVIOUR KIND, got %q\n", args)
		return 2
	}
	dir := args[0]
	b, err := conformance.ParseBehaviour(args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "recorder:", err)
		return 2
	}
	dec := json.NewDecoder(os.Stdin)
	if os.Getenv("OPKIT_MODE") != "Serve" {
		return record1(dir, b, args[2], dec, false)
	}
	// exec.mode Serve: a binding context per line, until the end of the
	// input; a failure is an answer, not an exit.
	for dec.More() {
		if code := record1(dir, b, args[2], dec, true); code != 0 {
			return code
		}
	}
	return 0
}

// record1 records the next binding context of dec and answers it as b
// says; serve: a process for many runs, which answers every run with a
// line and exits only when it cannot go on.
func record1(dir string, b conformance.Behaviour, kind string, dec *json.Decoder, serve bool) int {
	var ctx bindingContext
	if err := dec.Decode(&ctx); err != nil {
		fmt.Fprintln(os.Stderr, "recorder: reading the binding context:", err)
		return 2
	}
	rec := record{
		Handler: ctx.Handler, Trigger: ctx.Trigger, Key: ctx.IdempotencyKey, RunID: ctx.RunID, Attempt: ctx.Attempt,
		Engine: os.Getppid(), UID: ctx.Object.Metadata.UID, Generation: ctx.Object.Metadata.Generation,
		Count: ctx.Object.Status.Count, Spec: ctx.Object.Spec,
		State: ctx.Object.Status.State.Name, StateSeq: ctx.Object.Status.State.Seq,
		DeliveryID: ctx.Event.DeliveryID, Payload: ctx.Event.Payload, Traceparent: ctx.Traceparent,
	}
	if !serve {
		rec.Env = os.Getenv("TRACEPARENT")
	}
	if kind == string(conformance.Watch) {
		rec.Spec = ctx.Object.Data
	}
	file := filepath.Join(dir, "records.jsonl")
	// The executions of this key so far (runs of one object are one at a
	// time: nothing else appends meanwhile).
	execs := 0
	for _, r := range readRecords(file) {
		if r.Key == rec.Key && r.Handler == rec.Handler && !r.Blocked {
			execs++
		}
	}
	// The block may name the handler whose run it holds.
	if only, err := os.ReadFile(filepath.Join(dir, "block")); err == nil && (len(only) == 0 || string(only) == ctx.Handler) &&
		os.Rename(filepath.Join(dir, "block"), filepath.Join(dir, "block.taken")) == nil {
		rec.Blocked = true
	}
	line, _ := json.Marshal(rec)
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "recorder:", err)
		return 2
	}
	_, err = f.Write(append(line, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "recorder:", err)
		return 2
	}
	fmt.Fprintf(os.Stderr, "%s %s key %s attempt %d: saw count %d, spec %v\n", ctx.Handler, ctx.Trigger, ctx.IdempotencyKey, ctx.Attempt, rec.Count, rec.Spec)
	if rec.Blocked {
		// Held until the engine is killed (the kernel kills this process
		// with it; should it not, it ends once it is reparented).
		fmt.Fprintln(os.Stderr, "held until the engine is killed")
		for engine := os.Getppid(); os.Getppid() == engine; {
			time.Sleep(100 * time.Millisecond)
		}
		return 1
	}
	if execs < b.Fail {
		fmt.Printf(`{"error": {"message": "failure %d of %d", "permanent": %t}}`+"\n", execs+1, b.Fail, b.Permanent)
		if serve {
			return 0
		}
		return 1
	}
	switch {
	case b.Write:
		fmt.Printf(`{"status": {"count": %d}}`+"\n", rec.Count+1)
	case serve:
		fmt.Println() // an empty result
	}
	return 0
}

// readRecords reads a records file; a missing one holds none.
func readRecords(file string) []record {
	data, _ := os.ReadFile(file)
	var out []record
	for line := range bytes.Lines(data) {
		var r record
		if json.Unmarshal(line, &r) == nil {
			out = append(out, r)
		}
	}
	return out
}

// runEngine is the engine process: it runs the definition in dir's
// operator.yaml in namespace, with the archive dir/runs.db, until SIGTERM,
// and writes dir/ready.<pid> once the definition is applied: the address
// of its hooks listener, for an operator with a source. It traces as
// opkit run does, as its OTEL_* environment says (tracing.Setup).
func runEngine(dir, namespace string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "engine:", err)
		return 1
	}
	cfg, defs, err := engineSetUp(dir)
	if err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	flush, tc, err := tracing.Setup(ctx, "conformance")
	if err != nil {
		return fail(err)
	}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" && !tc.On {
		return fail(errors.New("OTEL_EXPORTER_OTLP_ENDPOINT is set, and tracing is off"))
	}
	defer func() {
		// The last spans, once the engine stopped (as opkit run gives
		// them): a receiver gone does not hold the exit.
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := flush(fctx); err != nil {
			fmt.Fprintln(os.Stderr, "engine: tracing: the last spans were not exported:", err)
		}
	}()
	runWait, err := time.ParseDuration(os.Getenv(runWaitEnv))
	if err != nil {
		return fail(fmt.Errorf("%s: %w", runWaitEnv, err))
	}
	opts := engine.Options{Config: cfg, Namespace: namespace, RunWait: runWait}
	cluster := os.Getenv(clusterEnv) == "1"
	if cluster {
		opts.OperatorSelector = labels.SelectorFromSet(labels.Set{caseLabel: namespace})
	}
	stack.ListenOnLoopback(&opts, defs...)
	s, err := stack.Start(ctx, stack.Options{Engine: opts, Archive: filepath.Join(dir, "runs.db")})
	if err != nil {
		return fail(err)
	}
	if cluster {
		// The Operator the checker created, as opkit run --selector
		// runs it: ready once it runs.
		watched := make(chan error, 1)
		go func() { watched <- s.Engine.WatchOperators(ctx) }()
		for !s.Engine.Runs(defs[0].Operator.Name) {
			select {
			case err := <-watched:
				_ = s.Stop()
				if err == nil { // stopped before the operator ran
					return 0
				}
				return fail(fmt.Errorf("watching the cluster's Operators: %w", err))
			case <-time.After(20 * time.Millisecond):
			}
		}
	} else if err := s.Apply(ctx, defs...); err != nil {
		_ = s.Stop()
		return fail(err)
	}
	if err := writeReady(filepath.Join(dir, "ready."+strconv.Itoa(os.Getpid())), s.Engine.HooksAddr()); err != nil {
		return fail(err)
	}
	if err := s.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return fail(err)
	}
	return 0
}

// engineSetUp is what an engine process of the tests reads before it
// starts: its logger (to stderr, the engine.log in dir whose tail a
// failure shows), the kubeconfig of $KUBECONFIG, and dir's operator.yaml.
func engineSetUp(dir string) (*rest.Config, []*definition.Definition, error) {
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return nil, nil, err
	}
	defs, err := definition.CompileFiles(filepath.Join(dir, "operator.yaml"))
	return cfg, defs, err
}

// writeReady writes an engine process's ready file whole, then renames
// it: the test takes its being there for the engine's readiness and
// reads the hooks address from it, and could otherwise read it created
// and still empty.
func writeReady(file, addr string) error {
	if err := os.WriteFile(file+".tmp", []byte(addr), 0o644); err != nil {
		return err
	}
	return os.Rename(file+".tmp", file)
}

// engineLogTail is the end of the engine.log in dir.
func engineLogTail(dir string) string {
	data, _ := os.ReadFile(filepath.Join(dir, "engine.log"))
	return string(data[max(0, len(data)-4000):])
}

// engineFailure is what an engine process's log says of its failure: a
// data race or a panic; "" when it says nothing of the kind.
func engineFailure(log string) string {
	for _, mark := range []string{"WARNING: DATA RACE", "panic:", "fatal error:"} {
		if i := strings.Index(log, mark); i >= 0 {
			end := min(len(log), i+3000)
			return log[i:end]
		}
	}
	return ""
}

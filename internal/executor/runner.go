package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/tracing"
)

// InImage runs an exec handler that names an image (exec.image) in a warm
// runner Pod of that image, through opkit's agent: the engine hands the
// run to a Dispatcher (package runners), which queues it for the runners
// of its operator and image; the agent runs the command as Exec does
// (argv only, stdin the binding context, stdout the result, stderr the
// log as it comes, exit codes, a timeout that kills the process group),
// or in mode Serve as Serve does, its processes kept in the runner.
//
// What stays on the engine's side: Secret values are read here, at each
// run, and handed to the agent with the run, as is the kubeconfig of the
// handler's ServiceAccount (a token requested here); the log and the
// result are redacted here, whatever the agent did. The runner's own
// credentials never reach the handler.
type InImage struct {
	// Action is the handler's exec action as written: its relative paths
	// resolve from the operator's files in the runner.
	Action v1alpha1.ExecAction
	// Operator is the handler's operator: its runners take the run.
	Operator string
	// Runners queues runs for the runners. Required.
	Runners Dispatcher
	// Secret reads the values of Action.Env's valueFrom. Required when one
	// is set.
	Secret SecretValue
	// Credentials makes the kubeconfig of Action.ServiceAccount. Required
	// when it is set.
	Credentials Credentials
}

// Dispatcher hands a run to a runner of its operator and image and
// returns what the agent reported. Its error is an *Interrupted when the
// runner was lost mid-run.
type Dispatcher interface {
	Dispatch(ctx context.Context, d Dispatch) (*Reply, error)
}

// Dispatch is one run on its way to a runner.
type Dispatch struct {
	Operator, Image string
	Work            RunnerWork
	// Log receives the handler's stderr as the agent streams it.
	Log io.Writer
	// Claimed, when set, is called with the runner's name once a runner
	// claims the run, in Dispatch's own goroutine, before Dispatch
	// returns.
	Claimed func(runner string)
}

// RunnerWork is a run as a runner's agent gets it: everything it needs,
// values from Secrets and the kubeconfig included.
type RunnerWork struct {
	// ID names the hand-over (not the run: a run lost with its runner is
	// handed over again under a new ID).
	ID      string `json:"id"`
	RunID   string `json:"runID"`
	Handler string `json:"handler"`
	Trigger string `json:"trigger"`
	Key     string `json:"key"`
	Attempt int    `json:"attempt"`
	// Command and WorkingDir are as written; the agent resolves relative
	// paths from the operator's files.
	Command    []string `json:"command"`
	WorkingDir string   `json:"workingDir,omitempty"`
	// Env is the handler's environment, NAME=value.
	Env []string `json:"env,omitempty"`
	// Mode is the handler's exec.mode: Serve keeps processes in the
	// runner between runs, as the engine does locally; Run or empty, a
	// process per run. Processes is exec.processes (0: the default).
	Mode      v1alpha1.ExecMode `json:"mode,omitempty"`
	Processes int32             `json:"processes,omitempty"`
	// Kubeconfig is the run's kubeconfig for its ServiceAccount, if any.
	Kubeconfig []byte `json:"kubeconfig,omitempty"`
	Input      []byte `json:"input"`
	Timeout    int64  `json:"timeoutMillis"`
}

// Reply is what a runner sends back of a run it was handed: the
// handler's result, or a failure (its outcome is decided by the engine).
type Reply struct {
	// Result is the handler's result as the agent read it; the engine
	// checks it again (ParseResult): a handler can write what it likes
	// where the agent runs.
	Result  json.RawMessage `json:"result,omitempty"`
	Failure *WireFailure    `json:"failure,omitempty"`
}

// WireFailure is a Failure as the agent reports it.
type WireFailure struct {
	Message   string `json:"message"`
	Permanent bool   `json:"permanent,omitempty"`
}

// failure is the Failure the agent reported; one without a message
// (an agent that is not opkit's, or broken) says so, not nothing.
func (w *WireFailure) failure() *Failure {
	msg := w.Message
	if strings.TrimSpace(msg) == "" {
		msg = "the runner reported a failure without a message"
	}
	return &Failure{Message: msg, Permanent: w.Permanent}
}

// Interrupted is a run whose end is not known: its runner was lost
// mid-run (its connection dropped, or no heartbeat came in time). The
// engine records it Cancelled and runs it again with its key, counting
// no attempt; nothing the lost runner reports afterwards is taken.
type Interrupted struct{ Message string }

func (i *Interrupted) Error() string { return i.Message }

// NewReply is what the agent reports of a run that Exec ran.
func NewReply(res *Result, err error) *Reply {
	if err != nil {
		f := AsFailure(err)
		return &Reply{Failure: &WireFailure{Message: f.Message, Permanent: f.Permanent}}
	}
	b, err := json.Marshal(res)
	if err != nil {
		return &Reply{Failure: &WireFailure{Message: fmt.Sprintf("encoding the result: %v", err)}}
	}
	return &Reply{Result: b}
}

// Run hands the run to a runner and waits for its end.
func (r *InImage) Run(ctx context.Context, req Request) (*Result, error) {
	local := &Exec{Action: r.Action, Secret: r.Secret, Credentials: r.Credentials}
	env, hidden, err := local.handlerEnv(ctx, req)
	if err != nil {
		return nil, err
	}
	env = append(env, tracing.Env(ctx)...) // the run's span, as a local process gets it
	w := RunnerWork{
		RunID: req.RunID, Handler: req.Handler, Trigger: req.Trigger, Key: req.Key, Attempt: req.Attempt,
		Command: r.Action.Command, WorkingDir: r.Action.WorkingDir, Env: env, Input: stdinOf(r.Action, req.Input),
		Timeout: req.Timeout.Milliseconds(), Mode: r.Action.Mode, Processes: r.Action.Processes,
	}
	if sa := r.Action.ServiceAccount; sa != nil {
		config, token, err := local.credentials(ctx, req, sa)
		if err != nil {
			return nil, err
		}
		hidden = append(hidden, token)
		w.Kubeconfig = config
	}
	log := &redactor{w: req.Log, hidden: hidden}
	out, err := r.Runners.Dispatch(ctx, Dispatch{Operator: r.Operator, Image: r.Action.Image, Work: w, Log: log, Claimed: req.OnRunner})
	log.Flush()
	switch {
	case err != nil:
		if i, ok := errors.AsType[*Interrupted](err); ok {
			i.Message = hidden.redactMessage(i.Message)
			return nil, i
		}
		return hidden.redactResult(nil, err)
	case out.Failure != nil:
		return hidden.redactResult(nil, out.Failure.failure())
	}
	return hidden.redactResult(hidden.parseResult(out.Result))
}

// TimeoutDuration is the run's bound.
func (w *RunnerWork) TimeoutDuration() time.Duration {
	return time.Duration(w.Timeout) * time.Millisecond
}

var _ Executor = (*InImage)(nil)

package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	jsonpatchcreate "gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/executor"
	runpkg "github.com/opkit-dev/opkit/internal/run"
	"github.com/opkit-dev/opkit/internal/tracing"
	"github.com/opkit-dev/opkit/internal/webhook"
)

// An admission call, POST /validate/<operator>/<handler> (or /mutate/),
// is an AdmissionReview v1. The engine records it in the archive as a run
// (trigger validate or mutate) before the handler runs, runs the handler
// with the admission binding context (admissionContext) and a deadline a
// little shorter than the webhook's timeout, and answers:
//
//   - the handler's answer: allowed, or denied with its message (and the
//     run's id), with a mutate handler's merge patch turned into the
//     JSONPatch the API server applies; the run ends Allowed or Denied;
//   - when the handler gives none (it fails, its result is not an
//     answer, it is still running at the deadline, or the archive cannot
//     record the call): its failure policy's, Fail denying with a message
//     that says what happened, Ignore allowing; the run ends Failed.
//
// Requests that do not name a running operator's admission handler, or
// are not AdmissionReviews, are answered with an HTTP error, for which
// the API server applies the webhook's failure policy itself.

// Server answers the admission calls of the operators it is Set with. Its
// fields are set before its Handler serves, and not changed after.
type Server struct {
	// Archive records each call as a run. Required.
	Archive archive.Recorder
	// Stubs, when set, replaces the actions of the handlers it names.
	Stubs *runpkg.Stubs
	// RunFinished, when set, is told each call's run at its end.
	RunFinished func(archive.Run)
	// Logger logs what cannot be recorded.
	Logger logr.Logger
	// Reader reads the Secrets an exec or http action names.
	Reader client.Reader
	// Credentials makes an exec handler's kubeconfig.
	Credentials executor.Credentials
	// MaxBodyBytes bounds a review's body (the webhook server's cap).
	MaxBodyBytes int64

	mu sync.Mutex
	// admitters answer the operators' calls, by Operator name.
	admitters map[string]*admitter
}

// admissionContext is the binding context of an admission handler.
type admissionContext struct {
	Operator string `json:"operator"`
	Handler  string `json:"handler"`
	// Trigger is validate or mutate.
	Trigger string `json:"trigger"`
	RunID   string `json:"runId"`
	// Operation is CREATE, UPDATE or DELETE.
	Operation string `json:"operation"`
	// Object is the object as it would be stored (nil for DELETE);
	// OldObject the stored one (nil for CREATE).
	Object    map[string]any            `json:"object"`
	OldObject map[string]any            `json:"oldObject"`
	UserInfo  authenticationv1.UserInfo `json:"userInfo"`
	// DryRun: the request writes nothing (kubectl --dry-run=server).
	DryRun bool `json:"dryRun"`
	// Request names what the API server asks about.
	Request admissionRequest `json:"request"`
	// Traceparent is the W3C trace context of the call's span, when it
	// has one (package tracing).
	Traceparent string `json:"traceparent,omitempty"`
}

type admissionRequest struct {
	UID         string                      `json:"uid"`
	Kind        metav1.GroupVersionKind     `json:"kind"`
	Resource    metav1.GroupVersionResource `json:"resource"`
	SubResource string                      `json:"subResource,omitempty"`
	Namespace   string                      `json:"namespace,omitempty"`
	Name        string                      `json:"name,omitempty"`
}

// Caps of what an admission call records.
const (
	admissionDiffCap    = 32   // changes
	admissionValueCap   = 256  // bytes of a changed value
	admissionMessageCap = 4096 // bytes of the error
)

// Handler serves /validate/ and /mutate/.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		trigger, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		opName, hName, ok := strings.Cut(rest, "/")
		if !webhook.Posted(w, r, "admission reviews") {
			return
		}
		s.mu.Lock()
		op := s.admitters[opName]
		s.mu.Unlock()
		var h *definition.Handler
		if op != nil && ok {
			h = op.def.AdmissionHandler(hName)
		}
		if h == nil || h.Admission.Trigger() != trigger {
			http.Error(w, fmt.Sprintf("no admission handler %q of operator %q runs here", webhook.ClipName(hName), webhook.ClipName(opName)), http.StatusNotFound)
			return
		}
		body, err := webhook.ReadBody(w, r, s.MaxBodyBytes)
		if err != nil {
			return
		}
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
			http.Error(w, "the body is not an AdmissionReview with a request", http.StatusBadRequest)
			return
		}
		// A span per call, continuing the API server's trace (a
		// kube-apiserver with tracing on sends traceparent).
		ctx, span := tracing.Tracer().Start(tracing.FromHeaders(r.Context(), r.Header), "admit "+hName, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		if span.IsRecording() {
			span.SetAttributes(attribute.String("opkit.operator", opName), attribute.String("opkit.handler", hName),
				attribute.String("opkit.trigger", trigger), attribute.String("k8s.operation", string(review.Request.Operation)),
				attribute.String("http.route", "/{trigger}/{operator}/{handler}"))
		}
		resp := s.admit(ctx, op, h, review.Request)
		if span.IsRecording() {
			span.SetAttributes(attribute.Bool("opkit.admission.allowed", resp.Allowed))
		}
		resp.UID = review.Request.UID
		out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
		if out.APIVersion == "" {
			out.APIVersion, out.Kind = "admission.k8s.io/v1", "AdmissionReview"
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}

// admissionBudget is the handler's deadline for a webhook timeout: a
// tenth less (at least 500ms), so that the answer reaches the API server
// before it gives up. The API server's timeout runs from its call, before
// the engine reads the request: on a loaded machine that is hundreds of
// milliseconds, which 200ms did not leave.
func admissionBudget(timeout time.Duration) time.Duration {
	return timeout - max(timeout/10, 500*time.Millisecond)
}

// admit runs one admission call and returns the answer.
func (s *Server) admit(ctx context.Context, op *admitter, h *definition.Handler, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	a := h.Admission
	now := time.Now()
	budget := admissionBudget(a.Timeout)
	deadline := now.Add(budget)
	// The answer goes by answerBy, halfway between the handler's deadline
	// and the API server's: recording the call's end waits no longer.
	answerBy := now.Add(budget + (a.Timeout-budget)/2)
	obj, old := decodeObject(req.Object.Raw), decodeObject(req.OldObject.Raw)
	subject := obj
	if subject == nil {
		subject = old
	}
	u := &unstructured.Unstructured{Object: subject}
	name := subjectName(req.Name, u)
	dryRun := req.DryRun != nil && *req.DryRun
	run := archive.NewRun(op.def.Operator.Name, h.Name, h.Action(), a.Trigger(), u, now)
	run.Namespace, run.Name = req.Namespace, name
	run.Key, run.Diff = "admission/"+string(req.UID), capDiff(cause.Diff(specOf(old), specOf(obj)))
	run.Trace, _ = tracing.Traceparent(ctx)
	if run.Kind == "" {
		run.APIVersion, run.Kind = op.def.GVK.GroupVersion().String(), op.def.GVK.Kind
	}
	if req.Operation == admissionv1.Delete {
		run.Diff = nil
	}
	if dryRun {
		run.Writes = append(run.Writes, "dryRun: the request writes nothing")
	}
	log := s.Logger.WithValues("operator", run.Operator, "handler", h.Name, "run", run.ID, "operation", string(req.Operation))
	if err := s.Archive.Insert(ctx, run); err != nil {
		// Nothing runs that is not recorded.
		return policyAnswer(a, h, "", "the archive cannot record the call: "+err.Error())
	}
	input, err := json.Marshal(admissionContext{
		Operator: run.Operator, Handler: h.Name, Trigger: run.Trigger, RunID: run.ID, Operation: string(req.Operation),
		Object: obj, OldObject: old, UserInfo: req.UserInfo, DryRun: dryRun,
		Request:     admissionRequest{UID: string(req.UID), Kind: req.Kind, Resource: req.Resource, SubResource: req.SubResource, Namespace: req.Namespace, Name: req.Name},
		Traceparent: run.Trace,
	})
	if err != nil {
		return s.finishAdmission(ctx, run, policyAnswer(a, h, run.ID, "encoding the binding context: "+err.Error()), archive.Failed, log, answerBy, nil)
	}
	alog := runpkg.NewLog(context.WithoutCancel(ctx), s.Archive, run.ID)
	ex := s.Stubs.Get(run.Operator, h.Name)
	if ex == nil {
		ex = op.execs[h.Name]
	}
	call := executor.Request{
		RunID: run.ID, Handler: h.Name, Trigger: run.Trigger, Key: run.Key, Attempt: 1, Input: input, Timeout: budget, Log: alog,
		Object: &executor.ObjectRef{APIVersion: run.APIVersion, Kind: run.Kind, Namespace: run.Namespace, Name: run.Name, UID: u.GetUID()},
		// Recorded, not kept on run: the answer may not wait for the
		// executor, and its end's record keeps what is recorded.
		OnRunner: func(name string) {
			if err := s.Archive.SetRunner(context.WithoutCancel(ctx), run.ID, name); err != nil {
				log.Error(err, "recording the runner of an admission run", "runner", name)
			}
		},
	}
	res, runCtx, err := execute(ctx, ex, call, deadline)
	end := func(resp *admissionv1.AdmissionResponse, outcome archive.Outcome) *admissionv1.AdmissionResponse {
		return s.finishAdmission(ctx, run, resp, outcome, log, answerBy, alog.Tail)
	}
	if err == nil && res.Error != nil {
		err = &executor.Failure{Message: "the handler reported an error: " + res.Error.Message}
	}
	if err == nil {
		err = checkAdmissionResult(a, res)
	}
	if err != nil {
		var f *executor.Failure
		msg := err.Error()
		if errors.As(err, &f) && errors.Is(runCtx.Err(), context.DeadlineExceeded) && !strings.Contains(msg, "within") {
			msg = fmt.Sprintf("no answer within %s: %s", budget.Round(time.Millisecond), msg)
		}
		return end(policyAnswer(a, h, run.ID, msg), archive.Failed)
	}
	resp := &admissionv1.AdmissionResponse{Allowed: res.Allowed == nil || *res.Allowed, Warnings: res.Warnings}
	if !resp.Allowed {
		msg := res.Message
		if msg == "" {
			msg = fmt.Sprintf("denied by handler %s", h.Name)
		}
		run.Error = clip(msg, admissionMessageCap)
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
			Message: fmt.Sprintf("%s (opkit run %s)", msg, run.ID)}
		return end(resp, archive.Denied)
	}
	if res.Patch != nil {
		patch, paths, err := jsonPatchOf(req.Object.Raw, res.Patch)
		if err != nil {
			return end(policyAnswer(a, h, run.ID, "the result's patch: "+err.Error()), archive.Failed)
		}
		if len(patch) > 0 {
			resp.Patch, resp.PatchType = patch, ptrTo(admissionv1.PatchTypeJSONPatch)
			run.Writes = append(run.Writes, "patch: "+strings.Join(paths, ", "))
		}
	}
	return end(resp, archive.Allowed)
}

// subjectName names the object of a call: the request's name, else the
// object's, else its generateName with a star.
func subjectName(name string, u *unstructured.Unstructured) string {
	if name == "" {
		name = u.GetName()
	}
	if name == "" && u.GetGenerateName() != "" {
		name = u.GetGenerateName() + "*"
	}
	return name
}

// execute runs req with ex until deadline, and waits 100ms more at most:
// the executor stops the handler at the deadline, and one that takes
// longer to stop is not waited for. runCtx is the run's context, ended
// once the run ends or its deadline passes.
func execute(ctx context.Context, ex executor.Executor, req executor.Request, deadline time.Time) (res *executor.Result, runCtx context.Context, err error) {
	type outcome struct {
		res *executor.Result
		err error
	}
	done := make(chan outcome, 1)
	runCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	go func() {
		defer cancel()
		res, err := ex.Run(runCtx, req)
		done <- outcome{res, err}
	}()
	select {
	case o := <-done:
		return o.res, runCtx, o.err
	case <-time.After(req.Timeout + 100*time.Millisecond):
		return nil, runCtx, &executor.Failure{Message: fmt.Sprintf("no answer within %s", req.Timeout.Round(time.Millisecond))}
	}
}

// finishAdmission records how the call ended, with the rest of its log
// (tail, when set) in the same archive write, and returns resp: once
// recorded, or at by, whichever comes first, so that the answer reaches
// the API server before its timeout however slow the archive is (on a
// loaded machine); a record that takes longer is made after the answer.
func (s *Server) finishAdmission(ctx context.Context, run *archive.Run, resp *admissionv1.AdmissionResponse, outcome archive.Outcome, log logr.Logger, by time.Time, tail func() []byte) *admissionv1.AdmissionResponse {
	run.Outcome, run.FinishedAt = outcome, time.Now().UTC()
	if outcome == archive.Failed && resp.Result != nil {
		run.Error = clip(resp.Result.Message, admissionMessageCap)
	}
	if outcome == archive.Failed && resp.Allowed {
		run.Error = clip(strings.Join(resp.Warnings, "; "), admissionMessageCap)
	}
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		if tail != nil {
			run.LogTail = tail()
		}
		if err := s.Archive.Finish(context.WithoutCancel(ctx), run); err != nil {
			log.Error(err, "recording the end of an admission call")
		}
		runpkg.Observe(run)
		if s.RunFinished != nil {
			s.RunFinished(*run)
		}
	}()
	t := time.NewTimer(time.Until(by))
	defer t.Stop()
	select {
	case <-recorded:
	case <-t.C:
		log.Info("answering before the call's end is recorded: the archive is slower than the webhook's timeout allows")
	}
	return resp
}

// policyAnswer is the failure policy's answer when the handler gave none,
// with why: Fail denies saying so, Ignore allows with a warning.
func policyAnswer(a *definition.Admission, h *definition.Handler, runID, why string) *admissionv1.AdmissionResponse {
	ref := ""
	if runID != "" {
		ref = " (opkit run " + runID + ")"
	}
	if a.FailurePolicy == v1alpha1.FailurePolicyIgnore {
		return &admissionv1.AdmissionResponse{Allowed: true,
			Warnings: []string{clip(fmt.Sprintf("admission handler %s gave no answer (%s); its failurePolicy Ignore allowed the request%s", h.Name, why, ref), 1024)}}
	}
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
		Message: clip(fmt.Sprintf("admission handler %s gave no answer (%s); its failurePolicy Fail denies the request%s", h.Name, why, ref), admissionMessageCap),
	}}
}

// checkAdmissionResult says what is wrong with a result as an answer.
func checkAdmissionResult(a *definition.Admission, res *executor.Result) error {
	var problems []string
	if len(res.Status) > 0 || len(res.Events) > 0 || res.RequeueAfter != "" || res.Skipped || res.Refuse != "" {
		problems = append(problems, "an admission handler's result has allowed, message, patch and warnings only (not status, events, requeueAfter, skipped or refuse)")
	}
	if !a.Mutate && res.Allowed == nil {
		problems = append(problems, `a validate handler's result must say "allowed": true or false`)
	}
	if !a.Mutate && res.Patch != nil {
		problems = append(problems, "a validate handler cannot patch the object: make it a mutate handler")
	}
	if len(problems) > 0 {
		return &executor.Failure{Message: "invalid result: " + strings.Join(problems, "; ")}
	}
	return nil
}

// patchable are the fields a mutate handler's patch may change.
var patchable = map[string]bool{"spec": true, "metadata.labels": true, "metadata.annotations": true}

// jsonPatchOf turns a merge patch of the object raw into the JSONPatch
// that makes the same change, and the fields it changes; it refuses a
// change outside spec, metadata.labels and metadata.annotations.
func jsonPatchOf(raw []byte, merge map[string]any) ([]byte, []string, error) {
	if len(raw) == 0 {
		return nil, nil, errors.New("there is no object to patch")
	}
	mp, err := json.Marshal(merge)
	if err != nil {
		return nil, nil, err
	}
	patched, err := jsonpatch.MergePatch(raw, mp)
	if err != nil {
		return nil, nil, err
	}
	ops, err := jsonpatchcreate.CreatePatch(raw, patched)
	if err != nil {
		return nil, nil, err
	}
	if len(ops) == 0 {
		return nil, nil, nil
	}
	fields := map[string]bool{}
	unescape := strings.NewReplacer("~1", "/", "~0", "~")
	for _, o := range ops {
		parts := strings.Split(strings.TrimPrefix(o.Path, "/"), "/")
		for i, p := range parts {
			parts[i] = unescape.Replace(p)
		}
		top := parts[0]
		if top == "metadata" && len(parts) > 1 {
			top = "metadata." + parts[1]
		}
		field := strings.Join(parts, ".")
		if !patchable[top] {
			return nil, nil, fmt.Errorf("it changes %s; a patch may change spec, metadata.labels and metadata.annotations", field)
		}
		fields[field] = true
	}
	out, err := json.Marshal(ops)
	return out, slices.Sorted(maps.Keys(fields)), err
}

// decodeObject decodes an object of a review; nil for none.
func decodeObject(raw []byte) map[string]any {
	if len(raw) == 0 {
		return nil
	}
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	return m
}

// specOf is an object's spec, or nil.
func specOf(obj map[string]any) map[string]any {
	spec, _ := obj["spec"].(map[string]any)
	return spec
}

// capDiff keeps the first admissionDiffCap changes, each value cut to
// admissionValueCap bytes of its JSON.
func capDiff(d []archive.Change) []archive.Change {
	if len(d) > admissionDiffCap {
		d = append(d[:admissionDiffCap:admissionDiffCap], archive.Change{Op: "change", Path: fmt.Sprintf("(%d more changes)", len(d)-admissionDiffCap)})
	}
	for i := range d {
		d[i].Old, d[i].New = capValue(d[i].Old), capValue(d[i].New)
	}
	return d
}

func capValue(v any) any {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil || len(b) <= admissionValueCap {
		return v
	}
	return fmt.Sprintf("%s... (%d bytes)", b[:admissionValueCap], len(b))
}

// clip cuts s to n bytes.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

func ptrTo[T any](v T) *T { return &v }

// admitter answers one operator's admission calls.
type admitter struct {
	def *definition.Definition
	// execs are the executors of its admission handlers, by name.
	execs map[string]executor.Executor
}

// Set makes d's admission handlers answer its operator's calls from now
// on; an operator without any has none.
func (s *Server) Set(d *definition.Definition) error {
	execs, err := s.executors(d)
	if err != nil {
		return err
	}
	s.mu.Lock()
	old := s.admitters[d.Operator.Name]
	switch {
	case len(d.Admission) == 0:
		delete(s.admitters, d.Operator.Name)
	case s.admitters == nil:
		s.admitters = map[string]*admitter{}
		fallthrough
	default:
		s.admitters[d.Operator.Name] = &admitter{def: d, execs: execs}
	}
	s.mu.Unlock()
	old.close()
	return nil
}

// Remove stops answering the operator's admission calls.
func (s *Server) Remove(operator string) {
	s.mu.Lock()
	old := s.admitters[operator]
	delete(s.admitters, operator)
	s.mu.Unlock()
	old.close()
}

// Stop stops answering every operator's calls and returns the operators
// that had admission handlers.
func (s *Server) Stop() []string {
	s.mu.Lock()
	names := slices.Sorted(maps.Keys(s.admitters))
	old := s.admitters
	s.admitters = nil
	s.mu.Unlock()
	for _, a := range old {
		a.close()
	}
	return names
}

// close stops the processes of a's Serve handlers (exec.mode Serve); a
// call still in flight with a runs a process of its own. A nil a has
// none.
func (a *admitter) close() {
	if a != nil {
		executor.CloseAll(a.execs)
	}
}

// executors builds the executors of d's admission handlers. An
// exec handler is stopped at once at its deadline (SIGTERM, then SIGKILL
// 100ms later): the API server is waiting.
func (s *Server) executors(d *definition.Definition) (map[string]executor.Executor, error) {
	if len(d.Admission) == 0 {
		return nil, nil
	}
	readSecret := func(ctx context.Context, namespace, name, key string) (string, error) {
		var secret corev1.Secret
		if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &secret); err != nil {
			return "", err
		}
		v, ok := secret.Data[key]
		if !ok {
			return "", fmt.Errorf("no key %q", key)
		}
		return strings.TrimSpace(string(v)), nil
	}
	reg := executor.Registry{
		"exec": func(h *definition.Handler) executor.Executor {
			return executor.Local(executor.Exec{Action: *h.Exec, Secret: readSecret, Credentials: s.Credentials, KillGrace: 100 * time.Millisecond}, s.Logger.WithValues("operator", d.Operator.Name, "handler", h.Name))
		},
		"http": func(h *definition.Handler) executor.Executor {
			return &executor.HTTP{Action: *h.HTTP, Secret: readSecret}
		},
	}
	out := map[string]executor.Executor{}
	for _, h := range d.Admission {
		ex, err := reg.For(h)
		if err != nil {
			return nil, fmt.Errorf("operator %s: %w", d.Operator.Name, err)
		}
		out[h.Name] = ex
	}
	return out, nil
}

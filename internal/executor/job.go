package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/tracing"
)

// Paths a job handler's container sees.
const (
	// JobContextPath is the binding context, mounted from a ConfigMap.
	JobContextPath = "/opkit/context.json"
	// JobResultPath is where the container writes its result: the
	// termination message, at most 4096 bytes.
	JobResultPath = corev1.TerminationMessagePathDefault
)

// Job runs each run as a Kubernetes Job in the object's namespace, named
// from the idempotency key and attempt: a run interrupted by an engine
// restart finds its Job again instead of starting a second one. The binding
// context is mounted from a ConfigMap at JobContextPath; the result is the
// container's termination message; the pod's log is copied to the run's.
// Pods get the restricted pod security profile and no service-account
// token unless the action asks for one.
type Job struct {
	Action v1alpha1.JobAction
	Client kubernetes.Interface
	// Tolerations are added to every pod (opkit dev adds the dev node's).
	Tolerations []corev1.Toleration
	// Labels are added to the Job and its pod.
	Labels map[string]string
}

// JobName returns the Job name of a run: the object's and the handler's
// names, shortened, and a hash of the idempotency key and attempt.
func JobName(object, handler, key string, attempt int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s#%d", key, attempt))
	short := func(s string, n int) string {
		if len(s) > n {
			s = s[:n]
		}
		return strings.Trim(s, "-.")
	}
	return fmt.Sprintf("%s-%s-%s", short(object, 30), short(handler, 15), hex.EncodeToString(sum[:])[:10])
}

// Run creates (or finds) the run's Job and waits for it to finish.
func (j *Job) Run(ctx context.Context, req Request) (*Result, error) {
	if req.Object == nil {
		return nil, &Failure{Message: "a job run needs its object", Permanent: true}
	}
	ctx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	obj := *req.Object
	if j.Action.Namespace != "" {
		obj.Namespace = j.Action.Namespace
	}
	if obj.Namespace == "" {
		return nil, &Failure{Message: "the object is cluster-scoped: set job.namespace", Permanent: true}
	}
	name := JobName(obj.Name, req.Handler, req.Key, req.Attempt)
	// The run's object owns its Job, which goes with it; an object with
	// no uid given (one the operator watches but does not own, or the
	// Operator itself for an operator-wide schedule) owns nothing, and
	// the Job goes after its TTL.
	var owners []metav1.OwnerReference
	if obj.UID != "" {
		owners = []metav1.OwnerReference{{APIVersion: obj.APIVersion, Kind: obj.Kind, Name: obj.Name, UID: obj.UID}}
	}
	labels := map[string]string{"opkit.dev/handler": req.Handler}
	for k, v := range j.Labels {
		labels[k] = v
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: obj.Namespace, Labels: labels, OwnerReferences: owners},
		Data:       map[string]string{"context.json": string(req.Input)},
	}
	if _, err := j.Client.CoreV1().ConfigMaps(obj.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, &Failure{Message: fmt.Sprintf("creating ConfigMap %s for the binding context: %v", name, err)}
	}
	// The ConfigMap goes when the run ends; an engine that stops leaves it
	// and the Job to the next one.
	cleanUp := func() {
		_ = j.Client.CoreV1().ConfigMaps(obj.Namespace).Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	}
	job := j.job(name, obj.Namespace, labels, owners, req, tracing.Env(ctx))
	created, err := j.Client.BatchV1().Jobs(obj.Namespace).Create(ctx, job, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		fmt.Fprintf(req.Log, "[opkit] Job %s/%s exists: an earlier engine started it; waiting for it\n", obj.Namespace, name)
		if created, err = j.Client.BatchV1().Jobs(obj.Namespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return nil, &Failure{Message: fmt.Sprintf("reading Job %s: %v", name, err)}
		}
	case err != nil:
		return nil, &Failure{Message: fmt.Sprintf("creating Job %s: %v", name, err), Permanent: apierrors.IsInvalid(err) || apierrors.IsForbidden(err)}
	default:
		fmt.Fprintf(req.Log, "[opkit] created Job %s/%s\n", obj.Namespace, name)
	}
	finished, err := j.waitFinished(ctx, created)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// Time is up by the engine's clock; but a Job that finished
		// meanwhile (the engine was paused, its host suspended) is judged
		// by how it finished.
		if job, done := j.finishedNow(ctx, obj.Namespace, name); done {
			finished, err = job, nil
			ctx = context.WithoutCancel(ctx)
		}
	}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		// Timed out: the Job must not go on alone.
		_ = j.Client.BatchV1().Jobs(obj.Namespace).Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		cleanUp()
		return nil, &Failure{Message: fmt.Sprintf("timed out after %s; Job %s was deleted", req.Timeout, name)}
	case ctx.Err() != nil:
		// The engine is stopping: the next one finds this Job by its name
		// and waits for it.
		return nil, &Failure{Message: "cancelled: the engine is stopping; Job " + name + " goes on"}
	case err != nil:
		cleanUp()
		return nil, &Failure{Message: fmt.Sprintf("waiting for Job %s: %v", name, err)}
	}
	defer cleanUp()
	return j.outcome(context.WithoutCancel(ctx), finished, req.Log)
}

// job is the Job of a run; trace is the run's span as NAME=value
// (tracing.Env), which its container gets beside opkit's variables.
func (j *Job) job(name, namespace string, labels map[string]string, owners []metav1.OwnerReference, req Request, trace []string) *batchv1.Job {
	env := []corev1.EnvVar{
		{Name: "OPKIT_RUN_ID", Value: req.RunID}, {Name: "OPKIT_HANDLER", Value: req.Handler},
		{Name: "OPKIT_TRIGGER", Value: req.Trigger}, {Name: "OPKIT_IDEMPOTENCY_KEY", Value: req.Key},
		{Name: "OPKIT_CONTEXT", Value: JobContextPath}, {Name: "OPKIT_RESULT", Value: JobResultPath},
	}
	for _, kv := range trace {
		name, value, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: name, Value: value})
	}
	for _, v := range j.Action.Env {
		ev := corev1.EnvVar{Name: v.Name, Value: v.Value}
		if v.ValueFrom != nil && v.ValueFrom.SecretKeyRef != nil {
			// The kubelet reads it from the Job's namespace: opkit never sees it.
			ref := v.ValueFrom.SecretKeyRef
			ev.ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name}, Key: ref.Key,
			}}
		}
		env = append(env, ev)
	}
	ttl := int32(3600)
	if j.Action.TTLSecondsAfterFinished != nil {
		ttl = *j.Action.TTLSecondsAfterFinished
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels, OwnerReferences: owners},
		Spec: batchv1.JobSpec{
			// Retries are opkit's, with its back-off and records.
			BackoffLimit:            ptr.To(int32(0)),
			ActiveDeadlineSeconds:   ptr.To(int64(max(req.Timeout.Seconds(), 1))),
			TTLSecondsAfterFinished: &ttl,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					ServiceAccountName:           j.Action.ServiceAccountName,
					AutomountServiceAccountToken: ptr.To(j.Action.AutomountServiceAccountToken),
					Tolerations:                  j.Tolerations,
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name: "handler", Image: j.Action.Image, Command: j.Action.Command, Args: j.Action.Args, Env: env,
						VolumeMounts:             []corev1.VolumeMount{{Name: "opkit-context", MountPath: "/opkit", ReadOnly: true}},
						TerminationMessagePolicy: corev1.TerminationMessageReadFile,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							RunAsNonRoot:             ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
							SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
						},
					}},
					Volumes: []corev1.Volume{{Name: "opkit-context", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}},
					}}},
				},
			},
		},
	}
}

// jobFinished returns Complete or Failed once the Job has that condition.
func jobFinished(job *batchv1.Job) (batchv1.JobConditionType, bool) {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c.Type, true
		}
	}
	return "", false
}

// finishedNow reads the Job once, and returns it if it has finished.
func (j *Job) finishedNow(ctx context.Context, namespace, name string) (*batchv1.Job, bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	job, err := j.Client.BatchV1().Jobs(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, false
	}
	_, done := jobFinished(job)
	return job, done
}

// waitFinished watches the Job until it completes or fails.
func (j *Job) waitFinished(ctx context.Context, job *batchv1.Job) (*batchv1.Job, error) {
	jobs := j.Client.BatchV1().Jobs(job.Namespace)
	rv := job.ResourceVersion
	for {
		if _, done := jobFinished(job); done {
			return job, nil
		}
		w, err := jobs.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", job.Name).String(), ResourceVersion: rv})
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// Too old a resourceVersion, or the API away: read it afresh.
			time.Sleep(time.Second)
			if job, err = jobs.Get(ctx, job.Name, metav1.GetOptions{}); err != nil && ctx.Err() != nil {
				return nil, ctx.Err()
			} else if err != nil {
				return nil, err
			}
			rv = job.ResourceVersion
			continue
		}
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Deleted:
				w.Stop()
				return nil, fmt.Errorf("Job %s was deleted before it finished", job.Name)
			case watch.Added, watch.Modified:
				if jb, ok := ev.Object.(*batchv1.Job); ok {
					job, rv = jb, jb.ResourceVersion
				}
			}
			if _, done := jobFinished(job); done {
				w.Stop()
				return job, nil
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// The watch ended (server timeout): resume from where it was.
	}
}

// outcome copies the pod's log and reads its result.
func (j *Job) outcome(ctx context.Context, job *batchv1.Job, log io.Writer) (*Result, error) {
	kind, _ := jobFinished(job)
	pods, err := j.Client.CoreV1().Pods(job.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job.Name})
	if err != nil || len(pods.Items) == 0 {
		if kind == batchv1.JobComplete {
			return &Result{}, nil
		}
		return nil, &Failure{Message: fmt.Sprintf("Job %s failed: %s", job.Name, jobMessage(job))}
	}
	pod := pods.Items[0]
	for _, p := range pods.Items[1:] {
		if p.CreationTimestamp.After(pod.CreationTimestamp.Time) {
			pod = p
		}
	}
	logTail := &tailWriter{w: log}
	if stream, err := j.Client.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "handler"}).Stream(ctx); err == nil {
		_, _ = io.Copy(logTail, stream)
		stream.Close()
	} else {
		fmt.Fprintf(log, "[opkit] reading the log of pod %s: %v\n", pod.Name, err)
	}
	var term *corev1.ContainerStateTerminated
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == "handler" && cs.State.Terminated != nil {
			term = cs.State.Terminated
		}
	}
	if term == nil {
		return nil, &Failure{Message: fmt.Sprintf("Job %s %s before its container ended: %s", job.Name, strings.ToLower(string(kind)), jobMessage(job))}
	}
	if term.ExitCode == 0 {
		res, err := ParseResult([]byte(term.Message))
		if err != nil {
			return nil, &Failure{Message: "termination message: " + err.Error()}
		}
		return res, nil
	}
	plain := fmt.Sprintf("exit status %d", term.ExitCode)
	if term.ExitCode > 128 {
		plain = fmt.Sprintf("exit status %d (killed by signal %d, %s)", term.ExitCode, term.ExitCode-128, term.Reason)
	}
	if line := logTail.lastLine(); line != "" {
		plain += ": " + line // as an exec handler's stderr, from the pod's log
	}
	return nil, exitFailure(int(term.ExitCode), []byte(term.Message), plain)
}

func jobMessage(job *batchv1.Job) string {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return c.Reason + ": " + c.Message
		}
	}
	return "no reason given"
}

package runners

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
)

// The annotations of a runner Deployment that bound its replicas, and
// their defaults.
const (
	// MinAnnotation is the fewest runners kept, busy or not: warm ones
	// take a run at once. Defaults to DefaultMin.
	MinAnnotation = "opkit.dev/runners-min"
	// MaxAnnotation is the most runners run, however long the queue.
	// Defaults to DefaultMax.
	MaxAnnotation = "opkit.dev/runners-max"
	// ParallelAnnotation is how many runs one runner runs at once: its
	// agent's --parallel. Defaults to DefaultParallel, the agent's own
	// default.
	ParallelAnnotation = "opkit.dev/runners-parallel"

	DefaultMin      = 1
	DefaultMax      = 4
	DefaultParallel = 4
)

// DeploymentName is the name of the Deployment of an operator's runners
// of an image: OPERATOR-runner-<the first 8 hex digits of sha256(image)>.
func DeploymentName(operator, image string) string {
	sum := sha256.Sum256([]byte(image))
	return operator + "-runner-" + hex.EncodeToString(sum[:4])
}

// Scaler sets the replicas of each runner Deployment, through its scale
// subresource, from the queue of its operator and image: enough runners
// for the runs queued and running (ParallelAnnotation each), within the
// Deployment's MinAnnotation and MaxAnnotation.
//
// It scales up as soon as runs wait (Pool.Dispatch wakes it), and down
// only once the fewer runners have sufficed for ScaleDownAfter: it sets
// the most runners any moment of that window asked for (the stabilization
// window of the HorizontalPodAutoscaler), so a burst that ends does not
// stop runners that the next burst needs. A Deployment that does not
// exist (an engine on a laptop, an operator without runners) is left
// alone; so is one whose bounds are not numbers, with an error naming
// the annotation.
//
// It reads Deployments (get) and writes their scale (update on
// deployments/scale), in Namespace only.
type Scaler struct {
	// Pool is whose queues are counted. Required.
	Pool *Pool
	// Deployments reads the runner Deployments and writes their scale.
	// Required.
	Deployments appsv1client.DeploymentsGetter
	// Namespace is the engine's, where the runner Deployments are.
	// Required.
	Namespace string
	// Every is how often the Deployments are checked when the queues do
	// not change. Defaults to 10s.
	Every time.Duration
	// ScaleDownAfter is how long fewer runners must suffice before the
	// Deployment is scaled down to them. Defaults to 5m.
	ScaleDownAfter time.Duration
	// Log receives each change of scale and each error. Defaults to none.
	Log logr.Logger

	windows map[queueKey][]sample
	errs    map[queueKey]string
}

// sample is what the queue asked for at one moment.
type sample struct {
	at   time.Time
	want int32
}

// Run scales until ctx ends.
func (s *Scaler) Run(ctx context.Context) {
	every := s.Every
	if every <= 0 {
		every = 10 * time.Second
	}
	s.windows, s.errs = map[queueKey][]sample{}, map[queueKey]string{}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s.scaleAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.Pool.changed:
		}
	}
}

func (s *Scaler) scaleAll(ctx context.Context) {
	for key, demand := range s.Pool.demand() {
		if ctx.Err() != nil {
			return
		}
		if err := s.scale(ctx, key, demand); err != nil {
			if msg := err.Error(); s.errs[key] != msg {
				s.errs[key] = msg
				s.Log.Error(err, "scaling runners", "operator", key.operator, "image", key.image)
			}
			continue
		}
		delete(s.errs, key)
	}
}

// scale sets the replicas of key's Deployment for demand runs.
func (s *Scaler) scale(ctx context.Context, key queueKey, demand int) error {
	name := DeploymentName(key.operator, key.image)
	deps := s.Deployments.Deployments(s.Namespace)
	d, err := deps.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		delete(s.windows, key)
		return nil // no runners to scale
	}
	if err != nil {
		return fmt.Errorf("reading Deployment %s/%s: %w", s.Namespace, name, err)
	}
	b, err := boundsOf(d)
	if err != nil {
		return err
	}
	current := int32(1)
	if d.Spec.Replicas != nil {
		current = *d.Spec.Replicas
	}
	now := time.Now()
	window, seen := s.windows[key]
	if !seen {
		// What runs now was asked for: an engine that starts does not
		// stop runners before a quiet period of its own.
		window = []sample{{at: now, want: current}}
	}
	window, target := b.target(window, now, s.scaleDownAfter(), demand)
	s.windows[key] = window
	if target == current {
		return nil
	}
	// Over the resourceVersion read: a Deployment changed meanwhile is
	// scaled at the next check.
	_, err = deps.UpdateScale(ctx, name, &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace, ResourceVersion: d.ResourceVersion},
		Spec:       autoscalingv1.ScaleSpec{Replicas: target},
	}, metav1.UpdateOptions{FieldManager: "opkit"})
	if err != nil {
		return fmt.Errorf("scaling Deployment %s/%s to %d: %w", s.Namespace, name, target, err)
	}
	s.Log.Info("scaled runners", "deployment", name, "from", current, "to", target, "runs", demand)
	return nil
}

func (s *Scaler) scaleDownAfter() time.Duration {
	if s.ScaleDownAfter <= 0 {
		return 5 * time.Minute
	}
	return s.ScaleDownAfter
}

// bounds are a runner Deployment's annotations.
type bounds struct{ min, max, parallel int32 }

// boundsOf reads d's bounds, each defaulted; a value that is not a
// number, or bounds that contradict each other, are an error naming it.
func boundsOf(d *appsv1.Deployment) (bounds, error) {
	b := bounds{min: DefaultMin, max: DefaultMax, parallel: DefaultParallel}
	for _, a := range []struct {
		name  string
		v     *int32
		least int32
	}{{MinAnnotation, &b.min, 0}, {MaxAnnotation, &b.max, 1}, {ParallelAnnotation, &b.parallel, 1}} {
		text, ok := d.Annotations[a.name]
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(text, 10, 32)
		if err != nil || int32(n) < a.least {
			return b, fmt.Errorf("runner Deployment %s/%s: annotation %s is %q: want a whole number, at least %d", d.Namespace, d.Name, a.name, text, a.least)
		}
		*a.v = int32(n)
	}
	if b.min > b.max {
		return b, fmt.Errorf("runner Deployment %s/%s: annotation %s (%d) is more than %s (%d)", d.Namespace, d.Name, MinAnnotation, b.min, MaxAnnotation, b.max)
	}
	return b, nil
}

// want is the runners demand runs ask for, within the bounds.
func (b bounds) want(demand int) int32 {
	n := int32((demand + int(b.parallel) - 1) / int(b.parallel))
	return max(b.min, min(b.max, n))
}

// target adds what demand asks for now to the window, drops the samples
// older than downAfter, and returns the window and the most any sample
// asks for (within the bounds as they are now).
func (b bounds) target(window []sample, now time.Time, downAfter time.Duration, demand int) ([]sample, int32) {
	window = append(window, sample{at: now, want: b.want(demand)})
	kept := window[:0]
	for _, s := range window {
		if now.Sub(s.at) < downAfter || s.at.Equal(now) {
			kept = append(kept, s)
		}
	}
	var target int32
	for _, s := range kept {
		target = max(target, max(b.min, min(b.max, s.want)))
	}
	return compact(kept), target
}

// compact drops the samples that a later one asks as much as: they can
// never be the window's most.
func compact(window []sample) []sample {
	out := window[:0]
	for i, s := range window {
		dominated := false
		for _, later := range window[i+1:] {
			if later.want >= s.want {
				dominated = true
				break
			}
		}
		if !dominated {
			out = append(out, s)
		}
	}
	return out
}

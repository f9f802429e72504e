package runners_test

import (
	"context"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/executor"
	"github.com/opkit-dev/opkit/internal/runners"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

const image = "python:3.12-slim"

// runnerDeployment makes the runner Deployment of operator demo's image,
// whose Pods no node takes: its replicas are what is looked at.
func runnerDeployment(t *testing.T, client kubernetes.Interface, ns string, annotations map[string]string) {
	t.Helper()
	labels := map[string]string{"app": "demo-runner"}
	one := int32(1)
	_, err := client.AppsV1().Deployments(ns).Create(t.Context(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: runners.DeploymentName("demo", image), Annotations: annotations},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"opkit.dev/test": "no-such-node"},
					Containers:   []corev1.Container{{Name: "runner", Image: image, Command: []string{"/opkit/bin/opkit", "agent", "run"}}},
				},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func replicas(ctx context.Context, client kubernetes.Interface, ns string) (int32, error) {
	s, err := client.AppsV1().Deployments(ns).GetScale(ctx, runners.DeploymentName("demo", image), metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	return s.Spec.Replicas, nil
}

// queue dispatches n runs of operator's image that wait, no agent taking
// them, until cancel.
func queue(pool *runners.Pool, operator string, n int) (cancel func()) {
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, _ = pool.Dispatch(ctx, executor.Dispatch{Operator: operator, Image: image, Log: discard{}})
		})
	}
	return func() { stop(); wg.Wait() }
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func TestRunnersScaleWithTheQueueWithinTheDeploymentsBounds(t *testing.T) {
	env := clustertest.New(t)
	client, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	runnerDeployment(t, client, env.Namespace, map[string]string{runners.MinAnnotation: "1", runners.MaxAnnotation: "3", runners.ParallelAnnotation: "2"})
	pool := runners.NewPool()
	const quiet = 5 * time.Second
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		(&runners.Scaler{Pool: pool, Deployments: client.AppsV1(), Namespace: env.Namespace, Every: 200 * time.Millisecond, ScaleDownAfter: quiet}).Run(ctx)
	})
	t.Cleanup(func() { stop(); wg.Wait() })
	// An operator without a runner Deployment (a laptop's) queues runs
	// too: it is left alone, and the others scale.
	defer queue(pool, "laptop", 5)()

	at := func(want int32, what string) {
		t.Helper()
		clustertest.Eventually(t, 30*time.Second, what, func(ctx context.Context) (bool, error) {
			n, err := replicas(ctx, client, env.Namespace)
			return n == want, err
		})
	}
	// 3 runs, 2 a runner: 2 runners, at once.
	first := queue(pool, "demo", 3)
	at(2, "2 runners for 3 runs")
	// 9 runs: 5 runners asked for, 3 at most.
	second := queue(pool, "demo", 6)
	at(3, "the most runners, 3, for 9 runs")
	first()
	second()
	ended := time.Now()
	n, err := replicas(t.Context(), client, env.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(ended) < quiet && n != 3 {
		t.Errorf("%d runners as soon as the queue emptied, want 3 kept for the quiet period", n)
	}
	at(1, "the fewest runners, 1, once quiet")
	if quietFor := time.Since(ended); quietFor < quiet {
		t.Errorf("scaled down %s after the queue emptied, want at least %s", quietFor.Round(time.Millisecond), quiet)
	}
	if _, err := client.AppsV1().Deployments(env.Namespace).Get(t.Context(), runners.DeploymentName("laptop", image), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the laptop operator's runner Deployment: %v, want none made", err)
	}
}

package runners

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/opkit-dev/opkit/internal/webhook"
)

// Names of what the engine keeps in its namespace for runners.
const (
	// TLSSecret holds the runner API's certificates and CA (package
	// webhook's Secret format).
	TLSSecret = "opkit-runners-tls"
	// CAConfigMap publishes the CA bundle (key ca.crt) that runner Pods
	// mount to trust the engine.
	CAConfigMap = "opkit-runners-ca"
)

// ServeOptions configures Serve.
type ServeOptions struct {
	// Addr is the address to listen on, e.g. :7384 (port 0: any free one).
	// Required.
	Addr string
	// Namespace is the engine's: the Secret, the ConfigMap and the
	// runners' ServiceAccounts are of it. Required.
	Namespace string
	// Service is the Service runners reach the engine through: the
	// certificate is valid for SERVICE.NAMESPACE.svc(.cluster.local).
	// Without it, for an engine outside the cluster, Addr's host.
	Service string
	// Client reads and writes the Secret and the ConfigMap and reviews
	// tokens. Required.
	Client kubernetes.Interface
	// LostAfter is Pool.LostAfter; PollFor is Server.PollFor.
	LostAfter, PollFor time.Duration
	// ScaleEvery and ScaleDownAfter are Scaler.Every and
	// Scaler.ScaleDownAfter: the runner Deployments of Namespace are
	// scaled by their queues (scale.go).
	ScaleEvery, ScaleDownAfter time.Duration
	// Log receives the certificates' rotation steps and errors.
	Log logr.Logger
}

// Serving is a running runner API.
type Serving struct {
	*Pool
	srv *webhook.Server
}

// Addr is the address the API listens on.
func (s *Serving) Addr() string { return s.srv.Addr() }

// CABundle is the PEM of the CAs runners trust, once the server has its
// certificate (WaitReady).
func (s *Serving) CABundle() []byte { return s.srv.CABundle() }

// WaitReady waits until the server has its certificate.
func (s *Serving) WaitReady(ctx context.Context) error { return s.srv.WaitReady(ctx) }

// Serve starts the runner API over TLS until ctx ends: the certificate is
// kept in Secret TLSSecret and rotated by package webhook, its CA bundle
// published in ConfigMap CAConfigMap. A Scaler scales the runner
// Deployments of the namespace by their queues meanwhile.
func Serve(ctx context.Context, opts ServeOptions) (*Serving, error) {
	if opts.Addr == "" || opts.Namespace == "" || opts.Client == nil {
		return nil, errors.New("runners: ServeOptions.Addr, Namespace and Client are required")
	}
	var names []string
	if opts.Service != "" {
		svc := opts.Service + "." + opts.Namespace + ".svc"
		names = []string{svc, svc + ".cluster.local"}
	} else {
		host, _, err := net.SplitHostPort(opts.Addr)
		if err != nil {
			return nil, fmt.Errorf("runners: the address %q: %w", opts.Addr, err)
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			return nil, fmt.Errorf("runners: the runner API listens on %q, every address: name the Service runners reach it through (opkit run --runners-service)", opts.Addr)
		}
		names = []string{host}
	}
	cms := opts.Client.CoreV1().ConfigMaps(opts.Namespace)
	srv, err := webhook.New(webhook.Options{
		Addr: opts.Addr, Names: names, Secret: types.NamespacedName{Namespace: opts.Namespace, Name: TLSSecret},
		Secrets: opts.Client.CoreV1(), Streaming: true, Log: opts.Log,
		OnBundle: func(ctx context.Context, bundle []byte) error {
			return publishCA(ctx, cms, opts.Namespace, bundle)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("runners: %w", err)
	}
	pool := NewPool()
	pool.LostAfter = opts.LostAfter
	api := &Server{Pool: pool, Reviews: opts.Client.AuthenticationV1().TokenReviews(), Namespace: opts.Namespace, PollFor: opts.PollFor}
	srv.Handle("/runners/", api.Handler())
	scaler := &Scaler{Pool: pool, Deployments: opts.Client.AppsV1(), Namespace: opts.Namespace, Every: opts.ScaleEvery, ScaleDownAfter: opts.ScaleDownAfter, Log: opts.Log}
	go scaler.Run(ctx)
	go func() {
		if err := srv.Start(ctx); err != nil {
			opts.Log.Error(err, "the runner API stopped")
		}
	}()
	return &Serving{Pool: pool, srv: srv}, nil
}

// publishCA writes the bundle into the ConfigMap, made when missing.
func publishCA(ctx context.Context, cms interface {
	Get(context.Context, string, metav1.GetOptions) (*corev1.ConfigMap, error)
	Create(context.Context, *corev1.ConfigMap, metav1.CreateOptions) (*corev1.ConfigMap, error)
	Update(context.Context, *corev1.ConfigMap, metav1.UpdateOptions) (*corev1.ConfigMap, error)
}, namespace string, bundle []byte) error {
	cm, err := cms.Get(ctx, CAConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: CAConfigMap, Labels: map[string]string{"app.kubernetes.io/managed-by": "opkit"}},
			Data:       map[string]string{"ca.crt": string(bundle)},
		}, metav1.CreateOptions{FieldManager: "opkit"})
		return err
	}
	if err != nil {
		return err
	}
	if cm.Data["ca.crt"] == string(bundle) {
		return nil
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data["ca.crt"] = string(bundle)
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "opkit"})
	return err
}

package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/clock"
)

// Options configures [New].
type Options struct {
	// Addr is the address to listen on, e.g. 127.0.0.1:7383 (port 0: any
	// free one, see Server.Addr). Required.
	Addr string
	// Names are the DNS names and IP addresses the API server reaches the
	// server at, which the serving certificate is valid for, e.g.
	// 127.0.0.1, or opkit-webhook.opkit.svc. Required.
	Names []string
	// Secret is where the certificates are kept, in the engine's
	// namespace. Required.
	Secret types.NamespacedName
	// Secrets reads and writes it. Required.
	Secrets corev1client.SecretsGetter
	// Clock is the time certificates are issued and rotated by. Defaults
	// to the real clock.
	Clock clock.PassiveClock
	// CALifetime is how long a CA is valid; it is replaced at 2/3 of it.
	// Defaults to 5 years.
	CALifetime time.Duration
	// ServingLifetime is how long a serving certificate is valid; it is
	// renewed at 2/3 of it. Defaults to 90 days.
	ServingLifetime time.Duration
	// Grace is the wait between the steps of a CA rotation: longer than
	// CheckEvery and the time the API server takes to see a new caBundle.
	// Defaults to 5m.
	Grace time.Duration
	// CheckEvery is how often the Secret is read again (in real time).
	// Defaults to 1m.
	CheckEvery time.Duration
	// MaxBodyBytes bounds a request's body (ReadBody). Defaults to 8 MiB:
	// an AdmissionReview holds an object and its old version.
	MaxBodyBytes int64
	// OnBundle, when set, is called with the caBundle at start and each
	// time it changes, from Start's goroutine; after an error it is
	// called again at the next check.
	OnBundle func(ctx context.Context, bundle []byte) error
	// Log receives the rotation's steps and errors. Defaults to none.
	Log logr.Logger
	// Streaming lifts the read and write timeouts of requests, for a
	// server whose requests last as long as a handler's run (the runner
	// API, package runners, which bounds them itself). Defaults to false.
	Streaming bool
	// ClientCerts asks each client for its certificate (tls.RequestClientCert),
	// which the server does not verify: r.TLS.PeerCertificates holds it
	// for the handler to verify. An aggregated API server verifies the
	// front proxy's this way (package aggregate), against a CA the API
	// server publishes and may change while the server runs. Defaults to
	// false: no client certificate is asked for.
	ClientCerts bool
}

// Server is the HTTPS server (see the package doc).
type Server struct {
	opts   Options
	ln     net.Listener
	mux    *http.ServeMux
	policy policy

	cert      atomic.Pointer[tls.Certificate]
	bundle    atomic.Pointer[[]byte]
	ready     chan struct{}
	readyOnce sync.Once
	// checkMu orders Checks; published is the bundle OnBundle last took.
	checkMu   sync.Mutex
	published []byte
}

// New checks opts and binds the listener; nothing is served before Start.
func New(opts Options) (*Server, error) {
	switch {
	case opts.Addr == "":
		return nil, errors.New("webhook: Options.Addr is required")
	case len(opts.Names) == 0:
		return nil, errors.New("webhook: Options.Names is required: the names the API server reaches the server at")
	case opts.Secret.Namespace == "" || opts.Secret.Name == "":
		return nil, errors.New("webhook: Options.Secret needs a namespace and a name")
	case opts.Secrets == nil:
		return nil, errors.New("webhook: Options.Secrets is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.CALifetime == 0 {
		opts.CALifetime = 5 * 365 * 24 * time.Hour
	}
	if opts.ServingLifetime == 0 {
		opts.ServingLifetime = 90 * 24 * time.Hour
	}
	if opts.Grace == 0 {
		opts.Grace = 5 * time.Minute
	}
	if opts.CheckEvery == 0 {
		opts.CheckEvery = time.Minute
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = 8 << 20
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	return &Server{
		opts: opts, ln: ln, mux: http.NewServeMux(), ready: make(chan struct{}),
		policy: policy{names: opts.Names, caLifetime: opts.CALifetime, servingLifetime: opts.ServingLifetime, grace: opts.Grace},
	}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Secret is where the certificates are kept.
func (s *Server) Secret() types.NamespacedName { return s.opts.Secret }

// Handle registers a handler for a pattern of http.ServeMux; call it
// before Start.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// NeedLeaderElection is false: every replica serves.
func (s *Server) NeedLeaderElection() bool { return false }

// CABundle is the PEM of the CAs to trust, or nil before the first check.
func (s *Server) CABundle() []byte {
	if b := s.bundle.Load(); b != nil {
		return *b
	}
	return nil
}

// WaitReady waits until the server has its certificate.
func (s *Server) WaitReady(ctx context.Context) error {
	select {
	case <-s.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Start serves until ctx ends; it checks the certificates first, and
// every CheckEvery.
func (s *Server) Start(ctx context.Context) error {
	for {
		err := s.Check(ctx)
		if err == nil {
			break
		}
		s.opts.Log.Error(err, "webhook certificates: cannot read or write them; trying again", "secret", s.opts.Secret.String())
		select {
		case <-ctx.Done():
			_ = s.ln.Close()
			return nil
		case <-time.After(min(s.opts.CheckEvery, 5*time.Second)):
		}
	}
	srv := &http.Server{
		Handler: s.mux,
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			NextProtos: []string{"http/1.1"},
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				return s.cert.Load(), nil
			},
		},
		// HTTP/2 off: see the package doc (CVE-2023-44487).
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		// An admission handler answers within 30s, the API server's bound.
		WriteTimeout:   40 * time.Second,
		IdleTimeout:    90 * time.Second,
		MaxHeaderBytes: 64 << 10,
	}
	// A streaming server's requests (long polls, streams) end when it
	// stops, at once, rather than holding its shutdown until they end on
	// their own: their clients dial again, the engine that replaces it.
	base, endRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer endRequests()
	if s.opts.Streaming {
		srv.ReadTimeout, srv.WriteTimeout = 0, 0
		srv.BaseContext = func(net.Listener) context.Context { return base }
	}
	if s.opts.ClientCerts {
		srv.TLSConfig.ClientAuth = tls.RequestClientCert
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(s.ln, "", "") }()
	ticker := time.NewTicker(s.opts.CheckEvery)
	defer ticker.Stop()
	for {
		select {
		case err := <-done:
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return fmt.Errorf("webhook: %w", err)
		case <-ticker.C:
			if err := s.Check(ctx); err != nil && ctx.Err() == nil {
				s.opts.Log.Error(err, "webhook certificates: checking them failed; trying again", "secret", s.opts.Secret.String())
			}
		case <-ctx.Done():
			endRequests() // a streaming server's long polls and streams
			stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			err := srv.Shutdown(stop)
			cancel()
			if err != nil {
				_ = srv.Close()
			}
			return nil
		}
	}
}

// Check reads the Secret, takes the rotation step due, if any, and serves
// what the Secret then holds; OnBundle is called when the bundle changed.
func (s *Server) Check(ctx context.Context) error {
	s.checkMu.Lock()
	defer s.checkMu.Unlock()
	secrets := s.opts.Secrets.Secrets(s.opts.Secret.Namespace)
	for attempt := 0; ; attempt++ {
		sec, err := secrets.Get(ctx, s.opts.Secret.Name, metav1.GetOptions{})
		exists := err == nil
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading Secret %s: %w", s.opts.Secret, err)
		}
		if !exists {
			sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.opts.Secret.Namespace, Name: s.opts.Secret.Name,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "opkit"}}, Type: corev1.SecretTypeOpaque}
		}
		st, err := decodeState(sec.Data)
		if err != nil {
			s.opts.Log.Info("webhook certificates: the Secret holds none that can be read; making new ones", "secret", s.opts.Secret.String(), "error", err.Error())
			st = nil
		}
		injected := st != nil && bytes.Equal(st.bundlePEM(), s.published)
		next, step, err := plan(s.opts.Clock.Now(), st, s.policy, injected)
		if err != nil {
			return err
		}
		if step != "" {
			sec.Data = next.encode()
			if !exists {
				_, err = secrets.Create(ctx, sec, metav1.CreateOptions{FieldManager: "opkit"})
			} else {
				_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{FieldManager: "opkit"})
			}
			if (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) && attempt < 3 {
				continue // another replica wrote it: read its result
			}
			if err != nil {
				return fmt.Errorf("writing Secret %s: %w", s.opts.Secret, err)
			}
			s.opts.Log.Info("webhook certificates: "+step, "secret", s.opts.Secret.String(), "servingNotAfter", next.serving.cert.NotAfter.UTC().Format(time.RFC3339))
		}
		return s.use(ctx, next)
	}
}

// use serves st and publishes its bundle.
func (s *Server) use(ctx context.Context, st *certState) error {
	cert, err := st.serving.tlsCertificate()
	if err != nil {
		return err
	}
	s.cert.Store(cert)
	bundle := st.bundlePEM()
	s.bundle.Store(&bundle)
	s.readyOnce.Do(func() { close(s.ready) })
	if bytes.Equal(bundle, s.published) {
		return nil
	}
	if s.opts.OnBundle == nil {
		s.published = bundle
		return nil
	}
	if err := s.opts.OnBundle(ctx, bundle); err != nil {
		return fmt.Errorf("injecting the caBundle: %w", err)
	}
	s.published = bundle
	return nil
}

// Posted reports whether r is a POST; else it answers 405, allowing
// POST, and saying that what (e.g. "admission reviews") is POSTed.
func Posted(w http.ResponseWriter, r *http.Request, what string) bool {
	if r.Method == http.MethodPost {
		return true
	}
	w.Header().Set("Allow", http.MethodPost)
	http.Error(w, what+" are POSTed", http.StatusMethodNotAllowed)
	return false
}

// ReadBody reads a request's body, up to limit bytes. When it cannot (a
// longer one: the error says so), it answers 413 with the error, which
// it returns: the caller answers nothing more.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		err = fmt.Errorf("the body is larger than %d bytes", limit)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return nil, err
	}
	return body, nil
}

// MaxBodyBytes is the cap of ReadBody the server was given.
func (s *Server) MaxBodyBytes() int64 { return s.opts.MaxBodyBytes }

// ClipName cuts a name read from a request's path (an operator's, a
// source's, a handler's) to what an answer or an error message shows.
func ClipName(s string) string {
	if len(s) > 63 {
		return s[:63] + "..."
	}
	return s
}

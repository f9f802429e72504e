// Package console serves opkit's web console: every handler run with its
// trigger, diff, log and outcome, reached from the operators, from each
// object's timeline and from the failures inbox; every webhook delivery
// with what it caused, from the events list and each event source's page;
// the life cycle of an operator that declares states (spec.states), as a
// diagram and in words, with each object's state and its transitions; and
// the actions retry, pause, resume, decide and run again; and a
// delivery's Redeliver (redeliver.go).
//
// Contracts:
//   - It reads the run archive and the cluster only: the CRDs opkit
//     installed (label opkit.dev/operator), their objects, the Operator
//     objects, the objects watch operators watch, and Events. It never
//     talks to the engine, but for the definitions of the operators the
//     engine beside it runs (Options.Definitions); its actions are
//     annotations the engine consumes (opkit.dev/retry, opkit.dev/paused,
//     opkit.dev/decision, opkit.dev/rerun), and the Redelivery objects it
//     creates for the Redeliver button, which the engine answers.
//   - Run again: a finished run of a custom resource's handler offers it
//     on its page (see rerun): the handler runs once more for the object,
//     as it is now or with the recorded binding context, recorded with who
//     asked and why, linked both ways to the run it repeats.
//   - States: the diagram and its words come from the operator's
//     definition (the engine's, or its Operator object's, compiled); an
//     object's state from its status.state, which the engine writes; its
//     transitions from the archive's runs whose handler is
//     v1alpha1.TransitionHandler, shown apart from handler runs, with the
//     engine's account of each (the run's log). The diagram is SVG drawn
//     on the server (diagram.go): no script, every state and transition
//     also said in a list beside it, nothing told by colour alone.
//   - Decide: while status.state asks a person (its question and
//     choices), the object's page offers a button per choice and a
//     required reason. POST .../decide checks, as every action, the CSRF
//     token and patch on the object; reads the object again; refuses
//     (409, and writes nothing) when its state or visit (seq) is not the
//     one the page showed, the choice is not among status.state.choices,
//     or a decision is already sent and not taken; and writes
//     v1alpha1.DecisionAnnotation (a v1alpha1.Decision) by a merge patch
//     that carries the resourceVersion it read, so that a change in
//     between refuses it too. Its By is the Kubernetes user under
//     Auth.Kubernetes, "console token holder" under Auth.Token, and
//     without auth (loopback only) "console (<OS user>)", or "console"
//     when the OS user is not known. The engine takes the decision and
//     removes the annotation; until then the page says it is sent, and
//     offers no choice.
//   - Rollout: an operator's page shows its Rollout (rollouts.opkit.dev,
//     read as the console's identity, shown to whoever may get it) while
//     a changed definition rolls out, with the definition each object's
//     status says (rollout.go). Continue and Undo write spec.request as
//     opkit rollout does, checking the CSRF token, patch on the Rollout,
//     and the resourceVersion the page showed.
//   - An operator that owns no resource is shown from its definition and
//     the archive: a watch operator's objects are those it has state
//     records for, and a calendar's schedules their last slots and runs.
//     Neither is offered an action: opkit never writes to a watched
//     object, and a schedule has no object to write to.
//   - Pages are HTML rendered on the server and readable without
//     JavaScript. A small script keeps a page's live part current: /live
//     streams it again (Server-Sent Events) whenever it changes, checked
//     every second.
//   - GET never changes anything. Actions are POSTs that carry a CSRF token
//     bound to the caller, from the console's own origin.
//   - Without Auth, Serve binds loopback addresses only. With Auth, every
//     request needs the token; with Auth.Kubernetes, reading needs get and
//     acting needs patch on the operator's resource (SubjectAccessReview):
//     its custom resource, the watched object's kind, or for a calendar
//     its Operator object (see access.go).
//   - It shows no Secret's data: children are listed by kind and name; the
//     archive keeps a run's binding context without Secrets' data, and the
//     console shows of it the key and the diff only. A webhook
//     delivery's payload and headers, which the archive keeps as the
//     sender sent them (the payload) or redacted by the engine (the
//     headers), are shown redacted again (archive.RedactPayload,
//     archive.RedactHeaders), and escaped: the sender chose them.
//   - A delivery, and the runs on event it caused, are readable by
//     whoever may read its operator's page.
package console

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
)

// Options configures a console.
type Options struct {
	// Archive is the run archive, which the console only reads. Required.
	Archive archive.Reader
	// Config reaches the cluster: it reads the operators' objects and
	// Events and sets the actions' annotations. Required.
	Config *rest.Config
	// Auth says who may use it. The zero value admits everyone, on
	// loopback only.
	Auth Auth
	// CacheTTL is how long a list of objects is reused across pages and
	// live updates. Defaults to 2s.
	CacheTTL time.Duration
	// LiveInterval is how often a live page is checked for changes.
	// Defaults to 1s.
	LiveInterval time.Duration
	// Runs, when set, reports whether the engine beside the console runs
	// an operator: the overview marks the operators of the cluster that it
	// does not ("not run here"). Nil for a console on its own, which cannot
	// tell.
	Runs func(operator string) bool
	// Definitions, when set, returns the operators the engine beside the
	// console runs. An operator that owns no custom resource (a watch, or
	// operator-wide schedules) has no CRD to be found by: the console
	// learns it from these, and from the cluster's Operator objects, so
	// that one run from a file (opkit dev, opkit run -f) is shown too. Nil
	// for a console on its own, which knows the cluster's only.
	Definitions func() []*definition.Definition
	// Standby, when set, says why the engine beside the console does not
	// act (a standby of leader election, waiting for the Lease held by
	// another replica), or "" while it acts: every page then says so, as
	// what it shows is the leader's doing.
	Standby func() string
	// RedeliveryNamespace is where the Redeliver button of a delivery's
	// page creates Redelivery objects (redeliver.go): a namespace whose
	// Redeliveries the engine that runs the operators answers, the one
	// it acts in when it has one (engine.Options.Namespace). A stack
	// sets it (stack.Console.RedeliveryNamespace). Defaults to "": no
	// button, as the console cannot tell where an engine reads them.
	RedeliveryNamespace string
}

// Server is the console's HTTP handler.
type Server struct {
	opts    Options
	client  client.Client
	catalog *catalog
	auth    *authorizer
	pages   *http.ServeMux
	mux     *http.ServeMux
	tmpl    map[string]*template.Template
	logs    transitionLogs
}

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// New returns a console server.
func New(opts Options) (*Server, error) {
	if opts.Archive == nil || opts.Config == nil {
		return nil, errors.New("console: Archive and Config are required")
	}
	if opts.CacheTTL == 0 {
		opts.CacheTTL = 2 * time.Second
	}
	if opts.LiveInterval == 0 {
		opts.LiveInterval = time.Second
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(opts.Config)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "opkit-console"
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	s := &Server{
		opts:    opts,
		client:  c,
		catalog: &catalog{client: c, states: opts.Archive, defs: opts.Definitions, ttl: opts.CacheTTL},
		auth:    &authorizer{auth: opts.Auth, client: c, secret: secret},
	}
	if s.tmpl, err = parseTemplates(); err != nil {
		return nil, err
	}
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	p := http.NewServeMux()
	p.HandleFunc("GET /{$}", s.page(s.overview))
	p.HandleFunc("GET /failures", s.page(s.failures))
	p.HandleFunc("GET /operators/{operator}", s.page(s.operatorPage))
	p.HandleFunc("GET /operators/{operator}/objects/{namespace}/{name}", s.page(s.timeline))
	p.HandleFunc("GET /operators/{operator}/objects/{namespace}/{name}/why", s.page(s.whyPage))
	p.HandleFunc("GET /runs/{id}", s.page(s.runPage))
	p.HandleFunc("GET /events", s.page(s.eventsPage))
	p.HandleFunc("GET /events/{id}", s.page(s.deliveryPage))
	p.HandleFunc("GET /operators/{operator}/sources/{source}", s.page(s.sourcePage))
	s.pages = p

	m := http.NewServeMux()
	m.Handle("GET /", p)
	m.HandleFunc("GET /runs/{id}/log", s.rawLog)
	m.HandleFunc("GET /live", s.live)
	m.HandleFunc("POST /operators/{operator}/objects/{namespace}/{name}/{action}", s.act)
	m.HandleFunc("POST /operators/{operator}/rollouts/{rollout}/{action}", s.requestRollout)
	m.HandleFunc("POST /runs/{id}/rerun", s.rerun)
	m.HandleFunc("POST /events/{id}/redeliver", s.redeliver)
	m.HandleFunc("GET /login", s.loginPage)
	m.HandleFunc("POST /login", s.login)
	m.HandleFunc("POST /logout", s.logout)
	static, _ := fs.Sub(staticFiles, "static")
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux = m
}

// ServeHTTP serves the console.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
	s.mux.ServeHTTP(w, r)
}

// Listen binds addr for Serve. Without Auth, addr must be a loopback
// address.
func (s *Server) Listen(addr string) (net.Listener, error) {
	if !s.opts.Auth.enabled() && !IsLoopback(addr) {
		return nil, fmt.Errorf("console: %s is not a loopback address: serving it needs auth (a token, or Kubernetes TokenReview)", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	return ln, nil
}

// Serve serves the console on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	// Requests' contexts end with ctx, and so do live streams.
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("console: %w", err)
	}
	return nil
}

// view is what every page template gets.
type view struct {
	Title   string
	Nav     string // the nav entry that is current
	Crumbs  []crumb
	Notices []string
	User    string
	CSRF    string
	// Live is the path /live streams this page's live part for; "" for a
	// page that does not change.
	Live string
	Data any
}

type crumb struct{ Label, URL string }

// httpError is an error with the status it answers.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func notFound(format string, args ...any) error {
	return &httpError{http.StatusNotFound, fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

func forbidden(format string, args ...any) error {
	return &httpError{http.StatusForbidden, fmt.Sprintf(format, args...)}
}

// pageFunc builds a page: its template and view.
type pageFunc func(r *http.Request, u *user) (string, *view, error)

// fragmentHeader asks a page for its live part only (what /live streams).
const fragmentHeader = "X-Opkit-Fragment"

func (s *Server) page(build pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u, err := s.auth.authenticate(r.Context(), r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		name, v, err := build(r, u)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		v.User, v.CSRF = u.Name, s.auth.csrf(u)
		if s.opts.Standby != nil {
			if why := s.opts.Standby(); why != "" {
				v.Notices = append([]string{why}, v.Notices...)
			}
		}
		var buf bytes.Buffer
		block := "layout"
		if r.Header.Get(fragmentHeader) != "" {
			block = "live"
		}
		if err := s.tmpl[name].ExecuteTemplate(&buf, block, v); err != nil {
			http.Error(w, "rendering the page: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(buf.Bytes())
	}
}

// fail answers an error with a page that says what is wrong.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	var he *httpError
	switch {
	case errors.Is(err, errForbidden):
		status, err = http.StatusForbidden, errors.New("a valid token is needed: sign in, or send Authorization: Bearer TOKEN")
	case errors.As(err, &he):
		status = he.status
	case errors.Is(err, archive.ErrNotFound):
		status = http.StatusNotFound
	}
	v := &view{Title: http.StatusText(status), Notices: []string{err.Error()}}
	if status == http.StatusForbidden && s.opts.Auth.enabled() {
		v.Data = "login"
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = s.tmpl["error"].ExecuteTemplate(w, "layout", v)
}

// fragment renders the live part of the page at path for the request's
// user, as /live streams it.
func (s *Server) fragment(r *http.Request, path string) ([]byte, int) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, path, nil)
	if err != nil || !strings.HasPrefix(path, "/") {
		return nil, http.StatusBadRequest
	}
	req.Header = r.Header.Clone()
	req.Header.Set(fragmentHeader, "1")
	if _, pattern := s.pages.Handler(req); pattern == "" {
		return nil, http.StatusNotFound
	}
	// Served through the mux, which sets the path's values (Handler alone
	// does not: the page would see no operator, object or run).
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	s.pages.ServeHTTP(rec, req)
	return rec.body.Bytes(), rec.status
}

// recorder is a ResponseWriter that keeps what is written.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(p []byte) (int, error) { return r.body.Write(p) }
func (r *recorder) WriteHeader(status int)      { r.status = status }

// live streams the live part of a page whenever it changes.
func (s *Server) live(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Query().Get("path")
	first, status := s.fragment(r, path)
	if status != http.StatusOK {
		http.Error(w, http.StatusText(status), status)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, "retry: 2000\n\n")
	flusher.Flush()
	last, wrote := first, time.Now()
	tick := time.NewTicker(s.opts.LiveInterval)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
		body, status := s.fragment(r, path)
		if status != http.StatusOK {
			return // gone or no longer allowed: the client reconnects and sees why
		}
		if bytes.Equal(body, last) {
			if time.Since(wrote) >= 15*time.Second {
				wrote = time.Now()
				_, _ = io.WriteString(w, ": keep-alive\n\n")
				flusher.Flush()
			}
			continue
		}
		last, wrote = body, time.Now()
		var ev bytes.Buffer
		ev.WriteString("event: live\n")
		for line := range bytes.SplitSeq(body, []byte("\n")) {
			ev.WriteString("data: ")
			ev.Write(line)
			ev.WriteByte('\n')
		}
		ev.WriteByte('\n')
		if _, err := w.Write(ev.Bytes()); err != nil {
			return
		}
		flusher.Flush()
	}
}

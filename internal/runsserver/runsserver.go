// Package runsserver serves a run archive as the aggregated API
// runs.opkit.dev/v1alpha1: package runsapi's handler behind package
// aggregate's HTTPS server, registered with an APIService. It is the one
// assembly of the engine (Options.RunsAPI, every replica) and of opkit
// console (an archive without an engine).
//
// # Who may read
//
// Only the API server's front proxy may call. A request must bear the
// client certificate the API server publishes the CA of
// (kube-system/extension-apiserver-authentication, read again every
// Options.RequestHeaderEvery, since it rotates); one without it is refused
// 401, whatever X-Remote-User header it sends, since anyone who reaches
// the port could send one. The user the front proxy names is then
// authorized by a SubjectAccessReview per request (user, groups, extra,
// verb, namespace, group runs.opkit.dev, resource runs or deliveries,
// subresource log), its answer kept Options.AuthorizationTTL for the same
// user and attributes. Discovery (/apis, /apis/runs.opkit.dev[/v1alpha1])
// is served to any user the front proxy names without a review: the API
// server authorized that user for the path before proxying it, the
// aggregator fetches it itself (as system:kube-aggregator) for its
// availability check and its discovery, and the documents say what the
// API is, not what the archive holds; a review there would be one more
// call to the API server for each of kubectl's discovery requests, to
// learn what the API server already decided.
//
// # Flow
//
//  1. [New] checks the options, binds the listener and makes the handler;
//     nothing is served or registered yet.
//  2. [Server.Start] reads the front proxy's CA (and again every
//     RequestHeaderEvery), takes or makes the serving certificate, applies
//     the APIService with its CA bundle (and the ExternalName Service, for
//     a server outside the cluster), and serves until its context ends.
//  3. As Start returns, a server with an ExternalName removes the
//     APIService and the Service, since nothing serves there after it: a
//     stale APIService makes every kubectl api-resources print an error
//     for the group. One without (the Service is the installation's, in
//     front of several replicas) leaves them to the others and the next
//     start.
//
// # Caveats
//
//   - The user of the rest.Config needs what the API server's delegation
//     needs: read the ConfigMap above (Role
//     extension-apiserver-authentication-reader), create
//     SubjectAccessReviews (ClusterRole system:auth-delegator), read and
//     write the certificate's Secret, and apply the APIService (and the
//     ExternalName Service).
//   - A process killed (not stopped) leaves its APIService: the API server
//     then reports it unavailable and keeps serving everything else.
package runsserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	runsv1alpha1 "github.com/opkit-dev/opkit/api/runs/v1alpha1"
	"github.com/opkit-dev/opkit/internal/aggregate"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/runsapi"
	"github.com/opkit-dev/opkit/internal/webhook"
)

// Name is the name of the runs API's APIService, v1alpha1.runs.opkit.dev.
const Name = runsv1alpha1.Version + "." + runsv1alpha1.Group

// Options configures [New].
type Options struct {
	// Addr is the address to listen on, e.g. 127.0.0.1:0 (port 0: any
	// free one, see Server.Addr). Required.
	Addr string
	// Service is the Service the APIService points at: in the cluster, the
	// one in front of the engine's Pods (the manifests'); for a server
	// outside it, the ExternalName Service the server applies. Required.
	Service types.NamespacedName
	// Port is Service's port. Defaults to 443; with ExternalName it is the
	// port the server listens on.
	Port int32
	// ExternalName, when set, makes the server apply Service as a Service
	// of type ExternalName pointing at this host, where the API server
	// reaches the server: "127.0.0.1" on the local plane. Such a server
	// removes the APIService and the Service when it stops (see the
	// package doc). Defaults to "": the Service is the installation's.
	ExternalName string
	// Namespace is where the runs of objects without a namespace and every
	// delivery are served (runsapi.Options.Namespace): the engine's.
	// Defaults to Service's namespace.
	Namespace string
	// Secret names the Secret of the serving certificate and its CA, in
	// Service's namespace. Defaults to <Service's name>-tls.
	Secret string
	// Archive is what is served. Required (the engine defaults it to its
	// own archive).
	Archive archive.Reader
	// RequestHeaderEvery is how often the front proxy's CA is read again.
	// Defaults to 1m.
	RequestHeaderEvery time.Duration
	// AuthorizationTTL is how long a SubjectAccessReview's answer is kept
	// for the same user and request attributes. Defaults to 5s.
	AuthorizationTTL time.Duration
	// AuthorizationCacheSize bounds the answers kept. Defaults to 1024.
	AuthorizationCacheSize int
	// PollInterval is how often watches and followed logs read the archive
	// (runsapi.Options.PollInterval). Defaults to runsapi's, 1s.
	PollInterval time.Duration
}

// Server is the runs API's server (see the package doc). Start it once.
type Server struct {
	api       aggregate.API
	registrar *aggregate.Registrar
	server    *webhook.Server
	header    *aggregate.CurrentRequestHeader
	log       logr.Logger
}

// New checks opts and makes the server, which talks to the API server of
// cfg and logs to log; it binds the listener, and serves nothing before
// Start.
func New(cfg *rest.Config, opts Options, log logr.Logger) (*Server, error) {
	if opts.Addr == "" {
		return nil, errors.New("runsserver: Options.Addr is required")
	}
	if opts.Service.Namespace == "" || opts.Service.Name == "" {
		return nil, fmt.Errorf("runsserver: Options.Service %q: want a namespace and a name", opts.Service)
	}
	if opts.Archive == nil {
		return nil, errors.New("runsserver: Options.Archive is required: the archive to serve")
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("runsserver: %w", err)
	}
	ns := opts.Namespace
	if ns == "" {
		ns = opts.Service.Namespace
	}
	api := aggregate.API{
		Group: runsv1alpha1.Group, Version: runsv1alpha1.Version,
		Service: opts.Service, Port: opts.Port, ExternalName: opts.ExternalName,
	}
	if api.Port == 0 && api.ExternalName == "" {
		api.Port = 443
	}
	registrar, err := aggregate.NewRegistrar(cfg)
	if err != nil {
		return nil, err
	}
	var secret types.NamespacedName
	if opts.Secret != "" {
		secret = types.NamespacedName{Namespace: opts.Service.Namespace, Name: opts.Secret}
	}
	srv, err := aggregate.NewServer(aggregate.ServerOptions{
		API: api, Registrar: registrar, Addr: opts.Addr, Secret: secret, Secrets: cs.CoreV1(), Log: log,
	})
	if err != nil {
		return nil, fmt.Errorf("runsserver: %w", err)
	}
	header := aggregate.NewCurrentRequestHeader(cs, opts.RequestHeaderEvery)
	reviews := aggregate.NewSubjectAccessReviews(cs, aggregate.SubjectAccessReviewsOptions{TTL: opts.AuthorizationTTL, Size: opts.AuthorizationCacheSize})
	h, err := runsapi.New(runsapi.Options{
		Archive: opts.Archive, Namespace: ns, PollInterval: opts.PollInterval,
		Authenticator: runsapi.AuthenticatorFunc(func(r *http.Request) (*runsapi.User, bool, error) {
			u, err := header.Authenticate(r)
			switch {
			case errors.Is(err, aggregate.ErrNoRequestHeader):
				return nil, false, err // 500: the server cannot check anyone yet
			case err != nil:
				return nil, false, nil // 401: not the front proxy, or no user
			}
			return &runsapi.User{Name: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra}, true, nil
		}),
		Authorizer: runsapi.AuthorizerFunc(func(ctx context.Context, a runsapi.Attributes) (bool, string, error) {
			if a.Resource == "" {
				return true, "", nil // discovery: see the package doc
			}
			return reviews.Authorize(ctx, aggregate.Attributes{
				User:      aggregate.User{Name: a.User.Name, UID: a.User.UID, Groups: a.User.Groups, Extra: a.User.Extra},
				Verb:      a.Verb,
				Namespace: a.Namespace, Group: runsv1alpha1.Group, Version: runsv1alpha1.Version,
				Resource: a.Resource, Subresource: a.Subresource, Name: a.Name,
			})
		}),
	})
	if err != nil {
		return nil, fmt.Errorf("runsserver: %w", err)
	}
	srv.Handle("/", h)
	return &Server{api: api, registrar: registrar, server: srv, header: header, log: log}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.server.Addr() }

// NeedLeaderElection is false: every replica serves, leader or standby,
// as they all read the shared archive.
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves until ctx ends (see the package doc's flow), then, with
// Options.ExternalName, removes the APIService and its Service. Its error
// is the server's failure to serve.
func (s *Server) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = s.header.Run(ctx, func(err error) {
			s.log.Error(err, "reading the API server's front-proxy CA; requests keep being checked against the last one read")
		})
	})
	err := s.server.Start(ctx)
	cancel()
	wg.Wait()
	s.unregister(ctx)
	return err
}

// unregister removes the APIService of a server outside the cluster
// (Options.ExternalName) as it stops.
func (s *Server) unregister(ctx context.Context) {
	if s.api.ExternalName == "" {
		return
	}
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.registrar.Unregister(stop, s.api); err != nil {
		s.log.Error(err, "removing the runs API's APIService as the server stops; remove it by hand", "apiservice", s.api.Name(),
			"command", "kubectl delete apiservice "+s.api.Name())
	}
}

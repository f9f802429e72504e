package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/types"

	runsv1alpha1 "github.com/opkit-dev/opkit/api/runs/v1alpha1"
	"github.com/opkit-dev/opkit/internal/aggregate"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/runsapi"
	"github.com/opkit-dev/opkit/internal/webhook"
)

// The runs API: with Options.RunsAPI the engine serves its archive as
// runs.opkit.dev/v1alpha1 (package runsapi) to the API server's
// aggregation layer, so that kubectl get runs, kubectl get --raw
// .../runs/ID/log and k9s read it (package aggregate registers the
// APIService v1alpha1.runs.opkit.dev and keeps its caBundle current as the
// serving certificate rotates).
//
// Every replica serves it, leader or standby: they all read the shared
// archive, and the Service in front of them may pick any.
//
// Who may read: only the API server's front proxy may call. A request
// must bear the client certificate the API server publishes the CA of
// (kube-system/extension-apiserver-authentication, read again every
// RequestHeaderEvery, since it rotates); one without it is refused 401,
// whatever X-Remote-User header it sends, since anyone who reaches the
// port could send one. The user the front proxy names is then authorized
// by a SubjectAccessReview per request (user, groups, extra, verb,
// namespace, group runs.opkit.dev, resource runs or deliveries,
// subresource log), its answer kept AuthorizationTTL for the same user and
// attributes. Discovery (/apis, /apis/runs.opkit.dev[/v1alpha1]) is
// served to any user the front proxy names without a review: the API
// server authorized that user for the path before proxying it, the
// aggregator fetches it itself (as system:kube-aggregator) for its
// availability check and its discovery, and the documents say what the API
// is, not what the archive holds; a review there would be one more call to
// the API server for each of kubectl's discovery requests, to learn what
// the API server already decided.

// RunsAPIOptions configures the runs API the engine serves (see above).
type RunsAPIOptions struct {
	// Addr is the address to listen on, e.g. 127.0.0.1:0 (port 0: any
	// free one, see Engine.RunsAPIAddr). Required.
	Addr string
	// Service is the Service the APIService points at: in the cluster, the
	// one in front of the engine's Pods (the manifests'); for an engine
	// outside it, the ExternalName Service the engine applies. Required.
	Service types.NamespacedName
	// Port is Service's port. Defaults to 443; with ExternalName it is the
	// port the engine listens on.
	Port int32
	// ExternalName, when set, makes the engine apply Service as a Service
	// of type ExternalName pointing at this host, where the API server
	// reaches the engine: "127.0.0.1" on the local plane. Such an engine
	// removes the APIService and the Service when it stops, since nothing
	// serves there after it: a stale APIService makes every kubectl
	// api-resources print an error for the group. Defaults to "": the
	// Service is the installation's, and a replica that stops leaves the
	// APIService to the others and the next start.
	ExternalName string
	// Namespace is where the runs of objects without a namespace and every
	// delivery are served (runsapi.Options.Namespace): the engine's.
	// Defaults to Service's namespace.
	Namespace string
	// Secret names the Secret of the serving certificate and its CA, in
	// Service's namespace. Defaults to <Service's name>-tls.
	Secret string
	// Archive is what is served. Defaults to Options.Archive, which must
	// then read runs (an archive.Store does).
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

// runsAPI is the runs API's server and what it needs at its start and
// stop.
type runsAPI struct {
	api       aggregate.API
	registrar *aggregate.Registrar
	server    *webhook.Server
	header    *aggregate.CurrentRequestHeader
}

// newRunsAPI makes the runs API's server and adds it to the manager, to
// run on every replica.
func (e *Engine) newRunsAPI(store archive.Recorder) (*runsAPI, error) {
	o := e.opts.RunsAPI
	if o.Addr == "" {
		return nil, errors.New("engine: RunsAPIOptions.Addr is required")
	}
	if o.Service.Namespace == "" || o.Service.Name == "" {
		return nil, fmt.Errorf("engine: RunsAPIOptions.Service %q: want a namespace and a name", o.Service)
	}
	reader := o.Archive
	if reader == nil {
		r, ok := store.(archive.Reader)
		if !ok {
			return nil, errors.New("engine: RunsAPIOptions: the runs API serves the archive, and Options.Archive is none that reads runs (give RunsAPIOptions.Archive)")
		}
		reader = r
	}
	ns := o.Namespace
	if ns == "" {
		ns = o.Service.Namespace
	}
	api := aggregate.API{
		Group: runsv1alpha1.Group, Version: runsv1alpha1.Version,
		Service: o.Service, Port: o.Port, ExternalName: o.ExternalName,
	}
	if api.Port == 0 && api.ExternalName == "" {
		api.Port = 443
	}
	registrar, err := aggregate.NewRegistrar(e.opts.Config)
	if err != nil {
		return nil, err
	}
	var secret types.NamespacedName
	if o.Secret != "" {
		secret = types.NamespacedName{Namespace: o.Service.Namespace, Name: o.Secret}
	}
	srv, err := aggregate.NewServer(aggregate.ServerOptions{
		API: api, Registrar: registrar, Addr: o.Addr, Secret: secret, Secrets: e.clientset.CoreV1(),
		Log: e.mgr.GetLogger().WithName("runs-api"),
	})
	if err != nil {
		return nil, fmt.Errorf("engine: the runs API: %w", err)
	}
	header := aggregate.NewCurrentRequestHeader(e.clientset, o.RequestHeaderEvery)
	reviews := aggregate.NewSubjectAccessReviews(e.clientset, aggregate.SubjectAccessReviewsOptions{TTL: o.AuthorizationTTL, Size: o.AuthorizationCacheSize})
	h, err := runsapi.New(runsapi.Options{
		Archive: reader, Namespace: ns, PollInterval: o.PollInterval,
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
				return true, "", nil // discovery: see above
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
		return nil, fmt.Errorf("engine: the runs API: %w", err)
	}
	srv.Handle("/", h)
	if err := e.mgr.Add(srv); err != nil {
		return nil, err
	}
	log := e.mgr.GetLogger().WithName("runs-api")
	if err := e.mgr.Add(everyReplica(func(ctx context.Context) error {
		return header.Run(ctx, func(err error) {
			log.Error(err, "reading the API server's front-proxy CA; requests keep being checked against the last one read")
		})
	})); err != nil {
		return nil, err
	}
	return &runsAPI{api: api, registrar: registrar, server: srv, header: header}, nil
}

// RunsAPIAddr is the address the runs API listens on, or "".
func (e *Engine) RunsAPIAddr() string {
	if e.runsAPI == nil {
		return ""
	}
	return e.runsAPI.server.Addr()
}

// stopRunsAPI removes the APIService of an engine outside the cluster
// (RunsAPIOptions.ExternalName) as the engine stops.
func (e *Engine) stopRunsAPI(ctx context.Context) {
	if e.runsAPI == nil || e.runsAPI.api.ExternalName == "" {
		return
	}
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := e.runsAPI.registrar.Unregister(stop, e.runsAPI.api); err != nil {
		e.mgr.GetLogger().Error(err, "removing the runs API's APIService as the engine stops; remove it by hand", "apiservice", e.runsAPI.api.Name(),
			"command", "kubectl delete apiservice "+e.runsAPI.api.Name())
	}
}

// RunsAPIName is the name of the runs API's APIService.
const RunsAPIName = runsv1alpha1.Version + "." + runsv1alpha1.Group

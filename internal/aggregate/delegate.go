package aggregate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/opkit-dev/opkit/internal/sleep"
)

// ErrNoRequestHeader is returned (wrapped) by
// [CurrentRequestHeader.Authenticate] before the ConfigMap was ever read.
var ErrNoRequestHeader = errors.New("the API server's requestheader configuration is not read yet")

// CurrentRequestHeader is the RequestHeader kube-apiserver publishes,
// read again every period while Run runs: the front proxy's CA list
// changes when the API server's certificates rotate, and a server that
// kept its first read would refuse every request after. A read that fails
// keeps the last one that worked. Safe for concurrent use.
type CurrentRequestHeader struct {
	cs    kubernetes.Interface
	every time.Duration
	cur   atomic.Pointer[RequestHeader]
	err   atomic.Pointer[error] // the last read's error, nil after a good one
}

// NewCurrentRequestHeader returns a CurrentRequestHeader that reads with
// cs every period (defaults to a minute).
func NewCurrentRequestHeader(cs kubernetes.Interface, every time.Duration) *CurrentRequestHeader {
	if every <= 0 {
		every = time.Minute
	}
	return &CurrentRequestHeader{cs: cs, every: every}
}

// Read reads the ConfigMap now; on success the RequestHeader is the one
// Authenticate uses.
func (c *CurrentRequestHeader) Read(ctx context.Context) error {
	h, err := ReadRequestHeader(ctx, c.cs)
	if err != nil {
		c.err.Store(&err)
		return err
	}
	c.cur.Store(h)
	c.err.Store(nil)
	return nil
}

// Run reads the ConfigMap at once, then every period, until ctx ends;
// onErr (may be nil) is told of each failed read. It returns nil.
func (c *CurrentRequestHeader) Run(ctx context.Context, onErr func(error)) error {
	sleep.Poll(ctx, c.every, func() {
		if err := c.Read(ctx); err != nil && ctx.Err() == nil && onErr != nil {
			onErr(err)
		}
	})
	return nil
}

// Authenticate is RequestHeader.Authenticate with the last RequestHeader
// read; before any, its error wraps ErrNoRequestHeader and the last
// read's error.
func (c *CurrentRequestHeader) Authenticate(r *http.Request) (User, error) {
	h := c.cur.Load()
	if h == nil {
		if err := c.err.Load(); err != nil {
			return User{}, fmt.Errorf("%w: %w", ErrNoRequestHeader, *err)
		}
		return User{}, ErrNoRequestHeader
	}
	return h.Authenticate(r)
}

// Attributes are what a request asks, as a SubjectAccessReview names it:
// a resource request (Resource set) or a non-resource one (Path set).
type Attributes struct {
	User User
	// Verb is the API verb: get, list, watch...
	Verb string
	// Namespace is the request's; empty for every namespace.
	Namespace string
	// Group, Version, Resource, Subresource and Name are the resource's.
	Group, Version, Resource, Subresource, Name string
	// Path is a non-resource request's path.
	Path string
}

// SubjectAccessReviewsOptions configures [NewSubjectAccessReviews].
type SubjectAccessReviewsOptions struct {
	// TTL is how long an answer, allowed or refused, is reused for the
	// same user and attributes. Defaults to 5s: a RoleBinding removed
	// takes effect that much later, and kubectl get -w, which lists then
	// watches, asks once.
	TTL time.Duration
	// Size bounds the answers kept; past it the oldest goes. Defaults to
	// 1024.
	Size int
	// Clock times the answers kept. Defaults to the real clock.
	Clock clock.PassiveClock
}

// SubjectAccessReviews authorizes requests by asking the API server, one
// SubjectAccessReview per user and attributes, its answer kept for a few
// seconds (the delegated authorization of k8s.io/apiserver, which caches
// for 10s). The caller's user needs create on
// authorization.k8s.io subjectaccessreviews (the ClusterRole
// system:auth-delegator grants it). Safe for concurrent use.
type SubjectAccessReviews struct {
	cs   kubernetes.Interface
	opts SubjectAccessReviewsOptions

	mu    sync.Mutex
	kept  map[string]answer
	order []string // keys of kept, oldest first
}

type answer struct {
	allowed bool
	reason  string
	until   time.Time
}

// NewSubjectAccessReviews returns a SubjectAccessReviews that asks with
// cs.
func NewSubjectAccessReviews(cs kubernetes.Interface, opts SubjectAccessReviewsOptions) *SubjectAccessReviews {
	if opts.TTL <= 0 {
		opts.TTL = 5 * time.Second
	}
	if opts.Size <= 0 {
		opts.Size = 1024
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &SubjectAccessReviews{cs: cs, opts: opts, kept: map[string]answer{}}
}

// Authorize says whether a.User may do what a asks; reason is the API
// server's, for a user refused. An error is a failure to ask, which is
// not kept.
func (s *SubjectAccessReviews) Authorize(ctx context.Context, a Attributes) (allowed bool, reason string, err error) {
	a.User.Groups = slices.Clone(a.User.Groups)
	slices.Sort(a.User.Groups) // one key whatever the headers' order
	k, err := json.Marshal(a)  // map keys sorted: one key per value
	if err != nil {
		return false, "", err
	}
	key := string(k)
	now := s.opts.Clock.Now()
	s.mu.Lock()
	if got, ok := s.kept[key]; ok && now.Before(got.until) {
		s.mu.Unlock()
		return got.allowed, got.reason, nil
	}
	s.mu.Unlock()

	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: a.User.Name, UID: a.User.UID, Groups: a.User.Groups,
	}}
	if len(a.User.Extra) > 0 {
		review.Spec.Extra = map[string]authorizationv1.ExtraValue{}
		for k, v := range a.User.Extra {
			review.Spec.Extra[k] = v
		}
	}
	if a.Resource != "" {
		review.Spec.ResourceAttributes = &authorizationv1.ResourceAttributes{
			Namespace: a.Namespace, Verb: a.Verb, Group: a.Group, Version: a.Version,
			Resource: a.Resource, Subresource: a.Subresource, Name: a.Name,
		}
	} else {
		review.Spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: a.Path, Verb: a.Verb}
	}
	got, err := s.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("aggregate: asking the API server whether %q may %s: %w", a.User.Name, a.Verb, err)
	}
	reason = got.Status.Reason
	if got.Status.EvaluationError != "" && !got.Status.Allowed {
		reason = orText(reason, got.Status.EvaluationError)
	}
	s.keep(key, answer{allowed: got.Status.Allowed, reason: reason, until: now.Add(s.opts.TTL)})
	return got.Status.Allowed, reason, nil
}

// keep keeps an answer, dropping the oldest past Size.
func (s *SubjectAccessReviews) keep(key string, a answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.kept[key]; !ok {
		s.order = append(s.order, key)
	}
	s.kept[key] = a
	for len(s.order) > s.opts.Size {
		delete(s.kept, s.order[0])
		s.order = s.order[1:]
	}
}

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

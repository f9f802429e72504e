package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive"
)

// Auth says who may use a console that is not bound to loopback. The zero
// Auth admits everyone, and Serve allows it on loopback only.
type Auth struct {
	// Token, when set, must come with every request: as
	// "Authorization: Bearer TOKEN", or from the sign-in page, which keeps
	// it in an HttpOnly cookie.
	Token string
	// Kubernetes, when true, takes a Kubernetes bearer token instead,
	// checks it with a TokenReview, and each request with a
	// SubjectAccessReview: reading needs get on the operator's resource
	// (its custom resource, the kind it watches, or for operator-wide
	// schedules its Operator object), an action needs patch.
	Kubernetes bool
}

func (a Auth) enabled() bool { return a.Token != "" || a.Kubernetes }

// cookieName holds the token a browser signed in with.
const cookieName = "opkit_token"

// errForbidden is the answer to a missing or wrong credential, and to a
// user without the access a page or an action needs.
var errForbidden = errors.New("forbidden")

// user is who makes a request: with Kubernetes auth, as its TokenReview
// said.
type user struct {
	Name   string // "" when auth is off
	groups []string
	uid    string
	token  string
}

// authorizer answers who a request comes from and what they may do.
type authorizer struct {
	auth   Auth
	client client.Client
	secret []byte // keys the CSRF tokens

	mu      sync.Mutex
	reviews map[string]cached // by token hash, and by user and attributes
}

type cached struct {
	at      time.Time
	name    string
	groups  []string
	uid     string
	allowed bool
}

// A review is reused for a minute when it allowed, for 5 seconds when it
// denied: access just granted works soon after.
const (
	reviewTTL = time.Minute
	denialTTL = 5 * time.Second
)

func credential(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if tok, ok := strings.CutPrefix(h, "Bearer "); ok {
			return strings.TrimSpace(tok)
		}
		return ""
	}
	if c, err := r.Cookie(cookieName); err == nil {
		return c.Value
	}
	return ""
}

// authenticate returns the request's user, or errForbidden.
func (a *authorizer) authenticate(ctx context.Context, r *http.Request) (*user, error) {
	if !a.auth.enabled() {
		return &user{}, nil
	}
	return a.check(ctx, credential(r))
}

// check verifies a token.
func (a *authorizer) check(ctx context.Context, token string) (*user, error) {
	if token == "" {
		return nil, errForbidden
	}
	if !a.auth.Kubernetes {
		if subtle.ConstantTimeCompare([]byte(token), []byte(a.auth.Token)) != 1 {
			return nil, errForbidden
		}
		return &user{Name: "token", token: token}, nil
	}
	sum := sha256.Sum256([]byte(token))
	key := "token/" + hex.EncodeToString(sum[:])
	if c, ok := a.lookup(key); ok {
		if !c.allowed {
			return nil, errForbidden
		}
		return &user{Name: c.name, groups: c.groups, uid: c.uid, token: token}, nil
	}
	tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}
	if err := a.client.Create(ctx, tr); err != nil {
		return nil, fmt.Errorf("reviewing the token: %w", err)
	}
	c := cached{at: time.Now(), allowed: tr.Status.Authenticated, name: tr.Status.User.Username, groups: tr.Status.User.Groups, uid: tr.Status.User.UID}
	a.store(key, c)
	if !c.allowed {
		return nil, errForbidden
	}
	return &user{Name: c.name, groups: c.groups, uid: c.uid, token: token}, nil
}

// resource is what an access check is about: a resource of an API
// group, or one object of it by name.
type resource struct {
	Group, Resource, Name string
}

func (r resource) String() string {
	s := r.Resource
	if r.Group != "" {
		s += "." + r.Group
	}
	if r.Name != "" {
		s += " " + r.Name
	}
	return s
}

// allowed says whether the user may use verb on a resource in namespace
// ("" for every namespace, or a cluster-scoped resource).
func (a *authorizer) allowed(ctx context.Context, u *user, res resource, verb, namespace string) (bool, error) {
	if !a.auth.Kubernetes {
		return true, nil
	}
	key := strings.Join([]string{"sar", u.Name, res.Group, res.Resource, res.Name, verb, namespace}, "/")
	if c, ok := a.lookup(key); ok {
		return c.allowed, nil
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: u.Name, Groups: u.groups, UID: u.uid,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Group: res.Group, Resource: res.Resource, Name: res.Name, Verb: verb, Namespace: namespace},
	}}
	if err := a.client.Create(ctx, sar); err != nil {
		return false, fmt.Errorf("checking access: %w", err)
	}
	a.store(key, cached{at: time.Now(), allowed: sar.Status.Allowed})
	return sar.Status.Allowed, nil
}

func (a *authorizer) lookup(key string) (cached, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.reviews[key]
	ttl := reviewTTL
	if !c.allowed {
		ttl = denialTTL
	}
	if !ok || time.Since(c.at) > ttl {
		return cached{}, false
	}
	return c, true
}

func (a *authorizer) store(key string, c cached) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.reviews == nil || len(a.reviews) > 10_000 {
		a.reviews = map[string]cached{}
	}
	a.reviews[key] = c
}

// csrf is the token an action's form carries: bound to the user's
// credential, so that another site cannot forge it.
func (a *authorizer) csrf(u *user) string {
	m := hmac.New(sha256.New, a.secret)
	m.Write([]byte("csrf\x00" + u.token))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// formUser authenticates the user of a form's POST and checks its CSRF
// token; when either fails, the answer says why and ok is false.
func (s *Server) formUser(w http.ResponseWriter, r *http.Request) (u *user, ok bool) {
	u, err := s.auth.authenticate(r.Context(), r)
	if err != nil {
		s.fail(w, r, err)
		return nil, false
	}
	if err := s.auth.checkCSRF(r, u); err != nil {
		s.fail(w, r, forbidden("%s", err))
		return nil, false
	}
	return u, true
}

// formOn is formUser for a form posted on a record's page (a run's, a
// delivery's), with the record's id from the path: a path id that is not
// an archive id is not found, as its page would be, and what says so.
func (s *Server) formOn(w http.ResponseWriter, r *http.Request, what string) (u *user, id string, ok bool) {
	if u, ok = s.formUser(w, r); !ok {
		return nil, "", false
	}
	id = r.PathValue("id")
	if !archive.ValidID(id) {
		s.fail(w, r, notFound("%q is not %s", id, what))
		return nil, "", false
	}
	return u, id, true
}

// checkCSRF refuses a state-changing request from another origin, or
// without the user's CSRF token.
func (a *authorizer) checkCSRF(r *http.Request, u *user) error {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return fmt.Errorf("a %s request cannot act", site)
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		o, err := url.Parse(origin)
		if err != nil || o.Host != r.Host {
			return fmt.Errorf("origin %q is not this console's", origin)
		}
	}
	got := r.PostFormValue("csrf")
	if subtle.ConstantTimeCompare([]byte(got), []byte(a.csrf(u))) != 1 {
		return errors.New("the form's CSRF token is missing or stale: reload the page and try again")
	}
	return nil
}

// IsLoopback reports whether a listen address binds loopback only.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

package runsapi

import (
	"context"
	"net/http"
)

// User is who sent a request, as the API server that proxied it says
// (the requestheader X-Remote-User, -Group and -Extra- headers, their
// client certificate checked).
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// Authenticator says who sent a request. ok is false for a request that
// names no user the authenticator trusts (401); err for one it could not
// check (500).
type Authenticator interface {
	Authenticate(r *http.Request) (u *User, ok bool, err error)
}

// AuthenticatorFunc is an Authenticator as a function.
type AuthenticatorFunc func(r *http.Request) (*User, bool, error)

// Authenticate calls f.
func (f AuthenticatorFunc) Authenticate(r *http.Request) (*User, bool, error) { return f(r) }

var _ Authenticator = AuthenticatorFunc(nil)

// Attributes are what a request asks for, as a SubjectAccessReview names
// it: a resource request (Resource set) or a discovery request (Path
// set, Resource empty).
type Attributes struct {
	User *User
	// Verb is get, list or watch.
	Verb string
	// Namespace is the request's; empty for a list or watch in every
	// namespace.
	Namespace string
	// Resource is runs or deliveries, Subresource log or empty, Name the
	// object's for a get.
	Resource    string
	Subresource string
	Name        string
	// Path is a discovery request's path (/apis/runs.opkit.dev/v1alpha1).
	Path string
}

// Authorizer says whether a user may do what a request asks. reason is
// shown to a user refused (403); err is a failure to decide (500).
type Authorizer interface {
	Authorize(ctx context.Context, a Attributes) (allowed bool, reason string, err error)
}

// AuthorizerFunc is an Authorizer as a function.
type AuthorizerFunc func(ctx context.Context, a Attributes) (bool, string, error)

// Authorize calls f.
func (f AuthorizerFunc) Authorize(ctx context.Context, a Attributes) (bool, string, error) {
	return f(ctx, a)
}

var _ Authorizer = AuthorizerFunc(nil)

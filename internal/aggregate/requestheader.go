package aggregate

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The ConfigMap where kube-apiserver publishes how it authenticates to
// aggregated API servers, and its keys.
const (
	AuthConfigMapNamespace = "kube-system"
	AuthConfigMapName      = "extension-apiserver-authentication"

	keyClientCA      = "requestheader-client-ca-file"
	keyAllowedNames  = "requestheader-allowed-names"
	keyUserHeaders   = "requestheader-username-headers"
	keyUIDHeaders    = "requestheader-uid-headers"
	keyGroupHeaders  = "requestheader-group-headers"
	keyExtraPrefixes = "requestheader-extra-headers-prefix"
)

// RequestHeader is how the API server proxies a user's request to an
// aggregated API server: it presents a client certificate signed by
// ClientCA, whose common name is one of AllowedNames, and names the user
// in headers.
type RequestHeader struct {
	// ClientCA is the PEM of the CAs the front proxy's certificate is
	// signed by.
	ClientCA []byte
	// AllowedNames are the common names the front proxy's certificate may
	// have; empty allows any certificate ClientCA signs.
	AllowedNames []string
	// UsernameHeaders, UIDHeaders and GroupHeaders name the user; the
	// first username header present is the user's name.
	UsernameHeaders, UIDHeaders, GroupHeaders []string
	// ExtraHeaderPrefixes prefix the headers of the user's extra
	// attributes.
	ExtraHeaderPrefixes []string

	roots *x509.CertPool
}

// ReadRequestHeader reads what kube-apiserver publishes in
// kube-system/extension-apiserver-authentication, as a real aggregated
// API server does. The reader needs the Role
// extension-apiserver-authentication-reader in kube-system.
func ReadRequestHeader(ctx context.Context, cs kubernetes.Interface) (*RequestHeader, error) {
	cm, err := cs.CoreV1().ConfigMaps(AuthConfigMapNamespace).Get(ctx, AuthConfigMapName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("aggregate: reading ConfigMap %s/%s: %w", AuthConfigMapNamespace, AuthConfigMapName, err)
	}
	where := AuthConfigMapNamespace + "/" + AuthConfigMapName
	h := &RequestHeader{ClientCA: []byte(cm.Data[keyClientCA])}
	if len(h.ClientCA) == 0 {
		return nil, fmt.Errorf("aggregate: ConfigMap %s has no %s: kube-apiserver runs without --requestheader-client-ca-file, so the aggregation layer is not configured", where, keyClientCA)
	}
	h.roots = x509.NewCertPool()
	if !h.roots.AppendCertsFromPEM(h.ClientCA) {
		return nil, fmt.Errorf("aggregate: ConfigMap %s: %s holds no PEM certificate", where, keyClientCA)
	}
	for key, into := range map[string]*[]string{
		keyAllowedNames: &h.AllowedNames, keyUserHeaders: &h.UsernameHeaders, keyUIDHeaders: &h.UIDHeaders,
		keyGroupHeaders: &h.GroupHeaders, keyExtraPrefixes: &h.ExtraHeaderPrefixes,
	} {
		if v := cm.Data[key]; v != "" {
			if err := json.Unmarshal([]byte(v), into); err != nil {
				return nil, fmt.Errorf("aggregate: ConfigMap %s: %s = %q is not a JSON list of strings: %w", where, key, v, err)
			}
		}
	}
	if len(h.UsernameHeaders) == 0 {
		return nil, fmt.Errorf("aggregate: ConfigMap %s has no %s", where, keyUserHeaders)
	}
	return h, nil
}

// User is the user a request was proxied for.
type User struct {
	Name   string
	UID    string
	Groups []string
	// Extra are the user's extra attributes, by key in lower case.
	Extra map[string][]string
}

// ErrNotFrontProxy is returned (wrapped) by Authenticate for a request
// that does not come from the front proxy: its headers are not to be
// believed.
var ErrNotFrontProxy = errors.New("the request does not come from the API server's front proxy")

// Authenticate returns the user the API server proxied r for. r must
// bear a client certificate that verifies against ClientCA for client
// authentication and has one of AllowedNames as its common name (the
// server asks for certificates: webhook.Options.ClientCerts); otherwise
// the error wraps ErrNotFrontProxy, and the request is to be
// authenticated otherwise (a bearer token, by TokenReview) or refused.
func (h *RequestHeader) Authenticate(r *http.Request) (User, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return User{}, fmt.Errorf("%w: no client certificate", ErrNotFrontProxy)
	}
	roots := h.roots
	if roots == nil { // a RequestHeader made by hand, not by ReadRequestHeader
		roots = x509.NewCertPool()
		roots.AppendCertsFromPEM(h.ClientCA)
	}
	leaf := r.TLS.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range r.TLS.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return User{}, fmt.Errorf("%w: client certificate %q: %w", ErrNotFrontProxy, leaf.Subject.CommonName, err)
	}
	if len(h.AllowedNames) > 0 && !slices.Contains(h.AllowedNames, leaf.Subject.CommonName) {
		return User{}, fmt.Errorf("%w: client certificate %q is not one of %v", ErrNotFrontProxy, leaf.Subject.CommonName, h.AllowedNames)
	}
	u := User{}
	for _, name := range h.UsernameHeaders {
		if u.Name = r.Header.Get(name); u.Name != "" {
			break
		}
	}
	if u.Name == "" {
		return User{}, fmt.Errorf("the front proxy named no user in %v", h.UsernameHeaders)
	}
	for _, name := range h.UIDHeaders {
		if u.UID = r.Header.Get(name); u.UID != "" {
			break
		}
	}
	for _, name := range h.GroupHeaders {
		u.Groups = append(u.Groups, r.Header.Values(name)...)
	}
	for name, values := range r.Header {
		for _, prefix := range h.ExtraHeaderPrefixes {
			key, ok := cutPrefixFold(name, prefix)
			if !ok {
				continue
			}
			// The API server escapes the key: read it as k8s.io/apiserver's
			// headerrequest does, lower case, then unescaped.
			key = strings.ToLower(key)
			if k, err := url.PathUnescape(key); err == nil {
				key = k
			}
			if u.Extra == nil {
				u.Extra = map[string][]string{}
			}
			u.Extra[key] = append(u.Extra[key], values...)
		}
	}
	return u, nil
}

// cutPrefixFold is strings.CutPrefix without regard to case, as header
// names are.
func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return s, false
	}
	return s[len(prefix):], true
}

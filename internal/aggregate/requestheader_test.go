package aggregate_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/aggregate"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return testCA{cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca testCA) issue(t *testing.T, cn string, usage x509.ExtKeyUsage) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert
}

func TestAuthenticateBelievesTheHeadersOfTheFrontProxyAlone(t *testing.T) {
	proxyCA, otherCA := newTestCA(t), newTestCA(t)
	h := &aggregate.RequestHeader{
		ClientCA: proxyCA.pem, AllowedNames: []string{"front-proxy-client"},
		UsernameHeaders: []string{"X-Remote-User"}, UIDHeaders: []string{"X-Remote-Uid"},
		GroupHeaders: []string{"X-Remote-Group"}, ExtraHeaderPrefixes: []string{"X-Remote-Extra-"},
	}
	request := func(cert *x509.Certificate) *http.Request {
		r, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://x/apis", nil)
		r.Header.Set("X-Remote-User", "alice")
		r.Header.Set("X-Remote-Uid", "42")
		r.Header.Add("X-Remote-Group", "devs")
		r.Header.Add("X-Remote-Group", "system:authenticated")
		r.Header.Add("X-Remote-Extra-Scopes%2fa", "one")
		r.Header.Add("X-Remote-Extra-Scopes%2fa", "two")
		r.TLS = &tls.ConnectionState{}
		if cert != nil {
			r.TLS.PeerCertificates = []*x509.Certificate{cert}
		}
		return r
	}
	u, err := h.Authenticate(request(proxyCA.issue(t, "front-proxy-client", x509.ExtKeyUsageClientAuth)))
	if err != nil {
		t.Fatalf("the front proxy's request: %v", err)
	}
	if u.Name != "alice" || u.UID != "42" || !slices.Equal(u.Groups, []string{"devs", "system:authenticated"}) ||
		!slices.Equal(u.Extra["scopes/a"], []string{"one", "two"}) {
		t.Errorf("user = %+v, want alice (42) in devs and system:authenticated with extra scopes/a=[one two]", u)
	}
	for _, tc := range []struct {
		name string
		cert *x509.Certificate
	}{
		{"no certificate", nil},
		{"another CA's certificate", otherCA.issue(t, "front-proxy-client", x509.ExtKeyUsageClientAuth)},
		{"a name not allowed", proxyCA.issue(t, "someone-else", x509.ExtKeyUsageClientAuth)},
		{"a serving certificate", proxyCA.issue(t, "front-proxy-client", x509.ExtKeyUsageServerAuth)},
	} {
		if _, err := h.Authenticate(request(tc.cert)); !errors.Is(err, aggregate.ErrNotFrontProxy) {
			t.Errorf("%s: Authenticate = %v, want ErrNotFrontProxy", tc.name, err)
		}
	}
}

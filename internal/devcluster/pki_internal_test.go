package devcluster

import (
	"bytes"
	"crypto/x509"
	"os"
	"testing"
)

// verifyClient reports whether the client certificate name verifies
// against the CA caName.
func verifyClient(t *testing.T, p pki, name, caName string) error {
	t.Helper()
	cert, _, err := loadPair(p.cert(name), p.key(name))
	if err != nil {
		t.Fatal(err)
	}
	ca, _, err := loadPair(p.cert(caName), p.key(caName))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	_, err = cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err
}

func TestFrontProxyClientIsSignedByItsOwnCAOnly(t *testing.T) {
	p := pki{dir: t.TempDir()}
	if err := p.ensure(); err != nil {
		t.Fatal(err)
	}
	if err := verifyClient(t, p, "front-proxy-client", "front-proxy-ca"); err != nil {
		t.Errorf("front-proxy-client does not verify against front-proxy-ca: %v", err)
	}
	if err := verifyClient(t, p, "front-proxy-client", "ca"); err == nil {
		t.Error("front-proxy-client verifies against the main CA; it must not pass for a user")
	}
	if err := verifyClient(t, p, "admin", "front-proxy-ca"); err == nil {
		t.Error("the admin's certificate verifies against front-proxy-ca; it could pass for the front proxy")
	}
	cert, _, err := loadPair(p.cert("front-proxy-client"), p.key("front-proxy-client"))
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != frontProxyClientCN {
		t.Errorf("front-proxy-client's CN = %q, want %q", cert.Subject.CommonName, frontProxyClientCN)
	}
}

func TestPKIMadeBeforeTheFrontProxyGetsItAndKeepsItsCA(t *testing.T) {
	p := pki{dir: t.TempDir()}
	if err := p.ensure(); err != nil {
		t.Fatal(err)
	}
	// A data directory made before the aggregation layer was configured.
	for _, name := range []string{"front-proxy-ca", "front-proxy-client"} {
		if err := os.Remove(p.cert(name)); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(p.key(name)); err != nil {
			t.Fatal(err)
		}
	}
	read := func(f string) []byte {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ca, admin := read(p.cert("ca")), read(p.cert("admin"))
	if err := p.ensure(); err != nil {
		t.Fatal(err)
	}
	if err := verifyClient(t, p, "front-proxy-client", "front-proxy-ca"); err != nil {
		t.Errorf("front-proxy-client after the upgrade: %v", err)
	}
	if !bytes.Equal(read(p.cert("ca")), ca) || !bytes.Equal(read(p.cert("admin")), admin) {
		t.Error("the upgrade replaced the main CA or the admin's certificate; kubeconfigs made before would stop working")
	}
}

func TestANewCAReissuesTheCertificatesItSigns(t *testing.T) {
	p := pki{dir: t.TempDir()}
	if err := p.ensure(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p.key("front-proxy-ca")); err != nil {
		t.Fatal(err)
	}
	if err := p.ensure(); err != nil {
		t.Fatal(err)
	}
	if err := verifyClient(t, p, "front-proxy-client", "front-proxy-ca"); err != nil {
		t.Errorf("front-proxy-client after its CA was made anew: %v", err)
	}
}

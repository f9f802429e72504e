package devcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/opkit-dev/opkit/internal/devcluster/devnode"
)

// pki holds the file paths of the plane's certificates and keys, all under
// one directory. The CA is created once per data directory and reused, so a
// kept data directory keeps its kubeconfig valid across restarts.
type pki struct {
	dir string
}

// certSpec describes one certificate signed by the plane's CA.
type certSpec struct {
	name   string // file base name: <name>.crt and <name>.key
	cn     string
	orgs   []string
	server bool // serving certificate for loopback names
	client bool
}

// The certificates the plane uses.
var planeCerts = []certSpec{
	{name: "etcd-server", cn: "etcd", server: true, client: true},
	{name: "apiserver-etcd-client", cn: "kube-apiserver-etcd-client", client: true},
	{name: "apiserver", cn: "kube-apiserver", server: true},
	{name: "loopback-serving", cn: "localhost", server: true},
	{name: "admin", cn: "opkit-admin", orgs: []string{"system:masters"}, client: true},
	{name: "controller-manager", cn: "system:kube-controller-manager", client: true},
	{name: "scheduler", cn: "system:kube-scheduler", client: true},
	{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", client: true},
	{name: "dev-node", cn: "system:node:" + devnode.DefaultName, orgs: []string{"system:nodes"}, client: true},
}

func (p pki) path(name string) string { return filepath.Join(p.dir, name) }
func (p pki) cert(name string) string { return p.path(name + ".crt") }
func (p pki) key(name string) string  { return p.path(name + ".key") }

// ensure creates the CA, the certificates and the service-account key pair
// where they do not exist yet.
func (p pki) ensure() error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	ca, caKey, err := p.ensureCA()
	if err != nil {
		return err
	}
	for _, spec := range planeCerts {
		if fileExists(p.cert(spec.name)) && fileExists(p.key(spec.name)) {
			continue
		}
		if err := p.issue(spec, ca, caKey); err != nil {
			return fmt.Errorf("issuing %s certificate: %w", spec.name, err)
		}
	}
	if !fileExists(p.path("sa.key")) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		if err := writeKey(p.path("sa.key"), key); err != nil {
			return err
		}
		pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
		if err != nil {
			return err
		}
		if err := writePEM(p.path("sa.pub"), "PUBLIC KEY", pub, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (p pki) ensureCA() (*x509.Certificate, crypto.Signer, error) {
	if fileExists(p.cert("ca")) && fileExists(p.key("ca")) {
		return loadPair(p.cert("ca"), p.key("ca"))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "opkit-devcluster-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	if err := writeKey(p.key("ca"), key); err != nil {
		return nil, nil, err
	}
	if err := writePEM(p.cert("ca"), "CERTIFICATE", der, 0o644); err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func (p pki) issue(spec certSpec, ca *x509.Certificate, caKey crypto.Signer) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: spec.cn, Organization: spec.orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if spec.server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(serviceIP)}
		tmpl.DNSNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	}
	if spec.client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writeKey(p.key(spec.name), key); err != nil {
		return err
	}
	return writePEM(p.cert(spec.name), "CERTIFICATE", der, 0o644)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return n
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, perm os.FileMode) error {
	return writeFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), perm)
}

func loadPair(certPath, keyPath string) (*x509.Certificate, crypto.Signer, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("%s or %s holds no PEM block", certPath, keyPath)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing %s: %w", certPath, err)
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing %s: %w", keyPath, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, errors.New(keyPath + " is not a signing key")
	}
	return cert, signer, nil
}

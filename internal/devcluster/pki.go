package devcluster

import (
	"cmp"
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
// one directory. The CAs are created once per data directory and reused, so a
// kept data directory keeps its kubeconfig valid across restarts.
type pki struct {
	dir string
}

// caSpec describes one of the plane's CAs.
type caSpec struct {
	name string // file base name: <name>.crt and <name>.key
	cn   string
}

// The plane's CAs: "ca" signs every identity and serving certificate;
// "front-proxy-ca" signs only the client certificate kube-apiserver's
// aggregator presents to an aggregated API server, which trusts its
// X-Remote-User headers because of it. It is a CA of its own, as
// kubeadm's is: a certificate of the main CA must not be able to pass for
// the front proxy.
var planeCAs = []caSpec{
	{name: "ca", cn: "opkit-devcluster-ca"},
	{name: "front-proxy-ca", cn: "opkit-devcluster-front-proxy-ca"},
}

// certSpec describes one certificate signed by one of the plane's CAs.
type certSpec struct {
	name   string // file base name: <name>.crt and <name>.key
	ca     string // the signing CA's name; "" is "ca"
	cn     string
	orgs   []string
	server bool // serving certificate for loopback names
	client bool
}

// frontProxyClientCN is the front proxy's name, which kube-apiserver's
// --requestheader-allowed-names lists.
const frontProxyClientCN = "front-proxy-client"

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
	{name: "front-proxy-client", ca: "front-proxy-ca", cn: frontProxyClientCN, client: true},
}

func (p pki) path(name string) string { return filepath.Join(p.dir, name) }
func (p pki) cert(name string) string { return p.path(name + ".crt") }
func (p pki) key(name string) string  { return p.path(name + ".key") }

// ensure creates the CAs, the certificates and the service-account key
// pair where they do not exist yet: a data directory made before a CA or a
// certificate was added to the plane gets it at its next start. A CA made
// anew (its files were missing) reissues every certificate it signs, which
// would not verify against it otherwise.
func (p pki) ensure() error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	type signer struct {
		cert    *x509.Certificate
		key     crypto.Signer
		created bool
	}
	cas := map[string]signer{}
	for _, spec := range planeCAs {
		cert, key, created, err := p.ensureCA(spec)
		if err != nil {
			return fmt.Errorf("%s: %w", spec.name, err)
		}
		cas[spec.name] = signer{cert, key, created}
	}
	for _, spec := range planeCerts {
		ca := cas[cmp.Or(spec.ca, "ca")]
		if !ca.created && fileExists(p.cert(spec.name)) && fileExists(p.key(spec.name)) {
			continue
		}
		if err := p.issue(spec, ca.cert, ca.key); err != nil {
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

// ensureCA loads the CA spec names, or creates it (created is then true).
func (p pki) ensureCA(spec caSpec) (cert *x509.Certificate, key crypto.Signer, created bool, err error) {
	if fileExists(p.cert(spec.name)) && fileExists(p.key(spec.name)) {
		cert, key, err = loadPair(p.cert(spec.name), p.key(spec.name))
		return cert, key, false, err
	}
	cert, key, err = p.newCA(spec)
	return cert, key, true, err
}

func (p pki) newCA(spec caSpec) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: spec.cn},
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
	if err := writeKey(p.key(spec.name), key); err != nil {
		return nil, nil, err
	}
	if err := writePEM(p.cert(spec.name), "CERTIFICATE", der, 0o644); err != nil {
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

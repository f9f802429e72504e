package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdlatest "k8s.io/client-go/tools/clientcmd/api/latest"
	clientcmdapiv1 "k8s.io/client-go/tools/clientcmd/api/v1"
)

// minTokenTTL is the shortest token the API server issues.
const minTokenTTL = 10 * time.Minute

// ServiceAccountCredentials are the Credentials of a run's process: a
// token of the ServiceAccount from the TokenRequest API (with cs), valid
// for the run's timeout and a minute more (at least the API's ten
// minutes), and a kubeconfig for cfg's API server with it, written as
// JSON. cfg's own credentials are never passed on.
func ServiceAccountCredentials(cs kubernetes.Interface, cfg *rest.Config) Credentials {
	return func(ctx context.Context, namespace, serviceAccount string, ttl time.Duration) ([]byte, string, error) {
		return credentials(ctx, cs, cfg, namespace, serviceAccount, ttl)
	}
}

func credentials(ctx context.Context, cs kubernetes.Interface, cfg *rest.Config, namespace, serviceAccount string, ttl time.Duration) ([]byte, string, error) {
	seconds := int64(max(ttl+time.Minute, minTokenTTL) / time.Second)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}, metav1.CreateOptions{})
	if err != nil {
		return nil, "", err
	}
	ca := cfg.TLSClientConfig.CAData
	if len(ca) == 0 && cfg.TLSClientConfig.CAFile != "" {
		if ca, err = os.ReadFile(cfg.TLSClientConfig.CAFile); err != nil {
			return nil, "", fmt.Errorf("the API server's CA: %w", err)
		}
	}
	const name = "opkit-run"
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: ca, TLSServerName: cfg.TLSClientConfig.ServerName, InsecureSkipTLSVerify: cfg.TLSClientConfig.Insecure}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: namespace}
	kc.CurrentContext = name
	// JSON, which is YAML too: kubectl and client libraries read it, and
	// so does a handler with its language's standard library alone.
	var v1 clientcmdapiv1.Config
	if err := clientcmdlatest.Scheme.Convert(kc, &v1, nil); err != nil {
		return nil, "", err
	}
	v1.APIVersion, v1.Kind = "v1", "Config"
	data, err := json.Marshal(&v1)
	if err != nil {
		return nil, "", err
	}
	return data, tr.Status.Token, nil
}

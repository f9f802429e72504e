package devnode

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// rootPath maps an absolute path of the pod spec into the pod's root
// directory. Cleaning it first keeps ".." from leaving the root.
func (w *podWorker) rootPath(p string) string {
	return filepath.Join(w.dir, "root", filepath.Clean("/"+p))
}

// serviceAccountDir is where a Pod's ServiceAccount token is mounted,
// where client-go's in-cluster configuration reads it.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// serviceAccountKubeconfig writes a kubeconfig for a container that
// mounts its ServiceAccount's token, and returns its path, which the
// container gets as $KUBECONFIG: the token is under the pod's root, not
// at the path client-go's in-cluster configuration reads, so a program
// that uses the in-cluster configuration in a cluster (or $KUBECONFIG,
// else in-cluster, as kubectl and opkit do) reaches the API server as its
// ServiceAccount, in its Pod's namespace, with the token the node
// projected and renews.
func (w *podWorker) serviceAccountKubeconfig(pod *corev1.Pod, mountPath string) (string, error) {
	cfg := w.node.opts.Config
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		var err error
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			return "", fmt.Errorf("the API server's CA: %w", err)
		}
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["cluster"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: ca, TLSServerName: cfg.ServerName}
	kc.AuthInfos["serviceaccount"] = &clientcmdapi.AuthInfo{TokenFile: w.rootPath(path.Join(mountPath, "token"))}
	kc.Contexts["serviceaccount"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "serviceaccount", Namespace: pod.Namespace}
	kc.CurrentContext = "serviceaccount"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return "", err
	}
	p := filepath.Join(w.dir, "serviceaccount.kubeconfig")
	if err := writeFileAtomic(p, data, 0o600); err != nil {
		return "", err
	}
	return p, nil
}

// mountEnvName is the variable naming a volume's mount path.
func mountEnvName(volume string) string {
	var b strings.Builder
	b.WriteString("OPKIT_MOUNT_")
	for _, r := range volume {
		if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			b.WriteRune(unicode.ToUpper(r))
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// environment builds a container's environment, as a kubelet would, plus the
// dev node's own variables. Values are resolved now, from the API.
func (w *podWorker) environment(ctx context.Context, pod *corev1.Pod, spec corev1.Container) ([]string, error) {
	root := w.rootPath("/")
	vars := newEnv()
	vars.set("PATH", os.Getenv("PATH"))
	vars.set("HOME", root)
	vars.set("HOSTNAME", pod.Name)
	vars.set("OPKIT_POD_ROOT", root)
	if u, err := url.Parse(w.node.opts.Config.Host); err == nil {
		vars.set("KUBERNETES_SERVICE_HOST", u.Hostname())
		vars.set("KUBERNETES_SERVICE_PORT", u.Port())
	}
	for k, v := range w.node.proxy.proxyEnv() {
		vars.set(k, v)
	}
	for _, m := range spec.VolumeMounts {
		vars.set(mountEnvName(m.Name), w.rootPath(m.MountPath))
		if filepath.Clean(m.MountPath) == serviceAccountDir {
			kc, err := w.serviceAccountKubeconfig(pod, m.MountPath)
			if err != nil {
				return nil, err
			}
			vars.set("KUBECONFIG", kc)
		}
	}
	for _, from := range spec.EnvFrom {
		data, err := w.envFromSource(ctx, pod.Namespace, from)
		if err != nil {
			return nil, err
		}
		for k, v := range data {
			vars.set(from.Prefix+k, v)
		}
	}
	for _, e := range spec.Env {
		if e.ValueFrom == nil {
			vars.set(e.Name, expand(e.Value, vars.lookup))
			continue
		}
		v, ok, err := w.envValueFrom(ctx, pod, e.ValueFrom)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			vars.set(e.Name, v)
		}
	}
	return vars.list(), nil
}

func (w *podWorker) envFromSource(ctx context.Context, ns string, from corev1.EnvFromSource) (map[string]string, error) {
	switch {
	case from.ConfigMapRef != nil:
		cm, err := w.configMap(ctx, ns, from.ConfigMapRef.Name, from.ConfigMapRef.Optional)
		if cm == nil {
			return nil, err
		}
		return cm.Data, nil
	case from.SecretRef != nil:
		s, err := w.secret(ctx, ns, from.SecretRef.Name, from.SecretRef.Optional)
		if s == nil {
			return nil, err
		}
		out := make(map[string]string, len(s.Data))
		for k, v := range s.Data {
			out[k] = string(v)
		}
		return out, nil
	}
	return nil, nil
}

// envValueFrom resolves one valueFrom; ok is false for a missing optional key.
func (w *podWorker) envValueFrom(ctx context.Context, pod *corev1.Pod, from *corev1.EnvVarSource) (value string, ok bool, err error) {
	switch {
	case from.FieldRef != nil:
		v, err := fieldValue(pod, w.node.podIP(), from.FieldRef.FieldPath)
		return v, err == nil, err
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		cm, err := w.configMap(ctx, pod.Namespace, ref.Name, ref.Optional)
		if cm == nil {
			return "", false, err
		}
		v, found := cm.Data[ref.Key]
		if !found && !isOptional(ref.Optional) {
			return "", false, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, pod.Namespace, ref.Name)
		}
		return v, found, nil
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		s, err := w.secret(ctx, pod.Namespace, ref.Name, ref.Optional)
		if s == nil {
			return "", false, err
		}
		v, found := s.Data[ref.Key]
		if !found && !isOptional(ref.Optional) {
			return "", false, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name)
		}
		return string(v), found, nil
	}
	// resourceFieldRef and file keys are not supported: the variable is unset.
	return "", false, nil
}

// fieldValue resolves the fieldRef paths a kubelet supports.
func fieldValue(pod *corev1.Pod, podIP, path string) (string, error) {
	if key, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[key], nil
	}
	if key, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[key], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return podIP, nil
	case "status.hostIP", "status.hostIPs":
		return "127.0.0.1", nil
	}
	return "", fmt.Errorf("fieldRef %q is not supported by the dev node", path)
}

// subscript parses `prefix['key']`.
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "']")
}

func isOptional(b *bool) bool { return b != nil && *b }

// configMap reads the ConfigMap ns/name a Pod refers to; nil when it
// cannot be read, with an error unless the reference is optional.
func (w *podWorker) configMap(ctx context.Context, ns, name string, optional *bool) (*corev1.ConfigMap, error) {
	return getRef(ctx, w.node.client.CoreV1().ConfigMaps(ns).Get, "configmap", name, optional)
}

// secret reads the Secret ns/name a Pod refers to, as configMap does.
func (w *podWorker) secret(ctx context.Context, ns, name string, optional *bool) (*corev1.Secret, error) {
	return getRef(ctx, w.node.client.CoreV1().Secrets(ns).Get, "secret", name, optional)
}

// getRef reads the object name with get; nil when it cannot be read,
// with an error naming it as what unless the reference is optional.
func getRef[T any](ctx context.Context, get func(context.Context, string, metav1.GetOptions) (*T, error), what, name string, optional *bool) (*T, error) {
	obj, err := get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if isOptional(optional) {
			return nil, nil
		}
		return nil, fmt.Errorf("%s %q: %w", what, name, err)
	}
	return obj, nil
}

// env is an ordered set of variables in which a later value replaces an
// earlier one.
type env struct {
	order []string
	vals  map[string]string
}

func newEnv() *env { return &env{vals: map[string]string{}} }

func (e *env) set(k, v string) {
	if _, ok := e.vals[k]; !ok {
		e.order = append(e.order, k)
	}
	e.vals[k] = v
}

func (e *env) lookup(k string) (string, bool) {
	v, ok := e.vals[k]
	return v, ok
}

func (e *env) list() []string {
	out := make([]string, 0, len(e.order))
	for _, k := range e.order {
		out = append(out, k+"="+e.vals[k])
	}
	return out
}

func envValue(list []string, key string) string {
	for i := len(list) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(list[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// expandArgs applies $(VAR) expansion to command and args, as a kubelet does.
func expandArgs(argv, envList []string) []string {
	vals := map[string]string{}
	for _, kv := range envList {
		k, v, _ := strings.Cut(kv, "=")
		vals[k] = v
	}
	lookup := func(k string) (string, bool) { v, ok := vals[k]; return v, ok }
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = expand(a, lookup)
	}
	return out
}

// expand replaces $(VAR) with VAR's value when it is defined, turns $$ into
// $, and leaves everything else — an undefined $(VAR) included — as it is.
// This is Kubernetes' documented expansion for command, args and env values.
func expand(s string, lookup func(string) (string, bool)) string {
	var b strings.Builder
	checkpoint := 0
	for cursor := 0; cursor < len(s); cursor++ {
		if s[cursor] != '$' || cursor+1 >= len(s) {
			continue
		}
		b.WriteString(s[checkpoint:cursor])
		next := s[cursor+1:]
		advance := 1
		switch next[0] {
		case '$':
			b.WriteByte('$')
		case '(':
			end := strings.IndexByte(next, ')')
			if end < 0 {
				b.WriteString("$(")
				break
			}
			name := next[1:end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			advance = end + 1
		default:
			b.WriteByte('$')
			b.WriteByte(next[0])
		}
		cursor += advance
		checkpoint = cursor + 1
	}
	b.WriteString(s[checkpoint:])
	return b.String()
}

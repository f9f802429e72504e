package devnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/opkit-dev/opkit/internal/sleep"
)

// prepare makes the pod's directories and materializes its volumes, then
// links each container's mount paths under the pod root to them.
func (w *podWorker) prepare(ctx context.Context) error {
	pod, _ := w.current()
	for _, d := range []string{w.rootPath("/"), filepath.Join(w.dir, "logs"), filepath.Join(w.dir, "volumes")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	for _, v := range pod.Spec.Volumes {
		dir := filepath.Join(w.dir, "volumes", v.Name)
		if err := w.materialize(ctx, pod, v, dir); err != nil {
			return fmt.Errorf("volume %q: %w", v.Name, err)
		}
	}
	all := append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for _, c := range all {
		for _, m := range c.VolumeMounts {
			target := filepath.Join(w.dir, "volumes", m.Name, filepath.Clean("/"+m.SubPath))
			link := w.rootPath(m.MountPath)
			if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
				return err
			}
			if existing, err := os.Readlink(link); err == nil && existing == target {
				continue
			}
			_ = os.Remove(link)
			if err := os.Symlink(target, link); err != nil {
				return fmt.Errorf("mounting %q at %s: %w", m.Name, m.MountPath, err)
			}
		}
	}
	return nil
}

// materialize writes one volume's content into dir. Re-running it (after a
// missing ConfigMap appeared, say) rewrites the content.
func (w *podWorker) materialize(ctx context.Context, pod *corev1.Pod, v corev1.Volume, dir string) error {
	switch {
	case v.EmptyDir != nil:
		return os.MkdirAll(dir, 0o777)
	case v.HostPath != nil:
		_ = os.Remove(dir)
		return os.Symlink(v.HostPath.Path, dir)
	case v.PersistentVolumeClaim != nil:
		target, err := w.claimDir(ctx, pod.Namespace, v.PersistentVolumeClaim.ClaimName)
		if err != nil {
			return err
		}
		_ = os.Remove(dir)
		return os.Symlink(target, dir)
	case v.ConfigMap != nil:
		files, err := w.configMapFiles(ctx, pod.Namespace, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional)
		if err != nil {
			return err
		}
		return writeFiles(dir, files, mode(v.ConfigMap.DefaultMode))
	case v.Secret != nil:
		files, err := w.secretFiles(ctx, pod.Namespace, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional)
		if err != nil {
			return err
		}
		return writeFiles(dir, files, mode(v.Secret.DefaultMode))
	case v.DownwardAPI != nil:
		files, err := downwardFiles(pod, w.node.podIP(), v.DownwardAPI.Items)
		if err != nil {
			return err
		}
		return writeFiles(dir, files, mode(v.DownwardAPI.DefaultMode))
	case v.Projected != nil:
		files := map[string][]byte{}
		for _, src := range v.Projected.Sources {
			var part map[string][]byte
			var err error
			switch {
			case src.ConfigMap != nil:
				part, err = w.configMapFiles(ctx, pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional)
			case src.Secret != nil:
				part, err = w.secretFiles(ctx, pod.Namespace, src.Secret.Name, src.Secret.Items, src.Secret.Optional)
			case src.DownwardAPI != nil:
				part, err = downwardFiles(pod, w.node.podIP(), src.DownwardAPI.Items)
			case src.ServiceAccountToken != nil:
				var expires time.Time
				part, expires, err = w.tokenFile(ctx, pod, src.ServiceAccountToken)
				if err == nil {
					w.renewLater(v.Name, expires)
				}
			}
			if err != nil {
				return err
			}
			for k, val := range part {
				files[k] = val
			}
		}
		return writeFiles(dir, files, mode(v.Projected.DefaultMode))
	}
	return fmt.Errorf("this volume type is not supported by the dev node (supported: emptyDir, hostPath, persistentVolumeClaim, configMap, secret, downwardAPI, projected)")
}

func mode(m *int32) os.FileMode {
	if m == nil {
		return 0o644
	}
	return os.FileMode(*m)
}

func (w *podWorker) configMapFiles(ctx context.Context, ns, name string, items []corev1.KeyToPath, optional *bool) (map[string][]byte, error) {
	cm, err := w.configMap(ctx, ns, name, optional)
	if cm == nil {
		return nil, err
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return project(data, items, "ConfigMap "+name)
}

func (w *podWorker) secretFiles(ctx context.Context, ns, name string, items []corev1.KeyToPath, optional *bool) (map[string][]byte, error) {
	s, err := w.secret(ctx, ns, name, optional)
	if s == nil {
		return nil, err
	}
	return project(s.Data, items, "Secret "+name)
}

// project applies items (key -> path) to data; without items every key is a
// file of its name.
func project(data map[string][]byte, items []corev1.KeyToPath, what string) (map[string][]byte, error) {
	if len(items) == 0 {
		return data, nil
	}
	out := map[string][]byte{}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return nil, fmt.Errorf("%s has no key %q", what, it.Key)
		}
		out[it.Path] = v
	}
	return out, nil
}

func downwardFiles(pod *corev1.Pod, podIP string, items []corev1.DownwardAPIVolumeFile) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, it := range items {
		if it.FieldRef == nil {
			continue // resourceFieldRef is not supported
		}
		var v string
		switch it.FieldRef.FieldPath {
		case "metadata.labels":
			v = formatMap(pod.Labels)
		case "metadata.annotations":
			v = formatMap(pod.Annotations)
		default:
			var err error
			if v, err = fieldValue(pod, podIP, it.FieldRef.FieldPath); err != nil {
				return nil, err
			}
		}
		out[it.Path] = []byte(v)
	}
	return out, nil
}

// formatMap renders labels the way the downward API does: k="v" per line.
func formatMap(m map[string]string) string {
	lines := make([]string, 0, len(m))
	for k, v := range m {
		lines = append(lines, fmt.Sprintf("%s=%q", k, v))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// tokenFile requests a projected token for the Pod, and says when it
// expires.
func (w *podWorker) tokenFile(ctx context.Context, pod *corev1.Pod, src *corev1.ServiceAccountTokenProjection) (map[string][]byte, time.Time, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: src.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if src.Audience != "" {
		req.Spec.Audiences = []string{src.Audience}
	}
	if req.Spec.ExpirationSeconds == nil {
		req.Spec.ExpirationSeconds = ptr.To(int64(3607))
	}
	tok, err := w.node.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("service account token for %q: %w", sa, err)
	}
	return map[string][]byte{src.Path: []byte(tok.Status.Token)}, tok.Status.ExpirationTimestamp.Time, nil
}

// renewAfter is how long after its request a projected token is renewed,
// given its lifetime: at 80% of it, as a kubelet does. A test of this
// package shortens it (export_test.go).
var renewAfter = func(lifetime time.Duration) time.Duration { return lifetime * 8 / 10 }

// renewLater records when the projected volume's token is to be
// renewed; the earliest of its tokens counts.
func (w *podWorker) renewLater(volume string, expires time.Time) {
	at := time.Now().Add(renewAfter(time.Until(expires)))
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.renewAt == nil {
		w.renewAt = map[string]time.Time{}
	}
	if old, ok := w.renewAt[volume]; !ok || at.Before(old) || old.Before(time.Now()) {
		w.renewAt[volume] = at
	}
}

// renewTokens writes each projected volume again, with new tokens, once
// its tokens are past 80% of their life, until ctx ends: a program that
// reads its token file again (client-go does, every minute) keeps a valid
// one, as under a kubelet. A failed request is retried every 10s.
func (w *podWorker) renewTokens(ctx context.Context) {
	for {
		w.mu.Lock()
		volume, at := "", time.Time{}
		for v, t := range w.renewAt {
			if volume == "" || t.Before(at) {
				volume, at = v, t
			}
		}
		w.mu.Unlock()
		if volume == "" {
			return
		}
		if !sleep.For(ctx, time.Until(at)) {
			return
		}
		pod, _ := w.current()
		for _, v := range pod.Spec.Volumes {
			if v.Name != volume {
				continue
			}
			w.mu.Lock()
			delete(w.renewAt, volume)
			w.mu.Unlock()
			if err := w.materialize(ctx, pod, v, filepath.Join(w.dir, "volumes", v.Name)); err != nil {
				if ctx.Err() != nil {
					return
				}
				fmt.Fprintf(w.node.opts.Log, "dev node: renewing the tokens of pod %s/%s, volume %q: %v\n", w.namespace, w.name, v.Name, err)
				w.mu.Lock()
				if _, again := w.renewAt[volume]; !again {
					w.renewAt[volume] = time.Now().Add(10 * time.Second)
				}
				w.mu.Unlock()
			}
		}
	}
}

// writeFiles writes each file below dir, refusing paths that leave it.
func writeFiles(dir string, files map[string][]byte, perm os.FileMode) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, data := range files {
		p := filepath.Join(dir, filepath.Clean("/"+name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := writeFileAtomic(p, data, perm); err != nil {
			return err
		}
	}
	return nil
}

// writeFileAtomic replaces the file p with data at once, so that a
// program reading it (a token renewed) never sees it half written.
func writeFileAtomic(p string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), perm)
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

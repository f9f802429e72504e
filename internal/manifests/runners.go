package manifests

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
	runnerapi "github.com/opkit-dev/opkit/internal/runners"
)

// The runners' names and paths, shared with the engine (opkit run
// --runners-addr) and the agent (opkit agent).
const (
	// RunnersTLSSecret holds the runner API's serving certificate and its
	// CA: made empty by the manifests, filled and rotated by the engine.
	RunnersTLSSecret = "opkit-runners-tls"
	// RunnersCA is the ConfigMap where the engine publishes that CA (key
	// ca.crt), which the runners mount: made empty by the manifests.
	RunnersCA = "opkit-runners-ca"
	// RunnerAudience is the audience of a runner's projected token, which
	// the engine checks by TokenReview.
	RunnerAudience = "opkit.dev/runner"
	// FilesHashAnnotation, on a runner's Pod template, is the hash of its
	// operator's files, so that a changed script rolls the runners.
	FilesHashAnnotation = "opkit.dev/files-hash"
	// RunnerTokenExpiration is the lifetime of a runner's token, in
	// seconds; the kubelet renews it before it ends.
	RunnerTokenExpiration = 3600
	// Paths in a runner's Pod.
	agentBinDir     = "/opkit/bin"
	agentInstallDir = "/opkit-bin"
	filesDir        = "/opkit/files"
	engineCADir     = "/opkit/engine-ca"
	runnerTokenDir  = "/var/run/secrets/opkit.dev/runner"
)

// RunnerServiceAccount is the ServiceAccount of an operator's runners:
// opkit-runner-OPERATOR, bound to no role. The engine accepts its tokens
// for that operator's runs only.
func RunnerServiceAccount(operator string) string { return "opkit-runner-" + operator }

// RunnerName is the Deployment of an operator's runners for an image:
// OPERATOR-runner-<the first 8 hex digits of sha256(image)>.
func RunnerName(operator, image string) string {
	return runnerapi.DeploymentName(operator, image)
}

// FilesConfigMap is the ConfigMap of an operator's files: OPERATOR-files.
func FilesConfigMap(operator string) string { return operator + "-files" }

func imageHash(image string) string {
	sum := sha256.Sum256([]byte(image))
	return hex.EncodeToString(sum[:4])
}

// runnerOperator is an operator whose exec handlers run in runners: the
// images they name, sorted, and its files.
type runnerOperator struct {
	name   string
	images []string
	files  *operatorFiles
}

// hostExec is an exec handler without an image: in a cluster it runs in
// the engine's container, where the stock image has no interpreter.
type hostExec struct{ operator, handler string }

// runners reads the operators whose exec handlers name an image, with
// their files, and lists the exec handlers that name none. An error
// names the operator, the handler and the file at fault.
func runners(defs []*definition.Definition) ([]*runnerOperator, []hostExec, []string, error) {
	var out []*runnerOperator
	var host []hostExec
	var warnings []string
	var errs []error
	for _, d := range defs {
		op := d.Operator.Name
		var images []string
		var inImage []v1alpha1.Handler
		for _, h := range d.Operator.Spec.Handlers {
			switch {
			case h.Exec == nil:
			case h.Exec.Image == "":
				host = append(host, hostExec{op, h.Name})
			default:
				images = append(images, h.Exec.Image)
				inImage = append(inImage, h)
			}
		}
		if len(images) == 0 {
			continue
		}
		if msgs := validation.IsValidLabelValue(op); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("operator %s: its exec handlers run in runners, whose labels name it, and %q is not a label value: %s", op, op, strings.Join(msgs, "; ")))
			continue
		}
		dir := ""
		if d.Source != "" {
			abs, err := filepath.Abs(d.Source)
			if err != nil {
				return nil, nil, nil, err
			}
			dir = filepath.Dir(abs)
		}
		files, err := readOperatorFiles(op, dir, filepath.Dir(d.Source))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, p := range slices.Sorted(mapKeys(files.left)) {
			warnings = append(warnings, fmt.Sprintf("operator %s: %s is not given to its runners (ConfigMap %s): %s", op, filepath.Join(files.Shown, p), FilesConfigMap(op), files.left[p]))
		}
		for _, h := range inImage {
			errs = append(errs, checkNamedFiles(op, h, files)...)
		}
		slices.Sort(images)
		out = append(out, &runnerOperator{name: op, images: slices.Compact(images), files: files})
	}
	slices.SortFunc(out, func(a, b *runnerOperator) int { return strings.Compare(a.name, b.name) })
	return out, host, warnings, errors.Join(errs...)
}

// checkNamedFiles refuses a handler in an image whose command or
// working directory names a file of the definition's directory that its
// runners do not get: outside that directory, or left out.
func checkNamedFiles(op string, h v1alpha1.Handler, files *operatorFiles) []error {
	e := h.Exec
	var errs []error
	who := fmt.Sprintf("operator %s: handler %s (exec.image %s)", op, h.Name, e.Image)
	wd := "."
	if e.WorkingDir != "" && !filepath.IsAbs(e.WorkingDir) {
		wd = path.Clean(filepath.ToSlash(e.WorkingDir))
		if wd == ".." || strings.HasPrefix(wd, "../") {
			errs = append(errs, fmt.Errorf("%s: exec.workingDir %q is outside the definition's directory %s, the only one its runners get", who, e.WorkingDir, files.Shown))
		}
	}
	if files.Dir == "" {
		return errs
	}
	for i, arg := range e.Command {
		if arg == "" || filepath.IsAbs(arg) || (i == 0 && !strings.Contains(arg, "/")) {
			continue // a program of the image, or not a path
		}
		rel := path.Clean(path.Join(wd, filepath.ToSlash(arg)))
		if filepath.IsAbs(e.WorkingDir) {
			continue // a directory of the image
		}
		onDisk := filepath.Join(files.Dir, filepath.FromSlash(rel))
		shown := filepath.Join(files.Shown, filepath.FromSlash(rel))
		if _, err := os.Stat(onDisk); err != nil {
			if i == 0 {
				errs = append(errs, fmt.Errorf("%s: exec.command[0] %q: %w", who, arg, err))
			}
			continue // an argument that names no file
		}
		field := "exec.command[" + strconv.Itoa(i) + "]"
		switch {
		case rel == ".." || strings.HasPrefix(rel, "../"):
			errs = append(errs, fmt.Errorf("%s: %s %q is %s, outside the definition's directory %s, the only one its runners get", who, field, arg, shown, files.Shown))
		case files.left[rel] != "":
			errs = append(errs, fmt.Errorf("%s: %s %q names %s, which is not given to runners: %s", who, field, arg, shown, files.left[rel]))
		}
	}
	return errs
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// runnerLabels are the labels of an operator's runners for an image, and
// their Deployment's selector. They are not the engine's (name opkit), so
// that neither its Deployment nor its Service selects them.
func (m *Manifests) runnerLabels(operator, image string) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name": "opkit-runner", "app.kubernetes.io/instance": m.Options.Name,
		"opkit.dev/operator": operator, "opkit.dev/image": imageHash(image),
	}
}

// runnerObjects are, for each operator whose exec handlers name an image,
// its ServiceAccount (no rights), its files' ConfigMap and a runner
// Deployment per image; and the runners' CA ConfigMap and the engine's
// certificate Secret, made empty for the engine to fill.
func (m *Manifests) runnerObjects() []runtime.Object {
	if len(m.runners) == 0 {
		return nil
	}
	objs := []runtime.Object{
		&corev1.Secret{TypeMeta: typeMeta("v1", "Secret"), ObjectMeta: m.meta(RunnersTLSSecret, true), Type: corev1.SecretTypeOpaque},
		&corev1.ConfigMap{TypeMeta: typeMeta("v1", "ConfigMap"), ObjectMeta: m.meta(RunnersCA, true)},
	}
	for _, r := range m.runners {
		objs = append(objs,
			&corev1.ServiceAccount{TypeMeta: typeMeta("v1", "ServiceAccount"), ObjectMeta: m.meta(RunnerServiceAccount(r.name), true), AutomountServiceAccountToken: ptr.To(false)},
			&corev1.ConfigMap{TypeMeta: typeMeta("v1", "ConfigMap"), ObjectMeta: m.meta(FilesConfigMap(r.name), true), Data: r.files.Data, BinaryData: r.files.BinaryData},
		)
		for _, image := range r.images {
			objs = append(objs, m.runnerDeployment(r, image))
		}
	}
	return objs
}

// runnerDeployment is the warm runner of an operator's exec handlers in
// an image: an init container of opkit's image copies the agent into an
// emptyDir, and the image runs it, with the operator's files, the
// engine's CA and a token of the runner's own ServiceAccount, under the
// restricted pod security.
func (m *Manifests) runnerDeployment(r *runnerOperator, image string) *appsv1.Deployment {
	o := m.Options
	labels := m.runnerLabels(r.name, image)
	engine := fmt.Sprintf("https://%s.%s.svc:%d", RunnersName, o.Namespace, o.RunnersPort)
	pod := corev1.PodSpec{
		ServiceAccountName:           RunnerServiceAccount(r.name),
		Tolerations:                  m.tolerations(),
		AutomountServiceAccountToken: ptr.To(false),
		EnableServiceLinks:           ptr.To(false),
		SecurityContext:              restrictedPod(),
		// The opkit image's binary is the file /opkit, so the emptyDir
		// is mounted beside it, not under it.
		InitContainers: []corev1.Container{{
			Name: "agent", Image: o.Image, ImagePullPolicy: corev1.PullIfNotPresent,
			Command:         []string{"/opkit", "agent", "install", agentInstallDir},
			SecurityContext: restrictedContainer(false),
			VolumeMounts:    []corev1.VolumeMount{{Name: "opkit-bin", MountPath: agentInstallDir}},
		}},
		Containers: []corev1.Container{{
			Name: "runner", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{agentBinDir + "/opkit", "agent", "run"},
			Args: []string{
				"--engine=" + engine, "--operator=" + r.name, "--image=" + image, "--files=" + filesDir,
				"--ca-file=" + engineCADir + "/ca.crt", "--token-file=" + runnerTokenDir + "/token",
			},
			Env:             []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}}},
			SecurityContext: restrictedContainer(false),
			VolumeMounts: []corev1.VolumeMount{
				{Name: "opkit-bin", MountPath: agentBinDir, ReadOnly: true},
				{Name: "files", MountPath: filesDir, ReadOnly: true},
				{Name: "engine-ca", MountPath: engineCADir, ReadOnly: true},
				{Name: "token", MountPath: runnerTokenDir, ReadOnly: true},
			},
		}},
		Volumes: []corev1.Volume{
			{Name: "opkit-bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "files", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: FilesConfigMap(r.name)}, Items: r.files.Items,
			}}},
			// The key is named, so that the runner starts once the
			// engine has published its CA.
			{Name: "engine-ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: RunnersCA}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}}},
			{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
				ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: RunnerAudience, ExpirationSeconds: ptr.To(int64(RunnerTokenExpiration)), Path: "token"},
			}}}}},
		},
	}
	return &appsv1.Deployment{
		TypeMeta:   typeMeta("apps/v1", "Deployment"),
		ObjectMeta: metav1.ObjectMeta{Name: RunnerName(r.name, image), Namespace: o.Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{FilesHashAnnotation: r.files.Hash()}},
				Spec:       pod,
			},
		},
	}
}

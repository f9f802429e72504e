package devnode

import (
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// OpkitImage is opkit's own image, without a tag: a container of it, any
// tag or digest, runs the node's opkit binary (Options.Opkit).
const OpkitImage = "ghcr.io/opkit-dev/opkit"

// opkitImagePath is where opkit's image holds its binary, its entrypoint.
const opkitImagePath = "/opkit"

// opkitExecutable is Options.Opkit's default: the running executable
// when it is opkit (its file is named opkit), else none. A test of this
// package replaces it (export_test.go).
var opkitExecutable = func() string {
	exe, err := os.Executable()
	if err != nil || strings.TrimSuffix(filepath.Base(exe), ".exe") != "opkit" {
		return ""
	}
	return exe
}

// isOpkitImage reports whether image is opkit's own, any tag or digest.
func isOpkitImage(image string) bool {
	return image == OpkitImage || strings.HasPrefix(image, OpkitImage+":") || strings.HasPrefix(image, OpkitImage+"@")
}

// underMount reports whether the absolute path p is under one of the
// container's mounts.
func underMount(spec corev1.Container, p string) bool {
	if !filepath.IsAbs(p) {
		return false
	}
	p = filepath.Clean(p)
	for _, m := range spec.VolumeMounts {
		mp := filepath.Clean(m.MountPath)
		if p == mp || strings.HasPrefix(p, mp+"/") {
			return true
		}
	}
	return false
}

// podArgv maps the argv of a container that runs in the pod's own world
// onto this host, and reports whether it did:
//
//   - a container of opkit's image whose command is the image's binary
//     (/opkit or opkit), or none (the image's entrypoint), runs the
//     node's opkit binary;
//   - a command that is an absolute path under one of the container's
//     mounts (/opkit/bin/opkit, which an init container copied into an
//     emptyDir) runs from under the pod's root, as mounts are, when it is
//     there: a program of the host under a mount's path (a test binary
//     in /tmp, where a Pod mounts an emptyDir) runs as it is.
//
// The arguments of such a program are the pod's paths, not the host's:
// each that is an absolute path under a mount, alone or as the value of
// --flag=PATH, is mapped under the pod's root too. Any other container
// runs its argv as it is.
func (c *container) podArgv(argv []string) ([]string, bool) {
	spec := c.spec
	switch {
	case isOpkitImage(spec.Image) && c.pod.node.opts.Opkit != "" && len(spec.Command) == 0:
		argv = append([]string{c.pod.node.opts.Opkit}, argv...)
	case isOpkitImage(spec.Image) && c.pod.node.opts.Opkit != "" && len(argv) > 0 && (argv[0] == opkitImagePath || argv[0] == "opkit"):
		argv = append([]string{c.pod.node.opts.Opkit}, argv[1:]...)
	case len(argv) > 0 && underMount(spec, argv[0]) && exists(c.pod.rootPath(argv[0])):
		argv = append([]string{c.pod.rootPath(argv[0])}, argv[1:]...)
	default:
		return argv, false
	}
	for i := 1; i < len(argv); i++ {
		arg := argv[i]
		if underMount(spec, arg) {
			argv[i] = c.pod.rootPath(arg)
			continue
		}
		if flag, value, ok := strings.Cut(arg, "="); ok && strings.HasPrefix(flag, "-") && underMount(spec, value) {
			argv[i] = flag + "=" + c.pod.rootPath(value)
		}
	}
	return argv, true
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// podEnv maps the variables of a program that runs in the pod's world
// (podArgv) as its arguments are: a value the pod spec gives literally
// (env value, no valueFrom) that is an absolute path under a mount
// (OPKIT_ARCHIVE=/var/lib/opkit/runs.db, the engine's archive on its
// emptyDir) is mapped under the pod's root. Values the node set, or
// that came from the API, are left as they are.
func (c *container) podEnv(env []string) []string {
	literal := map[string]string{}
	for _, e := range c.spec.Env {
		if e.ValueFrom == nil && underMount(c.spec, e.Value) {
			literal[e.Name] = e.Value
		} else {
			delete(literal, e.Name)
		}
	}
	out := make([]string, len(env))
	for i, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if p, ok := literal[k]; ok && v == p {
			kv = k + "=" + c.pod.rootPath(p)
		}
		out[i] = kv
	}
	return out
}

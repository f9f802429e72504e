package devcluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/mod/modfile"
)

// Binary names one program of the control plane.
type Binary string

// The binaries devcluster builds and caches.
const (
	Etcd                  Binary = "etcd"
	KubeAPIServer         Binary = "kube-apiserver"
	KubeControllerManager Binary = "kube-controller-manager"
	KubeScheduler         Binary = "kube-scheduler"
	Kubectl               Binary = "kubectl"
)

// AllBinaries lists every binary a cache holds, in build order.
var AllBinaries = []Binary{Etcd, KubeAPIServer, KubeControllerManager, KubeScheduler, Kubectl}

// ErrCacheNotWritable is returned (wrapped) when the cache directory cannot be
// created or written.
var ErrCacheNotWritable = errors.New("cache directory is not writable")

const sumsFile = "SHA256SUMS"

// DefaultCacheDir returns the root of opkit's cache: $OPKIT_CACHE_DIR if set,
// otherwise "opkit" under the user cache directory ($XDG_CACHE_HOME or
// ~/.cache on Linux).
func DefaultCacheDir() (string, error) {
	if dir := os.Getenv("OPKIT_CACHE_DIR"); dir != "" {
		return dir, nil
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding the user cache directory (set OPKIT_CACHE_DIR): %w", err)
	}
	return filepath.Join(dir, "opkit"), nil
}

// Cache builds and verifies the control-plane binaries of one version.
type Cache struct {
	// Root is the cache root; binaries live in Root/k8s/KubernetesVersion/bin.
	// Defaults to DefaultCacheDir().
	Root string
	// Log receives build progress, one line per step. Defaults to io.Discard.
	Log io.Writer
	// Go is the go command used to build. Defaults to "go" on PATH, then
	// GOROOT/bin/go.
	Go string
}

// Binaries locates verified control-plane binaries.
type Binaries struct {
	// Dir is the directory holding them.
	Dir string
}

// Path returns the path of one binary.
func (b Binaries) Path(name Binary) string { return filepath.Join(b.Dir, string(name)) }

// Dir returns the directory of this version's cache.
func (c *Cache) Dir() (string, error) {
	root := c.Root
	if root == "" {
		var err error
		if root, err = DefaultCacheDir(); err != nil {
			return "", err
		}
	}
	return filepath.Join(root, "k8s", KubernetesVersion), nil
}

// Binaries returns where the binaries are, without verifying or building them.
func (c *Cache) Binaries() (Binaries, error) {
	dir, err := c.Dir()
	return Binaries{Dir: filepath.Join(dir, "bin")}, err
}

func (c *Cache) logf(format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, format+"\n", args...)
	}
}

// Ensure returns the cached binaries, building those that are missing or
// whose checksum does not match SHA256SUMS. Concurrent callers, in this or
// other processes, are serialized by a lock file in the cache directory.
func (c *Cache) Ensure(ctx context.Context) (Binaries, error) {
	dir, err := c.Dir()
	if err != nil {
		return Binaries{}, err
	}
	binDir := filepath.Join(dir, "bin")
	if err := checkWritable(binDir); err != nil {
		return Binaries{}, err
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, ".lock"), func() {
		c.logf("waiting for another process building the control plane in %s", dir)
	})
	if err != nil {
		return Binaries{}, err
	}
	defer unlock()

	sums, err := readSums(filepath.Join(binDir, sumsFile))
	if err != nil {
		return Binaries{}, err
	}
	var stale []Binary
	for _, b := range AllBinaries {
		switch got, err := fileSHA256(filepath.Join(binDir, string(b))); {
		case errors.Is(err, os.ErrNotExist):
			stale = append(stale, b)
		case err != nil:
			return Binaries{}, fmt.Errorf("verifying cached %s: %w", b, err)
		case got != sums[b]:
			c.logf("%s in %s does not match its checksum: rebuilding it", b, binDir)
			stale = append(stale, b)
		}
	}
	if len(stale) == 0 {
		return Binaries{Dir: binDir}, nil
	}
	if err := c.build(ctx, dir, binDir, stale, sums); err != nil {
		return Binaries{}, err
	}
	return Binaries{Dir: binDir}, nil
}

// checkWritable creates dir and proves a file can be written in it.
func checkWritable(dir string) error {
	notWritable := func(err error) error {
		return fmt.Errorf("%w: %s: %w (set OPKIT_CACHE_DIR or XDG_CACHE_HOME to a writable directory)", ErrCacheNotWritable, dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return notWritable(err)
	}
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return notWritable(err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// lockFile takes an exclusive flock on path, polling so that ctx can cancel
// the wait. waiting is called once if the lock is held by someone else.
func lockFile(ctx context.Context, path string, waiting func()) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCacheNotWritable, err)
	}
	for first := true; ; first = false {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if first && waiting != nil {
			waiting()
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func readSums(path string) (map[Binary]string, error) {
	sums := map[Binary]string{}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return sums, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// The format of sha256sum(1): "<hex>  <name>".
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if ok {
			sums[Binary(name)] = sum
		}
	}
	return sums, nil
}

func writeSums(path string, sums map[Binary]string) error {
	var buf bytes.Buffer
	for _, b := range AllBinaries {
		if s, ok := sums[b]; ok {
			fmt.Fprintf(&buf, "%s  %s\n", s, b)
		}
	}
	return writeFileAtomic(path, buf.Bytes(), 0o644)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeFileAtomic writes data to a temporary file beside path and renames it.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// build compiles the stale binaries into a scratch directory and moves each
// into binDir with its checksum recorded.
func (c *Cache) build(ctx context.Context, dir, binDir string, stale []Binary, sums map[Binary]string) error {
	goCmd, err := c.goCommand()
	if err != nil {
		return err
	}
	out, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCacheNotWritable, err)
	}
	defer os.RemoveAll(out)

	start := time.Now()
	c.logf("building %s (Kubernetes %s, etcd %s) with %s; the first build takes several minutes",
		joinBinaries(stale), KubernetesVersion, EtcdVersion, goCmd)

	var k8s []Binary
	for _, b := range stale {
		if b != Etcd {
			k8s = append(k8s, b)
		}
	}
	if slices.Contains(stale, Etcd) {
		src := filepath.Join(dir, "src", "etcd")
		gomod := wrapperModule("etcd", "go.etcd.io/etcd/server/v3", EtcdVersion, nil)
		// One package: -o names the file (go would call it "server").
		if err := c.goBuild(ctx, goCmd, src, gomod, filepath.Join(out, string(Etcd)), []string{"go.etcd.io/etcd/server/v3"}, EtcdVersion, "-s -w"); err != nil {
			return err
		}
	}
	if len(k8s) > 0 {
		src := filepath.Join(dir, "src", "kubernetes")
		staging, err := c.stagingModules(ctx, goCmd, src)
		if err != nil {
			return err
		}
		gomod := wrapperModule("kubernetes", "k8s.io/kubernetes", KubernetesVersion, staging)
		var pkgs []string
		for _, b := range k8s {
			pkgs = append(pkgs, "k8s.io/kubernetes/cmd/"+string(b))
		}
		if err := c.goBuild(ctx, goCmd, src, gomod, out+string(os.PathSeparator), pkgs, KubernetesVersion, k8sLDFlags()); err != nil {
			return err
		}
	}
	for _, b := range stale {
		sum, err := fileSHA256(filepath.Join(out, string(b)))
		if err != nil {
			return fmt.Errorf("building %s: no binary produced: %w", b, err)
		}
		if err := os.Rename(filepath.Join(out, string(b)), filepath.Join(binDir, string(b))); err != nil {
			return fmt.Errorf("installing %s: %w", b, err)
		}
		sums[b] = sum
	}
	if err := writeSums(filepath.Join(binDir, sumsFile), sums); err != nil {
		return fmt.Errorf("writing checksums: %w", err)
	}
	c.logf("built %s in %s", joinBinaries(stale), time.Since(start).Round(time.Second))
	return nil
}

func joinBinaries(bs []Binary) string {
	s := make([]string, len(bs))
	for i, b := range bs {
		s[i] = string(b)
	}
	return strings.Join(s, ", ")
}

// k8sLDFlags stamps the version that `kubectl version` and /version report.
func k8sLDFlags() string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(KubernetesVersion, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	var flags []string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		flags = append(flags,
			"-X "+pkg+".gitVersion="+KubernetesVersion,
			"-X "+pkg+".gitMajor="+major,
			"-X "+pkg+".gitMinor="+minor,
			"-X "+pkg+".gitTreeState=clean",
		)
	}
	return "-s -w " + strings.Join(flags, " ")
}

func (c *Cache) goCommand() (string, error) {
	if c.Go != "" {
		return c.Go, nil
	}
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p, nil
		}
	}
	return "", errors.New("building the control plane needs the Go toolchain: no `go` on PATH (install Go 1.26 or later)")
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// stagingModules lists the module paths that k8s.io/kubernetes replaces with
// its ./staging directory, read from its own go.mod.
func (c *Cache) stagingModules(ctx context.Context, goCmd, workDir string) ([]string, error) {
	if err := os.MkdirAll(workDir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCacheNotWritable, err)
	}
	var stdout bytes.Buffer
	download := func() *exec.Cmd {
		stdout.Reset()
		cmd := c.goExec(ctx, goCmd, workDir, "mod", "download", "-json", "k8s.io/kubernetes@"+KubernetesVersion)
		cmd.Stdout = &stdout
		return cmd
	}
	if err := c.runFetching(ctx, download, "downloading k8s.io/kubernetes@"+KubernetesVersion); err != nil {
		return nil, err
	}
	var info struct{ GoMod, Error string }
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil {
		return nil, fmt.Errorf("reading `go mod download` output: %w", err)
	}
	if info.Error != "" {
		return nil, fmt.Errorf("downloading k8s.io/kubernetes@%s: %s", KubernetesVersion, info.Error)
	}
	data, err := os.ReadFile(info.GoMod)
	if err != nil {
		return nil, err
	}
	mf, err := modfile.Parse(info.GoMod, data, nil)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", info.GoMod, err)
	}
	var staging []string
	for _, r := range mf.Replace {
		if strings.HasPrefix(r.New.Path, "./staging/") {
			staging = append(staging, r.Old.Path)
		}
	}
	if len(staging) == 0 {
		return nil, fmt.Errorf("k8s.io/kubernetes@%s: its go.mod replaces no staging module; cannot build it", KubernetesVersion)
	}
	return staging, nil
}

// wrapperModule returns a go.mod that requires module@version and replaces
// each staging module with its release of the same minor and patch.
func wrapperModule(name, module, version string, staging []string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "module opkit.local/build/%s\n\ngo 1.26\n\nrequire %s %s\n", name, module, version)
	if len(staging) > 0 {
		stagingVersion := "v0." + strings.SplitN(strings.TrimPrefix(version, "v"), ".", 2)[1]
		b.WriteString("\nreplace (\n")
		for _, m := range staging {
			fmt.Fprintf(&b, "\t%s => %s %s\n", m, m, stagingVersion)
		}
		b.WriteString(")\n")
	}
	return []byte(b.String())
}

// goBuild writes the wrapper module into src, resolves the packages with
// `go get` and builds them with -o out: a file for one package, a directory
// (ending in a separator) for several.
func (c *Cache) goBuild(ctx context.Context, goCmd, src string, gomod []byte, out string, pkgs []string, version, ldflags string) error {
	if err := os.MkdirAll(src, 0o755); err != nil {
		return fmt.Errorf("%w: %w", ErrCacheNotWritable, err)
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), gomod, 0o644); err != nil {
		return fmt.Errorf("%w: %w", ErrCacheNotWritable, err)
	}
	get := []string{"get"}
	for _, p := range pkgs {
		get = append(get, p+"@"+version)
	}
	if err := c.runFetching(ctx, func() *exec.Cmd { return c.goExec(ctx, goCmd, src, get...) }, "resolving "+strings.Join(pkgs, " ")); err != nil {
		return err
	}
	// The build downloads the modules the resolve did not.
	build := append([]string{"build", "-trimpath", "-ldflags=" + ldflags, "-o", out}, pkgs...)
	return c.runFetching(ctx, func() *exec.Cmd { return c.goExec(ctx, goCmd, src, build...) }, "building "+strings.Join(pkgs, " "))
}

// fetchAttempts is how many times a go command that reaches the module
// proxy runs when it keeps failing on a passing network fault, and
// fetchPause the pause after its first failure (doubled after each).
const fetchAttempts = 3

var fetchPause = 2 * time.Second

// runFetching runs the go command newCmd makes, and runs a new one after a
// pause when it failed on a network fault that the next try may not meet
// (transientFetch): the proxy is reached over the internet, and one reset
// connection must not fail a build of some minutes. Any other failure (an
// unknown version, a compile error, no network at all) is returned at once.
func (c *Cache) runFetching(ctx context.Context, newCmd func() *exec.Cmd, what string) error {
	pause := fetchPause
	for attempt := 1; ; attempt++ {
		err := c.run(newCmd(), what)
		if err == nil || attempt == fetchAttempts || !transientFetch(err.Error()) {
			return err
		}
		c.logf("%s: a network fault, trying again in %s (%d of %d): %s", what, pause, attempt+1, fetchAttempts, lastLine(err.Error()))
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause *= 2
	}
}

// transientFetch reports whether a go command's error text names a fault
// of the network or of the proxy that a later try may not meet.
func transientFetch(msg string) bool {
	for _, s := range []string{
		"connection reset by peer", "i/o timeout", "TLS handshake timeout", "unexpected EOF",
		"broken pipe", "502 Bad Gateway", "503 Service Unavailable", "504 Gateway Timeout",
		"server misbehaving", "stream error", "http2: ",
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func (c *Cache) goExec(ctx context.Context, goCmd, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	return cmd
}

// run runs a go command, returning its output in the error when it fails.
func (c *Cache) run(cmd *exec.Cmd, what string) error {
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 4000 {
			msg = "..." + msg[len(msg)-4000:]
		}
		return fmt.Errorf("%s: %w\n%s", what, err, msg)
	}
	return nil
}

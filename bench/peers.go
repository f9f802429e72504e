package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster"
)

// The peers are the operators a team would write instead of opkit's
// handlers, measured beside them in the handlers drain and the watch:
//
//   - python: a "no-framework" operator on the official Kubernetes client
//     (peer_python.py, on Debian's python3-kubernetes), a watch loop and a
//     pool of 8 threads;
//   - shell-operator: flant's shell-operator, built from its Go module
//     with in-process jq (the use_libjq build, as its images are), with a
//     hook (peer_shell_operator_hook.py) that leaves the writes to
//     shell-operator's object patcher, and its Kubernetes clients' rate
//     limits raised from 5 requests/s (burst 10) to 1000 (burst 2000).
//
// Each does the workload's work: on printer-exec.yaml the ConfigMap child,
// the handler's command run once per Printer with its input on stdin, and
// the status; on watch.yaml the handler on each Deployment first seen and
// each change of its containers. A peer runs under a supervisor (this
// executable, roleEnv=peerRole), which starts it and prints the stats
// lines the bench reads from every controller: its CPU (the peer's process
// and the children it waited for: the handlers, the hooks), its peak RSS,
// and the writes and objects handled that the peer appends to a report
// file. Its heap is not known.

//go:embed peer_python.py
var peerPython []byte

//go:embed peer_shell_operator_hook.py
var peerHook []byte

const (
	// peerRole is roleEnv's value for a peer's supervisor.
	peerRole = "peer"
	// peerCommandEnv is the peer's command line, a JSON array.
	peerCommandEnv = "OPKIT_BENCH_PEER_COMMAND"
	// peerReportEnv is the file the peer reports its writes and the
	// objects it handled to.
	peerReportEnv = "OPKIT_BENCH_REPORT"

	// python is Debian's, where Debian's python3-kubernetes is installed
	// (a python3 earlier on PATH may be another installation).
	python = "/usr/bin/python3"

	shellOperatorModule  = "github.com/flant/shell-operator"
	shellOperatorVersion = "v1.6.0"
	// shellOperatorSum is the module's hash (go.sum's h1:), checked
	// after the download: the proxy here serves the module but not the
	// checksum database's lookup.
	shellOperatorSum = "h1:QLN3j7R5FDtGSdoJXDivqPG+Fq7XOLNzSCKRkX6gKx4="
	// shellOperatorQPS is its clients' rate limit, from the default 5.
	shellOperatorQPS, shellOperatorBurst = 1000, 2000
)

var (
	pythonPeer        = impl{Name: "python, 8 threads", Kind: "python", Workers: 8}
	shellOperatorPeer = impl{Name: "shell-operator " + shellOperatorVersion, Kind: "shell-operator"}
)

// isPeer reports whether im is one of the peers.
func (im impl) isPeer() bool { return im.Kind == pythonPeer.Kind || im.Kind == shellOperatorPeer.Kind }

// peers returns the peers that can run on this machine, preparing them
// the first time: python3-kubernetes installed with apt-get when missing,
// shell-operator built into the cache. A peer that cannot be prepared is
// left out with a note, or, under CI=true, fails the suite.
func (b *bench) peers(ctx context.Context) ([]impl, error) {
	if b.peersReady != nil {
		return *b.peersReady, nil
	}
	var ready []impl
	for _, p := range []struct {
		im      impl
		prepare func(context.Context) error
	}{
		{pythonPeer, b.preparePython},
		{shellOperatorPeer, b.prepareShellOperator},
	} {
		fmt.Fprintf(b.log, "preparing the peer %s\n", p.im.Name)
		if err := p.prepare(ctx); err != nil {
			if os.Getenv("CI") == "true" || ctx.Err() != nil {
				return nil, fmt.Errorf("preparing the peer %s: %w", p.im.Name, err)
			}
			b.note(fmt.Sprintf("peer %s left out: %v", p.im.Name, err))
			continue
		}
		ready = append(ready, p.im)
	}
	b.peersReady = &ready
	return ready, nil
}

// preparePython installs Debian's python3-kubernetes when Debian's python3
// cannot import kubernetes.
func (b *bench) preparePython(ctx context.Context) error {
	if exec.CommandContext(ctx, python, "-c", "import kubernetes").Run() == nil {
		return nil
	}
	if err := aptInstall(ctx, b.log, "python3-kubernetes"); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, python, "-c", "import kubernetes").CombinedOutput(); err != nil {
		return fmt.Errorf("%s cannot import kubernetes after installing python3-kubernetes: %w: %s", python, err, out)
	}
	return nil
}

// aptInstall installs Debian packages, as root or with sudo, as the
// Makefile's browser and postgresql targets do.
func aptInstall(ctx context.Context, log io.Writer, pkgs ...string) error {
	fmt.Fprintf(log, "  installing %s (Debian packages) with apt-get\n", strings.Join(pkgs, " "))
	var prefix []string
	if os.Geteuid() != 0 {
		prefix = []string{"sudo", "-n"}
	}
	for _, args := range [][]string{{"apt-get", "update", "-qq"}, append([]string{"apt-get", "install", "-y", "-qq"}, pkgs...)} {
		args = append(prefix, args...)
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, lastLines(out, 5))
		}
	}
	return nil
}

// shellOperatorBinary is where the built shell-operator is cached, beside
// the control plane's binaries.
func shellOperatorBinary() (string, error) {
	root, err := devcluster.DefaultCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "shell-operator", shellOperatorVersion+"-libjq", "shell-operator"), nil
}

// prepareShellOperator builds shell-operator from its module, with the
// use_libjq tag (Debian's libjq-dev and libonig-dev, installed when
// missing), unless the cache holds it.
func (b *bench) prepareShellOperator(ctx context.Context) error {
	bin, err := shellOperatorBinary()
	if err != nil {
		return err
	}
	if _, err := os.Stat(bin); err == nil {
		return nil
	}
	if !hasLib("libjq.so") || !hasLib("libonig.so") {
		if err := aptInstall(ctx, b.log, "libjq-dev", "libonig-dev"); err != nil {
			return err
		}
	}
	fmt.Fprintf(b.log, "  building %s@%s into %s (a few minutes, once)\n", shellOperatorModule, shellOperatorVersion, filepath.Dir(bin))
	goEnv := append(os.Environ(), "GONOSUMDB="+shellOperatorModule, "GOFLAGS=-mod=mod", "CGO_ENABLED=1")
	dl := exec.CommandContext(ctx, "go", "mod", "download", "-json", shellOperatorModule+"@"+shellOperatorVersion)
	dl.Env, dl.Dir = goEnv, os.TempDir()
	out, err := dl.Output()
	if err != nil {
		return fmt.Errorf("go mod download %s@%s: %w: %s", shellOperatorModule, shellOperatorVersion, err, lastLines(errOutput(err), 5))
	}
	var mod struct{ Dir, Sum, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return fmt.Errorf("go mod download %s@%s: its answer: %w", shellOperatorModule, shellOperatorVersion, err)
	}
	if mod.Error != "" {
		return fmt.Errorf("go mod download %s@%s: %s", shellOperatorModule, shellOperatorVersion, mod.Error)
	}
	if mod.Sum != shellOperatorSum {
		return fmt.Errorf("%s@%s downloaded with hash %s, want %s", shellOperatorModule, shellOperatorVersion, mod.Sum, shellOperatorSum)
	}
	// The module cache is read-only and go build may update go.sum: the
	// build works on a copy.
	src, err := os.MkdirTemp("", "shell-operator-src-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(src) }()
	if err := os.CopyFS(src, os.DirFS(mod.Dir)); err != nil {
		return fmt.Errorf("copying %s: %w", mod.Dir, err)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return err
	}
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags", "use_libjq", "-o", bin+".tmp", "./cmd/shell-operator")
	build.Env, build.Dir = goEnv, src
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build of %s@%s: %w: %s", shellOperatorModule, shellOperatorVersion, err, lastLines(out, 10))
	}
	return os.Rename(bin+".tmp", bin)
}

// hasLib reports whether the linker finds a development library.
func hasLib(name string) bool {
	for _, dir := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib", "/usr/local/lib"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

func errOutput(err error) []byte {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.Stderr
	}
	return nil
}

// lastLines returns the last n lines of out, for an error message.
func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// handlerCommand returns the command of the first handler of the workload
// def: what the peers run as the handler.
func handlerCommand(def string) ([]string, error) {
	data, err := workloads.ReadFile(def)
	if err != nil {
		return nil, err
	}
	srcs, err := definition.Load(def, data)
	if err != nil {
		return nil, err
	}
	d, err := definition.Compile(srcs[0])
	if err != nil {
		return nil, err
	}
	if len(d.Handlers) == 0 || d.Handlers[0].Exec == nil {
		return nil, fmt.Errorf("%s has no exec handler for the peers to run", def)
	}
	return d.Handlers[0].Exec.Command, nil
}

// startPeer starts the peer im on the workload def (printer-exec.yaml or
// watch.yaml) under its supervisor.
func (b *bench) startPeer(im impl, def string) (*controller, error) {
	command, err := handlerCommand(def)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(b.workDir, im.Kind+"-")
	if err != nil {
		return nil, err
	}
	workload, selector := "printers", ""
	if def == watchWorkload {
		workload, selector = "deployments", watchLabels.String()
	}
	var argv, env []string
	switch im.Kind {
	case pythonPeer.Kind:
		script := filepath.Join(dir, "peer_python.py")
		if err := os.WriteFile(script, peerPython, 0o644); err != nil {
			return nil, err
		}
		argv = []string{python, script, workload, benchNamespace}
		if selector != "" {
			argv = append(argv, selector)
		}
		argv = append(argv, command...)
	case shellOperatorPeer.Kind:
		bin, err := shellOperatorBinary()
		if err != nil {
			return nil, err
		}
		hooks := filepath.Join(dir, "hooks")
		if err := os.MkdirAll(hooks, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(hooks, "bench.py"), peerHook, 0o755); err != nil {
			return nil, err
		}
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		cmdJSON, _ := json.Marshal(command)
		argv = []string{bin, "start", "--hooks-dir", hooks, "--tmp-dir", filepath.Join(dir, "tmp"),
			"--kube-config", b.kubeconfig, "--listen-address", "127.0.0.1", "--listen-port", strconv.Itoa(port),
			"--debug-unix-socket", filepath.Join(dir, "debug.socket"),
			"--kube-client-qps", strconv.Itoa(shellOperatorQPS), "--kube-client-burst", strconv.Itoa(shellOperatorBurst),
			"--object-patcher-kube-client-qps", strconv.Itoa(shellOperatorQPS), "--object-patcher-kube-client-burst", strconv.Itoa(shellOperatorBurst),
			"--log-type", "json"}
		env = []string{"OPKIT_BENCH_PEER=" + workload, "OPKIT_BENCH_NAMESPACE=" + benchNamespace,
			"OPKIT_BENCH_SELECTOR=" + selector, "OPKIT_BENCH_COMMAND=" + string(cmdJSON)}
	default:
		return nil, fmt.Errorf("unknown peer %q", im.Kind)
	}
	argvJSON, _ := json.Marshal(argv)
	return b.spawn(im, append(env, roleEnv+"="+peerRole, peerCommandEnv+"="+string(argvJSON),
		peerReportEnv+"="+filepath.Join(dir, "report.jsonl"), "KUBECONFIG="+b.kubeconfig), "")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// peerMain is the supervisor of a peer: it starts the command
// $OPKIT_BENCH_PEER_COMMAND and prints, every statsInterval and once more
// when the peer stopped, a stats line (as a controller does) from the
// peer's /proc and its report file, until SIGTERM, which it passes on.
func peerMain() error {
	var argv []string
	if err := json.Unmarshal([]byte(os.Getenv(peerCommandEnv)), &argv); err != nil {
		return fmt.Errorf("%s: want a JSON array of the command and its arguments: %w", peerCommandEnv, err)
	}
	if len(argv) == 0 {
		return fmt.Errorf("%s: want a JSON array of the command and its arguments, not an empty one", peerCommandEnv)
	}
	reportPath := os.Getenv(peerReportEnv)
	if err := os.WriteFile(reportPath, nil, 0o644); err != nil {
		return err
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	// The peer's temporary files (shell-operator's client caches its
	// discovery and HTTP answers in directories of its own there) go with
	// it.
	tmp, err := os.MkdirTemp("", "opkit-bench-peer-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr // stdout is the stats lines
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	pid := cmd.Process.Pid
	var s stats
	s.WritesBy = map[string]int64{}
	report, err := os.Open(reportPath)
	if err != nil {
		return err
	}
	defer func() { _ = report.Close() }()
	var partial []byte
	emit := func() {
		if cpu, err := procCPU(pid); err == nil {
			s.CPUSecond = cpu
		}
		if rss, err := procHWM(pid); err == nil {
			s.MaxRSS = max(s.MaxRSS, rss)
		}
		data, _ := io.ReadAll(report)
		data = append(partial, data...)
		end := bytes.LastIndexByte(data, '\n') + 1
		partial = bytes.Clone(data[end:])
		sc := bufio.NewScanner(bytes.NewReader(data[:end]))
		for sc.Scan() {
			var line struct {
				Write string `json:"write"`
				handled
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			if line.Write != "" {
				s.Writes++
				s.WritesBy[line.Write]++
			} else if line.Name != "" {
				s.Handled = append(s.Handled, line.handled)
			}
		}
		s.At = time.Now().UnixNano()
		out, _ := json.Marshal(s)
		fmt.Println(string(out))
		s.Handled = nil
	}
	tick := time.NewTicker(statsInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			emit()
		case <-sigs:
			emit()
			_ = cmd.Process.Signal(syscall.SIGTERM)
			kill := time.AfterFunc(10*time.Second, func() { _ = cmd.Process.Kill() })
			defer kill.Stop()
			if err := <-exited; err != nil {
				// Stopped by the signal (or killed): said, not a failure.
				fmt.Fprintf(os.Stderr, "%s stopped: %v\n", argv[0], err)
			}
			return nil
		case err := <-exited:
			emit()
			return fmt.Errorf("%s exited: %w", argv[0], err)
		}
	}
}

// procCPU returns the CPU seconds (user and system) of a process and of
// the children it waited for, from /proc/PID/stat.
func procCPU(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command, which is in parentheses: state is
	// field 3; utime, stime, cutime, cstime are fields 14 to 17.
	i := bytes.LastIndexByte(data, ')')
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 15 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	var ticks float64
	for _, s := range f[11:15] {
		n, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return ticks / 100, nil // USER_HZ is 100 on Linux
}

// procHWM returns a process's peak RSS in bytes (VmHWM).
func procHWM(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmHWM", pid)
}

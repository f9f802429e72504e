package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/opkit-dev/opkit/internal/devcluster"
	"github.com/opkit-dev/opkit/internal/devcluster/devnode"
)

// A control plane started by `opkit cluster start` runs under a supervisor
// process (the hidden `opkit cluster supervise`) in its own session. The
// supervisor holds an exclusive flock on <state dir>/lock for as long as it
// runs, which is how every other command knows whether a plane is running;
// it describes the plane in <state dir>/state.json. The components die with
// the supervisor (parent-death signal), so SIGKILL of the supervisor leaves
// nothing behind.

const (
	stateFile  = "state.json"
	lockName   = "lock"
	kubeconfig = "kubeconfig"
)

// clusterState is what the supervisor writes to state.json.
type clusterState struct {
	Pid        int                    `json:"pid"`
	Endpoint   string                 `json:"endpoint"`
	Kubeconfig string                 `json:"kubeconfig"`
	DataDir    string                 `json:"dataDir"`
	Temporary  bool                   `json:"temporaryDataDir"`
	Kubectl    string                 `json:"kubectl"`
	StartedAt  time.Time              `json:"startedAt"`
	ReadyAfter string                 `json:"readyAfter"`
	Components []devcluster.Component `json:"components"`
	DevNode    string                 `json:"devNode,omitempty"`
}

// clusterFlags are the flags of `opkit cluster`, shared by its subcommands.
type clusterFlags struct {
	stateDir string
}

// planeFlags configure one plane; start and supervise each have their own.
type planeFlags struct {
	dataDir string
	port    int
	devNode bool
}

// defaultStateDir is $OPKIT_STATE_DIR, else $XDG_STATE_HOME/opkit/cluster,
// else ~/.local/state/opkit/cluster.
func defaultStateDir() string { return statePath("OPKIT_STATE_DIR", "cluster") }

// statePath is $env, else $XDG_STATE_HOME/opkit/name, else
// ~/.local/state/opkit/name, else opkit-name in the temporary directory.
func statePath(env, name string) string {
	if p := os.Getenv(env); p != "" {
		return p
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "opkit", name)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "opkit-"+name)
	}
	return filepath.Join(home, ".local", "state", "opkit", name)
}

func newClusterCommand() *cobra.Command {
	f := &clusterFlags{}
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Run a local Kubernetes control plane (etcd, kube-apiserver, controller-manager, scheduler)",
		Long: `Run a local Kubernetes control plane built from source, without a container runtime.

The first start builds etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kubectl (` + devcluster.KubernetesVersion + `) with the local Go toolchain and
caches them (about 5 minutes on 2 cores); later starts take seconds.`,
	}
	cmd.PersistentFlags().StringVar(&f.stateDir, "state-dir", defaultStateDir(), "directory describing the running plane (env OPKIT_STATE_DIR)")
	cmd.AddCommand(
		newClusterStartCommand(f),
		newClusterStopCommand(f),
		newClusterStatusCommand(f),
		newClusterEnvCommand(f),
		newClusterBuildCommand(),
		newClusterSuperviseCommand(f),
	)
	return cmd
}

func newClusterStartCommand(f *clusterFlags) *cobra.Command {
	pf := &planeFlags{}
	cmd := &cobra.Command{
		Use:   "start",
		Short: "Start the control plane in the background and print its KUBECONFIG",
		Long: `Start the control plane in the background and return once it is ready.

The line printed on standard output sets KUBECONFIG for a shell:
  eval "$(opkit cluster start)"
A second start while a plane runs fails and starts nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return clusterStart(cmd.Context(), f.stateDir, pf, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&pf.dataDir, "data-dir", "", "keep etcd data, certificates and logs here across restarts (default: a temporary directory removed on stop)")
	cmd.Flags().IntVar(&pf.port, "port", 0, "kube-apiserver port on 127.0.0.1 (default: a free port)")
	cmd.Flags().BoolVar(&pf.devNode, "dev-node", true, "run a dev node: Pods tolerating opkit.dev/dev-node run as processes of this host")
	return cmd
}

// lockState opens the state directory's lock file and tries to lock it.
// locked reports whether this call got the lock; when it did not, a plane
// is running.
func lockState(stateDir string) (lock *os.File, locked bool, err error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, false, fmt.Errorf("creating state directory: %w", err)
	}
	lock, err = os.OpenFile(filepath.Join(stateDir, lockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, false, err
	}
	err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return lock, false, nil
	}
	if err != nil {
		lock.Close()
		return nil, false, fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	return lock, true, nil
}

func readState(stateDir string) (clusterState, error) {
	var st clusterState
	data, err := os.ReadFile(filepath.Join(stateDir, stateFile))
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("reading %s: %w", filepath.Join(stateDir, stateFile), err)
	}
	return st, nil
}

// runningState returns the running plane's state, or ok=false when none runs.
func runningState(stateDir string) (st clusterState, ok bool, err error) {
	lock, locked, err := lockState(stateDir)
	if err != nil {
		return st, false, err
	}
	defer lock.Close()
	if locked {
		return st, false, nil
	}
	st, err = readState(stateDir)
	if errors.Is(err, os.ErrNotExist) {
		// The supervisor is still starting the plane.
		return st, true, nil
	}
	return st, err == nil, err
}

func errNotRunning(stateDir string) error {
	return fmt.Errorf("no local control plane is running (state directory %s); start one with `opkit cluster start`", stateDir)
}

func exportLine(path string) string {
	return "export KUBECONFIG=" + shellQuote(path)
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func clusterStart(ctx context.Context, stateDir string, f *planeFlags, stdout, stderr io.Writer) error {
	lock, locked, err := lockState(stateDir)
	if err != nil {
		return err
	}
	defer lock.Close()
	if !locked {
		msg := "a local control plane is already running"
		if st, err := readState(stateDir); err == nil {
			msg += fmt.Sprintf(" (pid %d, %s); use it with\n  %s\nor stop it with `opkit cluster stop`", st.Pid, st.Endpoint, exportLine(st.Kubeconfig))
		}
		return errors.New(msg)
	}
	// Build in the foreground, where the user sees the progress.
	if _, err := (&devcluster.Cache{Log: stderr}).Ensure(ctx); err != nil {
		return err
	}
	os.Remove(filepath.Join(stateDir, stateFile)) // left by a supervisor that was killed

	self, err := os.Executable()
	if err != nil {
		return err
	}
	logPath := filepath.Join(stateDir, "supervisor.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer readyR.Close()
	args := []string{"cluster", "supervise", "--state-dir", stateDir}
	if f.dataDir != "" {
		abs, err := filepath.Abs(f.dataDir)
		if err != nil {
			return err
		}
		args = append(args, "--data-dir", abs)
	}
	if f.port != 0 {
		args = append(args, "--port", strconv.Itoa(f.port))
	}
	args = append(args, "--dev-node="+strconv.FormatBool(f.devNode))
	sup := exec.Command(self, args...)
	sup.Stdout, sup.Stderr = logFile, logFile
	sup.ExtraFiles = []*os.File{lock, readyW} // fd 3: the held lock, fd 4: readiness
	sup.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := sup.Start(); err != nil {
		readyW.Close()
		return fmt.Errorf("starting the supervisor: %w", err)
	}
	readyW.Close()
	fmt.Fprintf(stderr, "starting the local control plane (supervisor pid %d, log %s)\n", sup.Process.Pid, logPath)

	result := make(chan supervisorReport, 1)
	go func() { result <- readReport(readyR) }()
	exited := make(chan struct{})
	go func() { _ = sup.Wait(); close(exited) }()
	var rep supervisorReport
	select {
	case rep = <-result:
	case <-ctx.Done():
		_ = sup.Process.Signal(syscall.SIGTERM)
		<-exited
		return fmt.Errorf("interrupted; the control plane was stopped")
	}
	if rep.Error != "" {
		<-exited
		return fmt.Errorf("the control plane did not start: %s", rep.Error)
	}
	if !rep.Ready {
		<-exited
		return fmt.Errorf("the supervisor exited before the control plane was ready; its log %s ends with:\n%s", logPath, devcluster.LogTail(logPath, 20))
	}
	st, err := readState(stateDir)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "local control plane ready at %s in %s; stop it with `opkit cluster stop`\n", st.Endpoint, st.ReadyAfter)
	fmt.Fprintln(stdout, exportLine(st.Kubeconfig))
	return nil
}

// supervisorReport is the one JSON line the supervisor writes on fd 4.
type supervisorReport struct {
	Ready bool   `json:"ready,omitempty"`
	Error string `json:"error,omitempty"`
}

func readReport(r io.Reader) supervisorReport {
	var rep supervisorReport
	line, err := bufio.NewReader(r).ReadBytes('\n')
	if err != nil && len(line) == 0 {
		return rep
	}
	if err := json.Unmarshal(line, &rep); err != nil {
		rep.Error = "unreadable report from the supervisor: " + string(line)
	}
	return rep
}

func newClusterSuperviseCommand(f *clusterFlags) *cobra.Command {
	pf := &planeFlags{}
	cmd := &cobra.Command{
		Use:    "supervise",
		Short:  "Run the control plane in the foreground under `opkit cluster start` (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return clusterSupervise(f.stateDir, pf, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&pf.dataDir, "data-dir", "", "data directory")
	cmd.Flags().IntVar(&pf.port, "port", 0, "kube-apiserver port")
	cmd.Flags().BoolVar(&pf.devNode, "dev-node", false, "run a dev node")
	return cmd
}

// clusterSupervise runs with the state lock on fd 3 and the readiness pipe
// on fd 4, both inherited from `opkit cluster start`.
func clusterSupervise(stateDir string, f *planeFlags, log io.Writer) error {
	// Keep the lock and the pipe out of the components' processes.
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	lock := os.NewFile(3, "lock")
	defer lock.Close()
	ready := os.NewFile(4, "ready")
	report := func(rep supervisorReport) {
		if ready == nil {
			return
		}
		line, _ := json.Marshal(rep)
		_, _ = ready.Write(append(line, '\n'))
		ready.Close()
		ready = nil
	}
	defer report(supervisorReport{Error: "the supervisor stopped"})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	cl, err := devcluster.Start(ctx, devcluster.Options{DataDir: f.dataDir, APIServerPort: f.port, DevNode: f.devNode, Log: log})
	if err != nil {
		report(supervisorReport{Error: err.Error()})
		return err
	}
	defer cl.Stop()
	bins, err := (&devcluster.Cache{}).Binaries() // verified by Start
	if err != nil {
		report(supervisorReport{Error: err.Error()})
		return err
	}
	kc := filepath.Join(stateDir, kubeconfig)
	data, err := os.ReadFile(cl.KubeconfigPath())
	if err == nil {
		err = os.WriteFile(kc, data, 0o600)
	}
	if err != nil {
		report(supervisorReport{Error: "writing the kubeconfig: " + err.Error()})
		return err
	}
	st := clusterState{
		Pid: os.Getpid(), Endpoint: cl.Endpoint(), Kubeconfig: kc, DataDir: cl.DataDir(),
		Temporary: f.dataDir == "", Kubectl: bins.Path(devcluster.Kubectl), StartedAt: time.Now(),
		ReadyAfter: cl.ReadyAfter().Round(100 * time.Millisecond).String(), Components: cl.Components(),
	}
	if n := cl.DevNode(); n != nil {
		st.DevNode = fmt.Sprintf("%s (kubelet API 127.0.0.1:%d; runs the commands of Pods tolerating %s on this host)", n.Name(), n.Port(), devnode.Taint)
	}
	stData, _ := json.MarshalIndent(st, "", "  ")
	statePath := filepath.Join(stateDir, stateFile)
	if err := os.WriteFile(statePath, stData, 0o600); err != nil {
		report(supervisorReport{Error: "writing the state: " + err.Error()})
		return err
	}
	// Stop the components before removing the state that lists them.
	defer func() {
		cl.Stop()
		os.Remove(statePath)
	}()
	report(supervisorReport{Ready: true})

	select {
	case <-ctx.Done():
		fmt.Fprintln(log, "stopping the control plane")
		return nil
	case <-cl.Done():
		return fmt.Errorf("control plane stopped: %w", cl.Err())
	}
}

func newClusterStopCommand(f *clusterFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "stop",
		Short: "Stop the control plane started by `opkit cluster start`",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return clusterStop(cmd.Context(), f.stateDir, cmd.ErrOrStderr())
		},
	}
}

func clusterStop(ctx context.Context, stateDir string, stderr io.Writer) error {
	st, running, err := runningState(stateDir)
	if err != nil {
		return err
	}
	if !running {
		fmt.Fprintln(stderr, "no local control plane is running")
		return nil
	}
	if st.Pid == 0 {
		return errors.New("the control plane is still starting; try again once `opkit cluster start` has returned")
	}
	_ = syscall.Kill(st.Pid, syscall.SIGTERM)
	if waitUnlocked(ctx, stateDir, 60*time.Second) {
		// The supervisor unlocks as it returns, and exits after: stop
		// returns once nothing of the plane runs.
		waitExited(ctx, st.Pid, 10*time.Second)
		fmt.Fprintln(stderr, "local control plane stopped")
		return nil
	}
	// The supervisor did not stop in time: kill it and its components.
	_ = syscall.Kill(st.Pid, syscall.SIGKILL)
	for _, c := range st.Components {
		_ = syscall.Kill(-c.Pid, syscall.SIGKILL)
	}
	if waitUnlocked(ctx, stateDir, 10*time.Second) {
		fmt.Fprintln(stderr, "local control plane killed after it did not stop within 60s")
		return nil
	}
	return fmt.Errorf("the supervisor (pid %d) does not stop", st.Pid)
}

// waitExited waits, up to limit, until the process pid has exited: it is
// gone, or a zombie that its new parent has not reaped yet.
func waitExited(ctx context.Context, pid int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		switch {
		case err == nil && strings.Contains(string(data), ") Z "):
			return
		case err != nil && syscall.Kill(pid, 0) == syscall.ESRCH: // gone, or no /proc
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitUnlocked waits until no process holds the state lock.
func waitUnlocked(ctx context.Context, stateDir string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		lock, locked, err := lockState(stateDir)
		if err == nil {
			lock.Close()
			if locked {
				return true
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

func newClusterStatusCommand(f *clusterFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Say whether the control plane runs, where, and its processes; exit 1 when it does not run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, running, err := runningState(f.stateDir)
			if err != nil {
				return err
			}
			if !running {
				return errNotRunning(f.stateDir)
			}
			if st.Pid == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "local control plane: starting")
				return nil
			}
			health := readyz(cmd.Context(), st.Kubeconfig)
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			data := st.DataDir
			if st.Temporary {
				data += " (temporary, removed on stop)"
			}
			fmt.Fprintf(w, "local control plane:\trunning since %s (supervisor pid %d)\n", st.StartedAt.Format(time.RFC3339), st.Pid)
			fmt.Fprintf(w, "kube-apiserver:\t%s (readyz: %s)\n", st.Endpoint, health)
			fmt.Fprintf(w, "kubeconfig:\t%s\n", st.Kubeconfig)
			fmt.Fprintf(w, "data dir:\t%s\n", data)
			fmt.Fprintf(w, "kubectl:\t%s\n", st.Kubectl)
			if st.DevNode != "" {
				fmt.Fprintf(w, "dev node:\t%s\n", st.DevNode)
			}
			fmt.Fprintln(w)
			fmt.Fprintln(w, "COMPONENT\tPID\tPORT\tLOG")
			for _, c := range st.Components {
				fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", c.Name, c.Pid, c.Port, c.LogPath)
			}
			return w.Flush()
		},
	}
}

// readyz asks kube-apiserver's /readyz through the kubeconfig.
func readyz(ctx context.Context, kubeconfigPath string) string {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigPath)
	if err != nil {
		return err.Error()
	}
	cfg.Timeout = 3 * time.Second
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err.Error()
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/readyz", nil)
	resp, err := client.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	return strings.TrimSpace(string(body))
}

func newClusterEnvCommand(f *clusterFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "env",
		Short: "Print the shell line that points kubectl at the running control plane",
		Long:  "Print the shell line that points kubectl at the running control plane:\n  eval \"$(opkit cluster env)\"",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, running, err := runningState(f.stateDir)
			if err != nil {
				return err
			}
			if !running || st.Kubeconfig == "" {
				return errNotRunning(f.stateDir)
			}
			fmt.Fprintln(cmd.OutOrStdout(), exportLine(st.Kubeconfig))
			return nil
		},
	}
}

func newClusterBuildCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "build",
		Short: "Build (or verify) the cached control-plane binaries and print their directory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bins, err := (&devcluster.Cache{Log: cmd.ErrOrStderr()}).Ensure(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), bins.Dir)
			return nil
		},
	}
}

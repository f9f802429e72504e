package devnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/opkit-dev/opkit/internal/sleep"
)

// The kubelet's restart back-off: 10s doubling to 5m, reset after a
// container ran 10m.
const (
	backoffInitial = 10 * time.Second
	backoffMax     = 5 * time.Minute
	backoffReset   = 10 * time.Minute
)

// maxTerminationMessage is the kubelet's limit on a termination message.
const maxTerminationMessage = 4096

// container is one container of a pod and its current process.
type container struct {
	pod  *podWorker
	spec corev1.Container
	init bool

	mu           sync.Mutex
	restartCount int32
	state        corev1.ContainerState
	lastState    corev1.ContainerState
	proc         *exec.Cmd
	exited       chan struct{} // closed when proc has been reaped
	killing      bool
}

func newContainer(w *podWorker, spec corev1.Container, init bool) *container {
	return &container{pod: w, spec: spec, init: init, state: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"},
	}}
}

// logPath is the log file of one run of the container.
func (c *container) logPath(restart int32) string {
	return filepath.Join(c.pod.dir, "logs", c.spec.Name, strconv.Itoa(int(restart))+".log")
}

func (c *container) setWaiting(reason, message string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}
}

func (c *container) status() corev1.ContainerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	running := c.state.Running != nil
	s := corev1.ContainerStatus{
		Name:                 c.spec.Name,
		Image:                c.spec.Image,
		ImageID:              "opkit-devnode://ignored/" + c.spec.Image,
		RestartCount:         c.restartCount,
		State:                *c.state.DeepCopy(),
		LastTerminationState: *c.lastState.DeepCopy(),
		Ready:                running && !c.init,
		Started:              ptr.To(running),
	}
	if c.proc != nil && c.proc.Process != nil {
		s.ContainerID = "opkit-devnode://" + strconv.Itoa(c.proc.Process.Pid)
	}
	return s
}

// loop runs the container until it is done for good under policy, or ctx
// ends. For an init container it reports whether it succeeded.
func (c *container) loop(ctx context.Context, policy corev1.RestartPolicy, init bool) bool {
	// As a kubelet: the first restart is immediate, then back-off applies.
	var backoff time.Duration
	for {
		started := time.Now()
		exitCode := c.runOnce(ctx)
		if ctx.Err() != nil {
			return false
		}
		c.pod.syncStatus(ctx)
		restart := policy == corev1.RestartPolicyAlways && !init ||
			policy != corev1.RestartPolicyNever && exitCode != 0
		if !restart {
			return exitCode == 0
		}
		if time.Since(started) > backoffReset {
			backoff = 0
		}
		c.mu.Lock()
		c.lastState = c.state
		c.restartCount++
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason:  "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s", backoff, c.spec.Name, c.pod.name, c.pod.namespace),
		}}
		c.mu.Unlock()
		c.pod.syncStatus(ctx)
		if !sleep.For(ctx, backoff) {
			return false
		}
		backoff = min(max(2*backoff, backoffInitial), backoffMax)
	}
}

// runOnce starts the container's process and waits for it, recording its
// states. It returns the exit code.
func (c *container) runOnce(ctx context.Context) int32 {
	pod, _ := c.pod.current()
	env, err := c.pod.environment(ctx, pod, c.spec)
	if err != nil {
		c.setWaiting("CreateContainerConfigError", err.Error())
		c.pod.syncStatus(ctx)
		// A kubelet retries until the ConfigMap or Secret exists.
		for err != nil {
			if !sleep.For(ctx, 2*time.Second) {
				return -1
			}
			pod, _ = c.pod.current()
			env, err = c.pod.environment(ctx, pod, c.spec)
		}
	}
	c.mu.Lock()
	restart := c.restartCount
	c.mu.Unlock()
	logPath := c.logPath(restart)
	termPath := c.terminationMessagePath()
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err == nil {
		_ = os.MkdirAll(filepath.Dir(termPath), 0o700)
		_ = os.Remove(termPath)
	}

	argv := expandArgs(append(append([]string{}, c.spec.Command...), c.spec.Args...), env)
	if mapped, ok := c.podArgv(argv); ok {
		argv, env = mapped, c.podEnv(env)
	}
	cmd, err := c.command(argv, env, logPath)
	if err == nil {
		err = cmd.Start()
		// The child has its own copy of the log file.
		cmd.Stdout.(*os.File).Close()
	}
	if err != nil {
		return c.terminated(128, "StartError", startErrorMessage(argv, err), time.Now(), logPath)
	}
	exited := make(chan struct{})
	c.mu.Lock()
	c.proc, c.exited = cmd, exited
	killed := c.killing
	c.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
	c.mu.Unlock()
	if killed { // deleted while starting
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	c.pod.syncStatus(ctx)

	started := time.Now()
	err = cmd.Wait()
	close(exited)
	code := int32(0)
	reason := "Completed"
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		ws := ee.Sys().(syscall.WaitStatus)
		switch {
		case ws.Signaled():
			code = 128 + int32(ws.Signal())
		default:
			code = int32(ws.ExitStatus())
		}
		reason = "Error"
	} else if err != nil {
		code, reason = 128, "Error"
	}
	return c.terminated(code, reason, "", started, logPath)
}

// terminated records the end of a run, with the termination message.
func (c *container) terminated(code int32, reason, message string, started time.Time, logPath string) int32 {
	if msg := c.terminationMessage(code, logPath); msg != "" && message == "" {
		message = msg
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: code, Reason: reason, Message: message,
		StartedAt: metav1.NewTime(started), FinishedAt: metav1.Now(),
	}}
	return code
}

func startErrorMessage(argv []string, err error) string {
	if len(argv) == 0 {
		return "the dev node ignores images (but opkit's own, " + OpkitImage + ", when it has an opkit binary) and cannot run a container without a command: set command in the pod spec"
	}
	return fmt.Sprintf("failed to start container process: exec: %q: %v (the dev node runs container commands on the host)", argv[0], errors.Unwrap(err))
}

func (c *container) terminationMessagePath() string {
	p := c.spec.TerminationMessagePath
	if p == "" {
		p = corev1.TerminationMessagePathDefault
	}
	return c.pod.rootPath(p)
}

// terminationMessage reads the message file, falling back to the end of the
// log when the policy says so and the container failed.
func (c *container) terminationMessage(code int32, logPath string) string {
	data, _ := os.ReadFile(c.terminationMessagePath())
	if len(data) == 0 && code != 0 && c.spec.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
		data, _ = os.ReadFile(logPath)
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 80 {
			lines = lines[len(lines)-80:]
		}
		data = []byte(strings.Join(lines, "\n"))
		if len(data) > 2048 {
			data = data[len(data)-2048:]
		}
	}
	if len(data) > maxTerminationMessage {
		data = data[:maxTerminationMessage]
	}
	return string(data)
}

// command builds the process: argv without a shell, the container's
// environment only, its own process group, killed if the node dies.
func (c *container) command(argv []string, env []string, logPath string) (*exec.Cmd, error) {
	if len(argv) == 0 {
		return nil, errors.New("no command")
	}
	path, err := lookPath(argv[0], envValue(env, "PATH"))
	if err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Dir: c.workingDir()}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd, nil
}

func (c *container) workingDir() string {
	dir := c.spec.WorkingDir
	if dir == "" {
		return c.pod.rootPath("/")
	}
	if info, err := os.Stat(dir); err == nil && info.IsDir() {
		return dir
	}
	rooted := c.pod.rootPath(dir)
	_ = os.MkdirAll(rooted, 0o755)
	return rooted
}

// lookPath finds name in pathEnv the way execve(3p) callers do: a name with a
// slash is used as is.
func lookPath(name, pathEnv string) (string, error) {
	if strings.Contains(name, "/") {
		if _, err := os.Stat(name); err != nil {
			return "", fmt.Errorf("%w: %w", exec.ErrNotFound, err)
		}
		return name, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if info, err := os.Stat(p); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: executable file not found in $PATH", exec.ErrNotFound)
}

// kill stops the current process: SIGTERM to its group, SIGKILL after grace.
func (c *container) kill(grace time.Duration) {
	c.mu.Lock()
	c.killing = true
	proc, exited := c.proc, c.exited
	c.mu.Unlock()
	if proc == nil || proc.Process == nil {
		return
	}
	pgid := proc.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-exited
}

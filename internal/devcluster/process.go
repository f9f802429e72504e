package devcluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is one running component of the plane.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	err     error         // its exit status, valid after done
}

// startProcess starts path with args in a new process group, its output
// appended to logPath. The process gets SIGKILL when the thread that started
// it dies (PR_SET_PDEATHSIG); the Go runtime does not end threads that start
// processes, so in practice this means when this process dies.
func startProcess(name, path string, args, env []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own copy
	cmd := exec.Command(path, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id, which is also its process group id.
func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after grace, and
// waits for the process to be reaped.
func (p *process) stop(grace time.Duration) {
	pgid := p.pid()
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
	}
	// Kill what is left of the group, the leader included if it still runs.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.done
}

// exitError describes how the process ended, with the end of its log.
func (p *process) exitError() error {
	status := "exited"
	if p.err != nil {
		status = p.err.Error()
	}
	return fmt.Errorf("%s %s; last lines of %s:\n%s", p.name, status, p.logPath, LogTail(p.logPath, 15))
}

// LogTail returns the last n lines of a log file, each indented by four
// spaces for quoting in an error, or a note why it cannot.
func LogTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if len(data) > 64<<10 {
		data = data[len(data)-64<<10:]
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("    ")
		b.Write(l)
		b.WriteByte('\n')
	}
	return strings.TrimRight(b.String(), "\n")
}

package main

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// planeCPU reads the CPU time of the control plane's kube-apiserver and
// etcd, so that a drain reports what each controller costs the API server
// as well as itself: on a small machine the API server's CPU is the
// controller's, and a change that moves work from one to the other must
// show.
//
// The processes are found in /proc by their command lines: the
// kube-apiserver serving the bench's port, and the etcd that API server
// names in --etcd-servers. A control plane on another machine has none:
// the figures are then not measured.
type planeCPU struct {
	pids []int // kube-apiserver, etcd
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// findPlaneCPU finds the processes of the API server at server (a URL).
func findPlaneCPU(server string) (*planeCPU, error) {
	u, err := url.Parse(server)
	if err != nil {
		return nil, err
	}
	if u.Port() == "" {
		return nil, fmt.Errorf("the API server %s names no port", server)
	}
	procs, err := commandLines()
	if err != nil {
		return nil, err
	}
	apiserver, etcdURLs := 0, ""
	for pid, args := range procs {
		if filepath.Base(args[0]) == "kube-apiserver" && flagValue(args, "--secure-port") == u.Port() {
			apiserver, etcdURLs = pid, flagValue(args, "--etcd-servers")
		}
	}
	if apiserver == 0 || etcdURLs == "" {
		return nil, fmt.Errorf("no local kube-apiserver serves port %s", u.Port())
	}
	for pid, args := range procs {
		if filepath.Base(args[0]) == "etcd" && flagValue(args, "--listen-client-urls") == etcdURLs {
			return &planeCPU{pids: []int{apiserver, pid}}, nil
		}
	}
	return nil, fmt.Errorf("no local etcd listens on %s", etcdURLs)
}

// seconds returns the user and system CPU time the processes have used.
func (p *planeCPU) seconds() (float64, error) { return cpuSeconds(p.pids) }

// cpuSeconds returns the user and system CPU time the processes pids have
// used, read from /proc.
func cpuSeconds(pids []int) (float64, error) {
	var ticks int64
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, err
		}
		// The command name, in parentheses, may hold spaces: the fields
		// are counted from the last ")". utime and stime are the 14th and
		// 15th of the line, the 12th and 13th after the name.
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
		}
		fields := strings.Fields(string(data[i+1:]))
		if len(fields) < 13 {
			return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
		}
		for _, f := range fields[11:13] {
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
			}
			ticks += n
		}
	}
	return float64(ticks) / clockTicks, nil
}

// commandLines returns every readable process's arguments by PID.
func commandLines() (map[int][]string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := map[int][]string{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(data) == 0 {
			continue // gone, or a kernel thread
		}
		out[pid] = strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00")
	}
	return out, nil
}

// flagValue returns the value of --name=value or --name value in args.
func flagValue(args []string, name string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// processCPU is the CPU time of the bench's process and of the children
// it has waited for, user and system.
func processCPU() time.Duration {
	var self, children syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	sum := time.Duration(0)
	for _, r := range []syscall.Rusage{self, children} {
		sum += time.Duration(r.Utime.Nano() + r.Stime.Nano())
	}
	return sum
}

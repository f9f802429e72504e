package clustertest

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// ProcessesMentioning returns the ids of the live processes whose command
// line contains s, for tests that prove nothing was left running. It reads
// /proc, so it works on Linux only; zombies are not counted.
func ProcessesMentioning(s string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 { // gone, or a zombie (empty cmdline)
			continue
		}
		if bytes.Contains(cmdline, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

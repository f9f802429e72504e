package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/opkit-dev/opkit/sdk"
)

// The handlers drain with a Python handler in exec.mode Serve, twice: as
// the bare loop docs/handlers.md shows (handler_bare_loop.py) and on
// opkit's Python SDK (handler_sdk.py, beside the SDK's opkit_handler.py
// as sdk.Python holds it). Both answer each binding context with the
// result the workload's /bin/echo prints, both parse the context, and
// both run on the same python3: what differs is the SDK's cost (issue
// 55: within 10% of the bare loop).

//go:embed handler_bare_loop.py
var handlerBareLoop []byte

//go:embed handler_sdk.py
var handlerSDK []byte

// The Python handlers drains' subjects.
const (
	pythonBareSubject = "opkit, exec mode Serve, python, bare loop"
	pythonSDKSubject  = "opkit, exec mode Serve, python, SDK"
)

// pythonHandler is one Python handler of the drains: opkit in mode Serve
// with its handler's command, and the program's path, by which its
// processes are found.
type pythonHandler struct {
	subject string
	im      impl
	script  string
}

// sdkPython is the oldest Python the SDK runs on (docs/handlers.md).
const sdkPython = "3.11"

// pythonHandlers returns the two Python handlers, prepared the first
// time: the machine's python3 (the first on PATH, resolved to its
// interpreter, so that both run the same one without a launcher in
// front), its version in the notes, and the programs written into the
// work directory with opkit_handler.py beside them. Without a python3 of
// sdkPython or later the drains are left out with a note, or, under
// CI=true, fail the suite.
func (b *bench) pythonHandlers(ctx context.Context) ([]pythonHandler, error) {
	if b.pythonReady != nil {
		return *b.pythonReady, nil
	}
	ready, err := b.preparePythonHandlers(ctx)
	if err != nil {
		if os.Getenv("CI") == "true" || ctx.Err() != nil {
			return nil, fmt.Errorf("the Python handlers: %w", err)
		}
		b.note(fmt.Sprintf("handlers drain, python: left out: %v", err))
		ready = nil
	}
	b.pythonReady = &ready
	return ready, nil
}

func (b *bench) preparePythonHandlers(ctx context.Context) ([]pythonHandler, error) {
	found, err := exec.LookPath("python3")
	if err != nil {
		return nil, err
	}
	// The interpreter and its version, read from it: python3 may be a
	// launcher (pyenv's shim) that starts another program each time.
	out, err := exec.CommandContext(ctx, found, "-c", "import sys; print(sys.executable); print('%d.%d.%d' % sys.version_info[:3]); print(sys.version_info >= ("+strings.ReplaceAll(sdkPython, ".", ", ")+"))").Output()
	if err != nil {
		return nil, fmt.Errorf("python3: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 || lines[0] == "" {
		return nil, fmt.Errorf("python3 says %q, not its interpreter and version", out)
	}
	python, version := lines[0], lines[1]
	if lines[2] != "True" {
		return nil, fmt.Errorf("python3 is Python %s; opkit's SDK needs %s or later", version, sdkPython)
	}
	dir, err := os.MkdirTemp(b.workDir, "python-")
	if err != nil {
		return nil, err
	}
	var handlers []pythonHandler
	for _, f := range []struct {
		name, subject, impl string
		data                []byte
	}{
		{"opkit_handler.py", "", "", sdk.Python},
		{"handler_bare_loop.py", pythonBareSubject, "opkit-python-bare", handlerBareLoop},
		{"handler_sdk.py", pythonSDKSubject, "opkit-python-sdk", handlerSDK},
	} {
		path := filepath.Join(dir, f.name)
		if err := os.WriteFile(path, f.data, 0o644); err != nil {
			return nil, err
		}
		if f.subject == "" {
			continue
		}
		command, err := json.Marshal([]string{python, path})
		if err != nil {
			return nil, err
		}
		handlers = append(handlers, pythonHandler{
			subject: f.subject, script: path,
			im: impl{Name: f.impl, Kind: "opkit", Serve: true, ServeCommand: string(command)},
		})
	}
	b.note(fmt.Sprintf("handlers drain, python: python3 %s (the first python3 on PATH), the same interpreter for the bare loop and the SDK", version))
	return handlers, nil
}

// pythonHandlerDrain: the handlers drain of n Printers with h's handler
// in mode Serve, the archive on; besides the drain's figures, the CPU
// the handler's processes used, from their start (the interpreter's, and
// the SDK's import) to the drain's end, per Printer.
func (b *bench) pythonHandlerDrain(ctx context.Context, h pythonHandler, n int) error {
	return b.handlerDrainWith(ctx, h.im, "printer-exec.yaml", h.subject, tempArchive(b.workDir), n, func() error {
		secs, procs, err := scriptCPU(h.script)
		if err != nil {
			return err
		}
		if procs == 0 {
			return fmt.Errorf("no process of %s runs", h.script)
		}
		b.add("handlers drain", h.subject, "handler CPU per object", "ms", 1000*secs/float64(n))
		b.add("handlers drain", h.subject, "handler processes", "", float64(procs))
		return nil
	})
}

// scriptCPU returns the CPU seconds, user and system, of the processes
// running script (an argument of theirs), and how many they are.
func scriptCPU(script string) (float64, int, error) {
	procs, err := commandLines()
	if err != nil {
		return 0, 0, err
	}
	var pids []int
	for pid, args := range procs {
		if slices.Contains(args, script) {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		return 0, 0, nil
	}
	secs, err := cpuSeconds(pids)
	if err != nil {
		return 0, 0, fmt.Errorf("the CPU of %s's processes: %w", script, err)
	}
	return secs, len(pids), nil
}

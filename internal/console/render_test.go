package console

import (
	"strings"
	"testing"
)

func TestLinkRunsEscapesAndLinksRunIDs(t *testing.T) {
	msg := `handler <b>x</b> failed: run 01m80z9t26dtp4vmqb (https://opkit.example.com/runs/01m80z9t26dtp4vmqb); not 01M80Z9T26DTP4VMQB`
	got := string(linkRuns(msg))
	want := `handler &lt;b&gt;x&lt;/b&gt; failed: run <a href="/runs/01m80z9t26dtp4vmqb">01m80z9t26dtp4vmqb</a>; not 01M80Z9T26DTP4VMQB`
	if got != want {
		t.Errorf("linkRuns:\n got %s\nwant %s", got, want)
	}
}

func TestSplitLogCutsAtLineEnds(t *testing.T) {
	line := strings.Repeat("x", 99) + "\n"
	log := strings.Repeat(line, 2000) // 200,000 bytes
	pages := splitLog(log)
	if len(pages) != 4 || strings.Join(pages, "") != log {
		t.Fatalf("%d pages, rejoined equal: %v", len(pages), strings.Join(pages, "") == log)
	}
	for i, p := range pages[:len(pages)-1] {
		if len(p) > logPageSize || !strings.HasSuffix(p, "\n") {
			t.Errorf("page %d: %d bytes, ends with a newline: %v", i, len(p), strings.HasSuffix(p, "\n"))
		}
	}
	if got := splitLog(""); len(got) != 1 || got[0] != "" {
		t.Errorf("an empty log: %q", got)
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7380": true, "[::1]:7380": true, "localhost:7380": true, "127.1.2.3:0": true,
		"0.0.0.0:7380": false, ":7380": false, "[::]:7380": false, "10.0.0.1:80": false, "example.com:80": false, "nonsense": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

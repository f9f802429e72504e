package clustertest

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// Get GETs a URL and returns its status code and body; a request that
// gets no answer fails the test.
func Get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// Samples reads a Prometheus text exposition: each sample's value by its
// name and labels, written as the exposition writes them (labels sorted by
// name).
func Samples(body string) map[string]float64 {
	out := map[string]float64{}
	for line := range strings.Lines(body) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}
